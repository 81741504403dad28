"""The state folder of an object-store lake, kept on the lake too.

The DuckDB state of an ``s3://`` lake lives on the driver's disk (``lake.paths``). Any machine
can re-derive it from the Delta log (``store.rebuild.catch_up``), but that forgets what the log
does not hold: the stat cache (so every input is read again), the near-dedup band index (built
again from the committed text), the runs and the errors of failed chunks. So every command
that wrote the lake ends by copying the state folder to ``LAKE/_state/``: the state file
(checkpointed first, so it is whole without its WAL), the config and the index files, then a
manifest naming them and the Delta watermark they describe, written last. A machine without
state starts from that copy; ``catch_up`` then brings it forward if the log went on (a run
killed before its copy).

Copied at the end of each command, not after each commit group: the copy costs what the state
weighs, which grows with the lake, while a group's commit must stay flat (issue 14). The
signature files (one per commit, never changed once written) are uploaded once: a file the lake
already has at the same size is not copied again.
"""

from __future__ import annotations

import json
from pathlib import Path

from lakecurate.lake import atomic
from lakecurate.lake.paths import LakePaths
from lakecurate.lake.storage import Location
from lakecurate.store.state import StateStore

STATE_FOLDER = "_state"
MANIFEST = "MANIFEST.json"
WRITTEN_ONCE = ("index/signatures/", "index/keys/")
"""Folders of files never changed once written (a key file's name is unique): uploaded once."""


def _remote(paths: LakePaths) -> Location:
    return paths.storage / STATE_FOLDER


def _local_files(paths: LakePaths) -> list[Path]:
    """What is copied: the index files first, then the config, the state file last."""
    index = sorted(p for p in paths.index.rglob("*") if p.is_file() and not atomic.is_temp(p))
    return [*index, *(p for p in (paths.config, paths.state) if p.exists())]


def save(paths: LakePaths, state: StateStore, watermark: int) -> int:
    """Copy the state folder to the lake (an object-store lake; nothing on local disk);
    returns the bytes uploaded."""
    if paths.shared is None:
        return 0
    import pyarrow.fs as pafs

    state.checkpoint()
    remote, local = _remote(paths), pafs.LocalFileSystem()
    files = _local_files(paths)
    have = {f"{once}{e.rel}": e.size for once in WRITTEN_ONCE for e in (remote / once).files()}
    uploaded = 0
    for path in files:
        rel, size = path.relative_to(paths.root).as_posix(), path.stat().st_size
        if rel.startswith(WRITTEN_ONCE) and have.get(rel) == size:
            continue
        pafs.copy_files(str(path), (remote / rel).fs_path, local, remote.fs)
        uploaded += size
    manifest = {
        "watermark": watermark,
        "files": [p.relative_to(paths.root).as_posix() for p in files],
    }
    (remote / MANIFEST).write_bytes(json.dumps(manifest, indent=1).encode())
    return uploaded


def load(paths: LakePaths) -> int | None:
    """Fill an empty state folder from the lake's copy; returns the Delta watermark the copy
    describes, or None when the lake has no copy."""
    remote = _remote(paths)
    try:
        manifest = json.loads((remote / MANIFEST).read_bytes())
    except FileNotFoundError:
        return None
    for rel in manifest["files"]:
        dest = paths.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic.replacing(dest) as tmp, (remote / rel).open() as src, open(tmp, "wb") as out:
            while block := src.read(1 << 20):
                out.write(block)
    return int(manifest["watermark"])
