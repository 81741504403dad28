"""How one input is cut into deterministic, content-addressed chunks (design section 4); run by
the workers (planning is a task beside processing, issue 14) and by ``verify``.

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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import pyarrow.parquet as pq

from lakecurate.errors import InputError
from lakecurate.ingest.digest import DECOMPRESSORS, HashingReader, parquet_digest
from lakecurate.lake.storage import open_input
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
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


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


def chunk_key(stem: str, index: int, path: str, first_line: int, digest: str) -> str:
    """The key of one chunk: readable stem and index, then its identity (see the module doc).

    The first line is part of it because committed rows carry ``source_line``: the same bytes
    at another line are other rows.
    """
    identity = hashlib.sha256(f"{path}\0{first_line}\0{digest}".encode()).hexdigest()
    return f"{stem}_{index:05d}_{identity[:8]}"


def key_prefix(path: str) -> str:
    """What every chunk key of ``path`` starts with: the driver may decide a chunk whose key
    sorts before it while ``path`` is still being planned (its chunks all come later)."""
    return _stem(path) + "_"


def _stem(path: str) -> str:
    name = os.path.basename(path)
    found = _suffix(name)
    return _UNSAFE.sub("_", name[: len(name) - len(found[0])] if found else name) or "input"


def _read_blocks(path: str) -> Iterator[bytes]:
    try:
        with open_input(path) as f:
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
        with open_input(path) as f:
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
        with open_input(path) as f:
            pf = pq.ParquetFile(f)
            md = pf.metadata  # read now: the footer is all planning needs
            schema = str(pf.schema_arrow).encode()
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError)
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc
    stem = _stem(path)
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
    with open_input(path) as f:
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
