"""Turn the inputs of an ingest into the list of chunks it must have, reading as little as possible.

The stat cache (path, size, mtime_ns, inode -> sha256 and chunk list) means an unchanged input is
not read at all on a resume; ``verify`` re-reads and re-hashes everything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lakecurate.errors import InputError
from lakecurate.ingest.chunking import SKIP_EMPTY, SKIP_HIDDEN, SKIP_UNSUPPORTED, Inputs
from lakecurate.ingest.cutting import plan_file
from lakecurate.progress import NullReporter, Reporter
from lakecurate.store.state import StateStore
from lakecurate.types import ChunkSpec, Format, Status


@dataclass
class SourceRecord:
    """A stat-cache row to write together with the chunks it describes."""

    path: str
    format: Format
    stat: os.stat_result
    sha256: str
    chunk_size: int


@dataclass
class Plan:
    """The chunks an ingest must have, and what changed since the last one."""

    specs: list[ChunkSpec] = field(default_factory=list)
    fresh: list[ChunkSpec] = field(default_factory=list)  # from files read now: to record
    sources: list[SourceRecord] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)  # committed chunks whose input changed
    retired: list[str] = field(default_factory=list)  # uncommitted chunks whose input changed
    file_errors: list[str] = field(default_factory=list)
    files: int = 0
    files_read: int = 0
    bytes_read: int = 0
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # by kind: chunking.SKIP_*


def make_plan(
    inputs: Inputs,
    chunk_size: int,
    state: StateStore,
    verify: bool = False,
    reporter: Reporter | None = None,
) -> Plan:
    """Discover inputs and cut them into chunks, trusting the stat cache unless ``verify``.

    A folder input is mirrored: files that left it (removed, renamed) have their committed
    chunks superseded, as a clean run of the folder as it is now would not have them.
    """
    reporter = reporter or NullReporter()
    plan = Plan(
        file_errors=list(inputs.problems),
        notes=list(inputs.notes),
        skipped={k: list(v) for k, v in inputs.skipped.items()},
    )
    seen_keys: dict[str, str] = {}
    found = inputs.files
    paths = [p for p, _ in found]
    cache = state.cached_sources(paths)
    known = state.chunks_of_sources(paths)
    passed_over = [p for k in (SKIP_HIDDEN, SKIP_UNSUPPORTED) for p in inputs.skipped.get(k, [])]
    _departed(inputs.given, set(paths), passed_over, state, plan)
    for path, fmt in found:
        plan.files += 1
        try:
            st = os.stat(path)
        except OSError as exc:
            plan.file_errors.append(f"{path}: cannot stat ({exc.strerror})")
            continue
        old = known.get(path, [])
        cached = cache.get(path)
        specs: list[ChunkSpec] | None = None
        if (
            not verify
            and cached is not None
            and cached[:3] == (st.st_size, st.st_mtime_ns, st.st_ino)
            and cached[4] == chunk_size
        ):
            specs = [s for s, _ in old if s.source_sha256 == cached[3]]
        fresh = specs is None
        if specs is None:
            try:
                sha, specs = plan_file(path, fmt, chunk_size)
            except InputError as exc:
                plan.file_errors.append(str(exc))
                continue
            plan.files_read += 1
            plan.bytes_read += st.st_size
            plan.sources.append(SourceRecord(path, fmt, st, sha, chunk_size))
        if st.st_size == 0 and fmt is not Format.PARQUET:  # said on every run, not hidden
            plan.skipped.setdefault(SKIP_EMPTY, []).append(path)
        reporter.file_planned(path, plan.files, len(found), fresh)
        new_keys = {s.chunk_key for s in specs}
        for spec, status in old:
            if spec.chunk_key in new_keys or status is Status.SUPERSEDED:
                continue
            (plan.superseded if status is Status.SUCCESS else plan.retired).append(spec.chunk_key)
        for spec in specs:
            if spec.chunk_key in seen_keys:
                plan.notes.append(
                    f"{path}: chunk {spec.chunk_key} has the same bytes as one of "
                    f"{seen_keys[spec.chunk_key]}; ingested once"
                )
                continue
            seen_keys[spec.chunk_key] = path
            plan.specs.append(spec)
            if fresh:
                plan.fresh.append(spec)
    return plan


def _departed(
    inputs: Sequence[str | Path],
    found: set[str],
    passed_over: Sequence[str],
    state: StateStore,
    plan: Plan,
) -> None:
    """Chunks of files that were below a folder input and are gone from it now.

    A path that still exists but was skipped for a problem (unreadable, now a broken link) is
    not gone: its problem is reported and its rows stay. One that a folder walk no longer reads
    (``passed_over``: hidden, or a format not read; a hidden folder ends with a separator) is
    gone: a clean run of the folder would not have its rows (a lake made before hidden files
    were passed over has some).
    """
    files = set(passed_over)
    folders = tuple(p for p in passed_over if p.endswith(os.sep))
    gone: dict[str, int] = {}
    for raw in inputs:
        folder = os.path.abspath(os.fspath(raw))
        if not os.path.isdir(folder):
            continue
        for path, chunks in state.chunks_under(folder).items():
            if path in found or path in gone:
                continue
            if os.path.lexists(path) and not (path in files or path.startswith(folders)):
                continue
            gone[path] = len(chunks)
            for spec, status in chunks:
                (plan.superseded if status is Status.SUCCESS else plan.retired).append(
                    spec.chunk_key
                )
    if gone:
        state.forget_sources(sorted(gone))
        plan.notes.append(
            f"{len(gone)} file(s) no longer in the input folders; their rows "
            "are removed: " + ", ".join(sorted(gone)[:5]) + (" ..." if len(gone) > 5 else "")
        )
