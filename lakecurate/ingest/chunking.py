"""Deterministic, content-addressed chunks (design section 4).

A chunk key is ``<stem>_<index:05d>_<8 hex>``, the hex naming the chunk's identity: its source
path, its first line and the sha256 of its bytes. The same bytes at the same place always give the
same key and a changed input gives new keys; identical bytes in two files (a/data.jsonl and
b/data.jsonl, common in crawl mirrors) are two chunks, each owned by its own file, so changing one
file can never take the other's rows with it (issue 12, D6). Plain JSONL is cut at newline
boundaries near the target size; Parquet by groups of row groups; compressed JSONL
is one chunk while its text fits ``chunk_size``, else cut at newlines of its decompressed text.

Which files are read is one table, ``_SUFFIXES``: JSON lines under any of its usual names
(``.jsonl``, ``.ndjson``, and ``.json`` when compressed: how C4 and Dolma ship), plain or compressed
(gzip, zstd, bzip2, xz), and Parquet. The stem in a chunk key is the name without the matched
suffix, so the keys of the formats read before the aliases existed are unchanged.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow.parquet as pq

from lakecurate.errors import InputError
from lakecurate.ingest.digest import DECOMPRESSORS, HashingReader, parquet_digest
from lakecurate.lake.paths import LakePaths
from lakecurate.types import ChunkSpec, Format

_BLOCK = 8 * 1024 * 1024
_COMPRESSIONS = {
    "": Format.JSONL,
    ".gz": Format.JSONL_GZ,
    ".zst": Format.JSONL_ZST,
    ".bz2": Format.JSONL_BZ2,
    ".xz": Format.JSONL_XZ,
}
# A plain ``.json`` is not read from a folder: it is as often one JSON document (a dataset's
# metadata) as JSON lines, and reading it as records would fail the run on a stray info file.
_SUFFIXES: tuple[tuple[str, Format], ...] = tuple(
    sorted(
        [
            (name + compression, fmt)
            for name in (".jsonl", ".ndjson", ".json")
            for compression, fmt in _COMPRESSIONS.items()
            if name + compression != ".json"
        ]
        + [(".parquet", Format.PARQUET)],
        key=lambda pair: -len(pair[0]),  # the longest suffix wins (.jsonl.gz before .gz)
    )
)
READS = "JSON lines (.jsonl, .ndjson, .json.gz; plain or .gz, .zst, .bz2, .xz) and .parquet"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

# Why a file below an input folder was not read (``Inputs.skipped`` keys, in the order shown).
SKIP_UNSUPPORTED = "unsupported"
SKIP_HIDDEN = "hidden"
SKIP_EMPTY = "empty"
_SKIP_WHY = {
    SKIP_UNSUPPORTED: f"not a format lakecurate reads (it reads {READS})",
    SKIP_HIDDEN: "hidden (the name starts with '.'); name one on the command line to read it",
    SKIP_EMPTY: "empty file (0 bytes), no records",
}
_EXAMPLES = 5


def _suffix(path: str) -> tuple[str, Format] | None:
    lower = path.lower()
    for suffix, fmt in _SUFFIXES:
        if lower.endswith(suffix):
            return suffix, fmt
    return None


def detect_format(path: str) -> Format | None:
    """The input format from the file name, or None for files lakecurate does not read."""
    found = _suffix(path)
    return found[1] if found else None


def _extension(path: str) -> str:
    """How a skipped file's name ends, for the summary: ``.txt``, ``.json``, ``no extension``."""
    name = os.path.basename(path).lstrip(".")
    return "." + name.rsplit(".", 1)[1].lower() if "." in name else "no extension"


def _hint(path: str) -> str:
    """What to do with a plain ``.json`` (see ``_SUFFIXES``), else nothing."""
    json_file = _extension(path) == ".json"
    return "; rename a .json holding one JSON object per line to .jsonl" if json_file else ""


def skipped_lines(skipped: dict[str, list[str]]) -> list[str]:
    """One line per kind of skipped file: how many, why, and a few of them."""
    lines = []
    for kind, why in _SKIP_WHY.items():
        paths = sorted(skipped.get(kind, []))
        if not paths:
            continue
        counts: dict[str, int] = {}
        for p in paths:
            counts[_extension(p)] = counts.get(_extension(p), 0) + 1
        what = (
            " (" + ", ".join(f"{n} {e}" for e, n in sorted(counts.items())) + ")"
            if kind == SKIP_UNSUPPORTED
            else ""
        )
        more = f" and {len(paths) - _EXAMPLES:,} more" if len(paths) > _EXAMPLES else ""
        hint = _hint("x.json") if ".json" in counts else ""
        lines.append(
            f"skipped {len(paths):,} file(s){what}: {why}{hint}: "
            + ", ".join(paths[:_EXAMPLES])
            + more
        )
    return lines


def chunk_key(stem: str, index: int, path: str, first_line: int, digest: str) -> str:
    """The key of one chunk: readable stem and index, then its identity (see the module doc).

    The first line is part of it because committed rows carry ``source_line``: the same bytes
    at another line are other rows.
    """
    identity = hashlib.sha256(f"{path}\0{first_line}\0{digest}".encode()).hexdigest()
    return f"{stem}_{index:05d}_{identity[:8]}"


def _stem(path: str) -> str:
    name = os.path.basename(path)
    found = _suffix(name)
    return _UNSAFE.sub("_", name[: len(name) - len(found[0])] if found else name) or "input"


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
    formats, and what was skipped (``problems``: unreadable entries; ``notes``: lakes;
    ``skipped``: files below a folder that are not read, by kind: ``SKIP_*``)."""

    given: list[str]
    files: list[tuple[str, Format]]
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)


def find_inputs(given: Sequence[str], lake: Path | None) -> Inputs:
    """Discover ``given`` for an ingest into ``lake``; raises InputError for a bad path."""
    found = Inputs(list(given), [])
    found.files = discover(
        found.given, found.problems, lake=lake, notes=found.notes, skipped=found.skipped
    )
    return found


def discover(
    inputs: Iterable[str | Path],
    problems: list[str] | None = None,
    *,
    lake: Path | None = None,
    notes: list[str] | None = None,
    skipped: dict[str, list[str]] | None = None,
) -> list[tuple[str, Format]]:
    """Expand files and folders into (absolute path, format), sorted, without following links.

    A folder contributes every file with a known suffix; a file named explicitly must have one.
    The other files of a folder, and its hidden files and folders (names starting with '.':
    ``.git``, macOS's ``._x.jsonl``), are not read; when ``skipped`` is given they are listed
    there by kind, so that none vanishes without a word (issue 16).
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
    skipped = {} if skipped is None else skipped
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
                lakes = [
                    d
                    for d in dirnames
                    if os.path.join(dirpath, d) == own or is_lake(os.path.join(dirpath, d))
                ]
                for name in lakes:
                    dirnames.remove(name)
                    if notes is not None:
                        notes.append(f"{os.path.join(dirpath, name)}: a lake, not read as input")
                for name in [d for d in dirnames if d.startswith(".")]:
                    dirnames.remove(name)
                    skipped.setdefault(SKIP_HIDDEN, []).append(os.path.join(dirpath, name, ""))
                dirnames.sort()
                for name in sorted(filenames):
                    full = os.path.join(dirpath, name)
                    fmt = detect_format(full)
                    skip = SKIP_HIDDEN if name.startswith(".") else SKIP_UNSUPPORTED
                    if name.startswith(".") or not fmt:
                        skipped.setdefault(skip, []).append(full)
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
                    f"{raw}: unknown input format; lakecurate reads {READS} files{_hint(path)}"
                )
            found[path] = fmt
        elif os.path.lexists(path):
            raise InputError(f"{raw}: not a readable file or folder (broken link?)")
        else:
            raise InputError(f"{raw}: no such file or folder")
    if not found:
        seen = ", ".join(f"{len(v):,} {k}" for k, v in sorted(skipped.items()))
        raise InputError(
            f"no input files found in {', '.join(map(str, inputs))}"
            + (f" (skipped: {seen})" if seen else "")
            + f"; lakecurate reads {READS}"
        )
    return sorted(found.items())


def _read_blocks(path: str) -> Iterator[bytes]:
    try:
        with open(path, "rb") as f:
            while block := f.read(_BLOCK):
                yield block
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc


@dataclass(frozen=True)
class _Piece:
    """A run of whole lines: where it starts, how long it is, its first line and its sha256."""

    start: int
    size: int
    first_line: int
    digest: str


def _cut(blocks: Iterable[bytes], chunk_size: int) -> Iterator[_Piece]:
    """Cut a stream of bytes at the first newline at or after every ``chunk_size`` bytes."""
    h = hashlib.sha256()
    start = size = lines = 0
    first_line = 1
    for block in blocks:
        offset = 0
        while offset < len(block):
            need = max(chunk_size - size, 1)
            nl = block.find(b"\n", offset + need - 1) if offset + need <= len(block) else -1
            piece = block[offset:] if nl == -1 else block[offset : nl + 1]
            h.update(piece)
            size += len(piece)
            lines += piece.count(b"\n")
            if nl == -1:
                break
            yield _Piece(start, size, first_line, h.hexdigest())
            start, first_line = start + size, first_line + lines
            size = lines = 0
            h = hashlib.sha256()
            offset = nl + 1
    if size:
        yield _Piece(start, size, first_line, h.hexdigest())


def _line_specs(path: str, fmt: Format, pieces: Iterable[_Piece]) -> tuple[str, list[ChunkSpec]]:
    """One chunk per piece; the source sha256 names the pieces' digests in order."""
    stem = _stem(path)
    chunk_hashes = hashlib.sha256()
    specs: list[ChunkSpec] = []
    for idx, p in enumerate(pieces):
        chunk_hashes.update(bytes.fromhex(p.digest))
        specs.append(
            ChunkSpec(
                chunk_key=chunk_key(stem, idx, path, p.first_line, p.digest),
                source_path=path,
                source_sha256="",
                format=fmt,
                chunk_index=idx,
                first_line=p.first_line,
                input_sha256=p.digest,
                input_bytes=p.size,
                byte_start=p.start,
                byte_end=p.start + p.size,
            )
        )
    return _with_source_sha(specs, chunk_hashes.hexdigest())


def _plan_jsonl(path: str, chunk_size: int) -> tuple[str, list[ChunkSpec]]:
    return _line_specs(path, Format.JSONL, _cut(_read_blocks(path), chunk_size))


def _with_source_sha(specs: list[ChunkSpec], sha: str) -> tuple[str, list[ChunkSpec]]:
    return sha, [replace(s, source_sha256=sha) for s in specs]


def _plan_compressed(path: str, fmt: Format, chunk_size: int) -> tuple[str, list[ChunkSpec]]:
    """A compressed file read as a stream: one chunk named by the file's bytes while its text
    fits ``chunk_size`` (the key it always had), else one chunk per ``chunk_size`` of
    decompressed text (``ChunkSpec.is_slice``), so a large shard is many units of work, memory
    and resume. A stream that does not decompress stays one chunk: its worker says what is
    wrong with it, as for any corrupt file."""
    pieces: list[_Piece] = []
    try:
        with open(path, "rb") as f:
            whole = HashingReader(f)
            try:
                stream = DECOMPRESSORS[fmt][1](io.BufferedReader(whole, _BLOCK))
                pieces = list(_cut(iter(lambda: stream.read(_BLOCK), b""), chunk_size))
            except (EOFError, OSError, ValueError, zlib.error, lzma.LZMAError):
                pieces = []  # corrupt (gzip's BadGzipFile is an OSError): one chunk, as before
            whole.drain()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    if len(pieces) > 1:
        return _line_specs(path, fmt, pieces)
    digest, size = whole.sha.hexdigest(), whole.nbytes
    if size == 0:
        return digest, []
    spec = ChunkSpec(
        chunk_key=chunk_key(_stem(path), 0, path, 1, digest),
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
    stem = _stem(path)
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
    return _plan_compressed(path, fmt, chunk_size)
