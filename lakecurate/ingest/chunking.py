"""Deterministic, content-addressed chunks (design section 4).

A chunk key is ``<stem>_<index:05d>_<8 hex>``, the hex naming the chunk's identity: its source
path, its first line and the sha256 of its bytes. The same bytes at the same place always give the
same key and a changed input gives new keys; identical bytes in two files (a/data.jsonl and
b/data.jsonl, common in crawl mirrors) are two chunks, each owned by its own file, so changing one
file can never take the other's rows with it (issue 12, D6). Plain JSONL is cut at newline
boundaries near the target size; Parquet by groups of row groups; compressed JSONL is one chunk.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow.parquet as pq

from lakecurate.errors import InputError
from lakecurate.ingest.digest import parquet_digest
from lakecurate.lake.paths import LakePaths
from lakecurate.types import ChunkSpec, Format

_BLOCK = 8 * 1024 * 1024
_SUFFIXES = (
    (".jsonl.gz", Format.JSONL_GZ),
    (".jsonl.zst", Format.JSONL_ZST),
    (".jsonl", Format.JSONL),
    (".parquet", Format.PARQUET),
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def detect_format(path: str) -> Format | None:
    """The input format from the file name, or None for files lakecurate does not read."""
    lower = path.lower()
    for suffix, fmt in _SUFFIXES:
        if lower.endswith(suffix):
            return fmt
    return None


def chunk_key(stem: str, index: int, path: str, first_line: int, digest: str) -> str:
    """The key of one chunk: readable stem and index, then its identity (see the module doc).

    The first line is part of it because committed rows carry ``source_line``: the same bytes
    at another line are other rows.
    """
    identity = hashlib.sha256(f"{path}\0{first_line}\0{digest}".encode()).hexdigest()
    return f"{stem}_{index:05d}_{identity[:8]}"


def _stem(path: str, fmt: Format) -> str:
    name = os.path.basename(path)
    return _UNSAFE.sub("_", name[: len(name) - len(fmt.value) - 1]) or "input"


def _bad_name(path: str) -> str | None:
    """Why a path cannot be ingested by name, or None.

    A name that is not valid UTF-8 comes back from the OS with surrogate escapes; DuckDB and
    Arrow refuse such strings, so before this check one such file crashed the whole ingest.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return f"{shown}: the file name is not valid UTF-8; rename the file and re-run"
    return None


def is_lake(folder: str) -> bool:
    """A lakecurate lake, or a Delta table (a lake's ``documents/``, or anyone's)."""
    lake = LakePaths(Path(folder))
    return os.path.isdir(os.path.join(folder, "_delta_log")) or (
        lake.state.is_file() and lake.documents.is_dir()
    )


def _inside_lake(path: str, lake: str | None) -> str | None:
    """The lake or Delta table that ``path`` is in (or is), if any."""
    parts = path
    while True:
        if (lake is not None and parts == lake) or (os.path.isdir(parts) and is_lake(parts)):
            return parts
        parent = os.path.dirname(parts)
        if parent == parts:
            return None
        parts = parent


@dataclass
class Inputs:
    """The inputs of one ingest, discovered once: what was given, the files found with their
    formats, and what was skipped (``problems``: unreadable entries; ``notes``: lakes)."""

    given: list[str]
    files: list[tuple[str, Format]]
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def find_inputs(given: Sequence[str], lake: Path | None) -> Inputs:
    """Discover ``given`` for an ingest into ``lake``; raises InputError for a bad path."""
    found = Inputs(list(given), [])
    found.files = discover(found.given, found.problems, lake=lake, notes=found.notes)
    return found


def discover(
    inputs: Iterable[str | Path],
    problems: list[str] | None = None,
    *,
    lake: Path | None = None,
    notes: list[str] | None = None,
) -> list[tuple[str, Format]]:
    """Expand files and folders into (absolute path, format), sorted, without following links.

    A folder contributes every file with a known suffix; a file named explicitly must have one.
    An entry of a folder that has a known suffix but cannot be read as a file (a broken link, a
    symlink loop, a FIFO, a name that is not UTF-8) is skipped, and when ``problems`` is given a
    message naming it is added there: it must never vanish without a word (issue 7).

    A lake is never input: an input inside ``lake`` or any other lake (a folder with
    ``state.duckdb`` and ``documents/``, or a Delta table) is refused, and such folders below
    an input folder are skipped with a note (issue 12, D10: `ingest .` with the lake inside
    the input read the lake's own data files on every run).
    """
    inputs = list(inputs)  # iterated twice: a generator would leave the error message empty
    found: dict[str, Format] = {}
    own = os.path.abspath(lake) if lake is not None else None
    for raw in inputs:
        path = os.path.abspath(os.fspath(raw))
        if (why := _bad_name(path)) is not None:
            raise InputError(why)
        if (inside := _inside_lake(path, own)) is not None:
            raise InputError(
                f"{raw}: is inside the lake or Delta table {inside}; a lake is "
                "never read as input (export a version to read its documents)"
            )
        if os.path.isdir(path):
            for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
                skipped = [
                    d
                    for d in dirnames
                    if os.path.join(dirpath, d) == own or is_lake(os.path.join(dirpath, d))
                ]
                for name in skipped:
                    dirnames.remove(name)
                    if notes is not None:
                        notes.append(f"{os.path.join(dirpath, name)}: a lake, not read as input")
                dirnames.sort()
                for name in sorted(filenames):
                    full = os.path.join(dirpath, name)
                    fmt = detect_format(full)
                    if not fmt:
                        continue
                    why = _bad_name(full)
                    if why is None and not os.path.isfile(full):
                        kind = (
                            "a broken link or a symlink loop"
                            if os.path.islink(full)
                            else "not a regular file"
                        )
                        why = f"{full}: {kind}; skipped"
                    if why is None:
                        found[full] = fmt
                    elif problems is not None:
                        problems.append(why)
        elif os.path.isfile(path):
            fmt = detect_format(path)
            if fmt is None:
                raise InputError(
                    f"{raw}: unknown input format; lakecurate reads .jsonl, .jsonl.gz, "
                    ".jsonl.zst and .parquet files"
                )
            found[path] = fmt
        elif os.path.lexists(path):
            raise InputError(f"{raw}: not a readable file or folder (broken link?)")
        else:
            raise InputError(f"{raw}: no such file or folder")
    if not found:
        raise InputError(
            "no input files found (looked for .jsonl, .jsonl.gz, .jsonl.zst, "
            ".parquet in: " + ", ".join(map(str, inputs)) + ")"
        )
    return sorted(found.items())


def _read_blocks(path: str) -> Iterator[bytes]:
    try:
        with open(path, "rb") as f:
            while block := f.read(_BLOCK):
                yield block
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc


def _plan_jsonl(path: str, chunk_size: int) -> tuple[str, list[ChunkSpec]]:
    stem = _stem(path, Format.JSONL)
    specs: list[ChunkSpec] = []
    chunk_hashes = hashlib.sha256()
    state = {"start": 0, "size": 0, "lines": 0, "first_line": 1}
    h = hashlib.sha256()

    def consume(piece: bytes) -> None:
        h.update(piece)
        state["size"] += len(piece)
        state["lines"] += piece.count(b"\n")

    def emit() -> None:
        nonlocal h
        digest = h.hexdigest()
        chunk_hashes.update(bytes.fromhex(digest))
        idx = len(specs)
        specs.append(
            ChunkSpec(
                chunk_key=chunk_key(stem, idx, path, state["first_line"], digest),
                source_path=path,
                source_sha256="",
                format=Format.JSONL,
                chunk_index=idx,
                first_line=state["first_line"],
                input_sha256=digest,
                input_bytes=state["size"],
                byte_start=state["start"],
                byte_end=state["start"] + state["size"],
            )
        )
        state["start"] += state["size"]
        state["first_line"] += state["lines"]
        state["size"] = state["lines"] = 0
        h = hashlib.sha256()

    for block in _read_blocks(path):
        offset = 0
        while offset < len(block):
            need = max(chunk_size - state["size"], 1)
            nl = block.find(b"\n", offset + need - 1) if offset + need <= len(block) else -1
            if nl == -1:
                consume(block[offset:])
                break
            consume(block[offset : nl + 1])
            emit()
            offset = nl + 1
    if state["size"]:
        emit()
    return _with_source_sha(specs, chunk_hashes.hexdigest())


def _with_source_sha(specs: list[ChunkSpec], sha: str) -> tuple[str, list[ChunkSpec]]:
    return sha, [replace(s, source_sha256=sha) for s in specs]


def _plan_whole(path: str, fmt: Format) -> tuple[str, list[ChunkSpec]]:
    h = hashlib.sha256()
    size = 0
    for block in _read_blocks(path):
        h.update(block)
        size += len(block)
    digest = h.hexdigest()
    if size == 0:
        return digest, []
    spec = ChunkSpec(
        chunk_key=chunk_key(_stem(path, fmt), 0, path, 1, digest),
        source_path=path,
        source_sha256=digest,
        format=fmt,
        chunk_index=0,
        first_line=1,
        input_sha256=digest,
        input_bytes=size,
        byte_start=0,
        byte_end=size,
    )
    return digest, [spec]


def _plan_parquet(path: str, chunk_size: int) -> tuple[str, list[ChunkSpec]]:
    try:
        pf = pq.ParquetFile(path)
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError)
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc
    md = pf.metadata
    stem = _stem(path, Format.PARQUET)
    schema = str(pf.schema_arrow).encode()
    groups: list[tuple[int, int]] = []
    start, size = 0, 0
    for i in range(md.num_row_groups):
        size += md.row_group(i).total_byte_size
        if size >= chunk_size:
            groups.append((start, i + 1))
            start, size = i + 1, 0
    if start < md.num_row_groups:
        groups.append((start, md.num_row_groups))
    specs: list[ChunkSpec] = []
    source = hashlib.sha256(schema)
    rows_before = 0
    with open(path, "rb") as f:
        for idx, (a, b) in enumerate(groups):
            digest, nbytes = parquet_digest(f, md, schema, a, b)
            source.update(bytes.fromhex(digest))
            specs.append(
                ChunkSpec(
                    chunk_key=chunk_key(stem, idx, path, rows_before + 1, digest),
                    source_path=path,
                    source_sha256="",
                    format=Format.PARQUET,
                    chunk_index=idx,
                    first_line=rows_before + 1,
                    input_sha256=digest,
                    input_bytes=nbytes,
                    row_group_start=a,
                    row_group_end=b,
                )
            )
            rows_before += sum(md.row_group(i).num_rows for i in range(a, b))
    return _with_source_sha(specs, source.hexdigest())


def plan_file(path: str, fmt: Format, chunk_size: int) -> tuple[str, list[ChunkSpec]]:
    """Read one input and cut it into chunks; returns (source sha256, chunk specs)."""
    if fmt is Format.JSONL:
        return _plan_jsonl(path, chunk_size)
    if fmt is Format.PARQUET:
        return _plan_parquet(path, chunk_size)
    return _plan_whole(path, fmt)
