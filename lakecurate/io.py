"""Reading one chunk's records, exactly: every line is parsed on its own, and one that does not
parse becomes a *malformed* record carrying its raw bytes and the error, never a failed chunk.

(pyarrow's JSON reader accepts invalid UTF-8 silently and DuckDB's drops bad lines with
``ignore_errors``; per-line ``json.loads`` is exact and fast enough: ~0.45 s per 200 MB.)
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import re
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from lakecurate.errors import PermanentChunkError, TransientError
from lakecurate.types import ChunkSpec, Format

RECORD_SCHEMA = pa.schema([
    ("source_line", pa.int64()), ("id", pa.string()), ("text", pa.string()),
    ("meta", pa.string()), ("raw", pa.binary()), ("kind", pa.string()), ("error", pa.string()),
    ("id_given", pa.bool_()),
])


class _HashingReader(io.RawIOBase):
    """A file wrapper that hashes every byte read, so decompression verifies the input once."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._f.read(len(b))
        self.sha.update(data)
        b[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        while data := self._f.read(1 << 20):
            self.sha.update(data)


class _ZstdFrames(io.RawIOBase):
    """Decompresses every frame of a .zst stream, and fails on a truncated last frame.

    zstandard's ``stream_reader`` just ends at a cut-off frame, so a truncated file would lose
    its tail without an error; a ``decompressobj`` per frame tells whether each frame completed.
    Decoder errors become ``ValueError`` (``ZstdError`` is not one), like gzip's.
    """

    def __init__(self, f: BinaryIO) -> None:
        import zstandard

        self._f = f
        self._dctx = zstandard.ZstdDecompressor()
        self._error = zstandard.ZstdError
        self._obj = self._dctx.decompressobj()
        self._in_frame = False  # input fed to the current frame that has not completed it
        self._out = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while self._pos >= len(self._out):
            if not self._fill():
                return 0
        n = min(len(b), len(self._out) - self._pos)
        b[:n] = self._out[self._pos:self._pos + n]
        self._pos += n
        return n

    def _fill(self) -> bool:
        data = self._f.read(1 << 16)
        if not data:
            if self._in_frame:
                raise ValueError("the last zstd frame is incomplete (truncated file)")
            return False
        out = []
        try:
            while data:
                out.append(self._obj.decompress(data))
                self._in_frame = True
                if not self._obj.eof:
                    break
                data = self._obj.unused_data
                self._obj = self._dctx.decompressobj()
                self._in_frame = False
        except self._error as exc:
            raise ValueError(str(exc)) from exc
        self._out, self._pos = b"".join(out), 0
        return True


_JSON_TYPES = {"dict": "object", "list": "array", "str": "string", "int": "number",
               "float": "number", "bool": "boolean", "NoneType": "null"}


def _type_name(value: object) -> str:
    """A value's type as the user wrote it (JSON names; Parquet-only types keep Python's)."""
    name = type(value).__name__
    return _JSON_TYPES.get(name, name)


class DuplicateKeyError(ValueError):
    """An object names the same key twice (issue 7, hostile input).

    ``json.loads`` keeps the last value and silently drops the others; since parsers disagree on
    which one wins, such a record is rejected as ``malformed:duplicate_key`` (raw bytes kept).
    """


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"duplicate key {key!r} in an object")
            seen.add(key)
    return obj


def _no_constant(name: str) -> object:
    # NaN / Infinity are not JSON (RFC 8259); json.loads accepts them and they would end up as
    # invalid JSON in ``meta``. Rejecting them makes the reader strict (issue 7).
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    # 1e400 parses to inf, which ``meta`` would store as the non-JSON ``Infinity``.
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range of a double")
    return value


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_no_constant,
                            parse_float=_finite_float)
# A lone surrogate can only come from a \uD800-\uDFFF escape (the strict UTF-8 decode lets none
# through), so the costly encode check runs only on lines that may hold one: checking a 200 MB
# text cost a transient 200 MB copy (issue 7, memory). A false positive only costs the check.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class Records:
    """Column builders for one chunk's parsed records."""

    def __init__(self, source_name: str) -> None:
        self.cols: dict[str, list[Any]] = {n: [] for n in RECORD_SCHEMA.names}
        self.source_name = source_name
        self.blank_lines = 0
        self._table: pa.Table | None = None

    def malformed(self, line: int, raw: bytes, kind: str, error: str) -> None:
        self._append(line, f"{self.source_name}:{line}", None, None, raw, kind, error, False)

    def add_object(self, line: int, obj: object, raw: bytes | None) -> None:
        """Validate one decoded record and append it (as a document or as malformed)."""
        if not isinstance(obj, dict):
            self.malformed(line, raw or _dump(obj), "not_object",
                           f"a JSON {_type_name(obj)}, not an object")
            return
        rid = obj.get("id")
        usable = ((isinstance(rid, str) and rid != "")
                  or (isinstance(rid, int) and not isinstance(rid, bool)))
        doc_id = str(rid) if usable else f"{self.source_name}:{line}"
        if "text" not in obj:
            self.malformed(line, raw or _dump(obj), "missing_text", "the record has no 'text'")
            return
        text = obj["text"]
        if not isinstance(text, str):
            self.malformed(line, raw or _dump(obj), "text_not_string",
                           f"'text' is {_type_name(text)}, not a string")
            return
        # An id that cannot name the document (null, "", a float, ...) stays in meta: a kept
        # document has no raw bytes, so dropping it here would lose it for good.
        meta = {k: v for k, v in obj.items() if k != "text" and (k != "id" or not usable)}
        try:
            meta_json = json.dumps(meta, ensure_ascii=False, default=str) if meta else None
        except RecursionError:  # parsed a frame higher up the stack than it is dumped here
            self.malformed(line, raw or b"", "bad_json", "nested too deeply")
            return
        try:
            if raw is None or (b"\\u" in raw and _SURROGATE_ESCAPE.search(raw)):
                text.encode("utf-8")
                doc_id.encode("utf-8")
                if meta_json is not None:
                    meta_json.encode("utf-8")
        except UnicodeEncodeError as exc:
            self.malformed(line, raw or _dump(obj), "invalid_unicode",
                           f"lone surrogate escape: {exc.reason} at {exc.start}")
            return
        self._append(line, doc_id, text, meta_json, None, None, None, usable)

    def add_line(self, line: int, raw: bytes) -> None:
        """Parse one JSONL line (without its newline)."""
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        # isspace() is strip()'s ASCII set without strip()'s copy of the whole line
        if not raw or raw.isspace():
            self.blank_lines += 1
            return
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.malformed(line, raw, "invalid_utf8",
                           f"invalid UTF-8 byte 0x{raw[exc.start]:02x} at offset {exc.start}")
            return
        try:
            if s.startswith("\ufeff"):  # what json.loads says; the decoder itself does not check
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", s, 0)
            obj = _DECODER.decode(s)
        except json.JSONDecodeError as exc:
            # Some messages end in "at" ("Invalid control character at"): no "at at column".
            self.malformed(line, raw, "bad_json",
                           f"{exc.msg.removesuffix(' at')} at column {exc.colno}")
            return
        except RecursionError:
            self.malformed(line, raw, "bad_json", "nested too deeply")
            return
        except DuplicateKeyError as exc:
            self.malformed(line, raw, "duplicate_key", str(exc))
            return
        except ValueError as exc:  # e.g. an integer over sys.get_int_max_str_digits() digits
            self.malformed(line, raw, "bad_json", str(exc))
            return
        self.add_object(line, obj, raw)

    def _append(self, *values: Any) -> None:
        for name, v in zip(RECORD_SCHEMA.names, values, strict=True):
            self.cols[name].append(v)

    def table(self) -> pa.Table:
        """The records as Arrow; the Python lists are released, so that a chunk's text is not
        held twice while the worker runs its SQL (the table is kept for later calls)."""
        if self._table is None:
            self._table = pa.table(self.cols, schema=RECORD_SCHEMA)
            self.cols = {n: [] for n in RECORD_SCHEMA.names}
        return self._table


def _dump(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=True, default=str).encode()


def _split_lines(data: bytes) -> Iterator[bytes]:
    """``data.split(b"\\n")`` without a trailing empty part, one line at a time: a list of
    every line doubled the memory of a chunk (a 200 MB line was held twice)."""
    start = 0
    while (nl := data.find(b"\n", start)) != -1:
        yield data[start:nl]
        start = nl + 1
    if start < len(data):
        yield data[start:]


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


def _changed(spec: ChunkSpec) -> PermanentChunkError:
    return PermanentChunkError(
        f"{spec.source_path} changed after it was planned (chunk {spec.chunk_key}): "
        "re-run the same ingest command to re-plan the changed file"
    )


def _check(spec: ChunkSpec, digest: str) -> None:
    if digest != spec.input_sha256:
        raise _changed(spec)


def _open(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError as exc:
        raise PermanentChunkError(f"{path} disappeared after planning: restore it or re-run "
                                  "the ingest without it") from exc
    except OSError as exc:
        raise TransientError(f"cannot open {path}: {exc.strerror}") from exc


def read_chunk(spec: ChunkSpec) -> Records:
    """All records of one chunk, verified against the chunk's sha256."""
    recs = Records(os.path.basename(spec.source_path))
    if spec.format is Format.PARQUET:
        return _read_parquet(spec, recs)
    with _open(spec.source_path) as f:
        if spec.format is Format.JSONL:
            assert spec.byte_start is not None and spec.byte_end is not None
            f.seek(spec.byte_start)
            data = f.read(spec.byte_end - spec.byte_start)
            _check(spec, hashlib.sha256(data).hexdigest())
            for i, raw in enumerate(_split_lines(data)):
                recs.add_line(spec.first_line + i, raw)
            return recs
        hashing = _HashingReader(f)
        buffered = io.BufferedReader(hashing, 1 << 20)
        line = spec.first_line
        try:
            if spec.format is Format.JSONL_GZ:
                stream: BinaryIO = gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[assignment]
            else:
                stream = io.BufferedReader(_ZstdFrames(buffered), 1 << 20)  # type: ignore[assignment]
            for raw in _lines(stream):
                recs.add_line(line, raw)
                line += 1
        except (EOFError, OSError, zlib.error, ValueError) as exc:
            kind = "gzip" if spec.format is Format.JSONL_GZ else "zstd"
            raise PermanentChunkError(
                f"{spec.source_path}: corrupt or truncated {kind} stream after line "
                f"{line - 1} ({exc}); fix or remove the file and re-run"
            ) from exc
        hashing.drain()
        _check(spec, hashing.sha.hexdigest())
        return recs


def _row_group_span(md: pq.FileMetaData, i: int) -> tuple[int, int]:
    rg = md.row_group(i)
    starts, ends = [], []
    for j in range(rg.num_columns):
        col = rg.column(j)
        start = col.data_page_offset
        if col.has_dictionary_page and col.dictionary_page_offset is not None:
            start = min(start, col.dictionary_page_offset)
        starts.append(start)
        ends.append(start + col.total_compressed_size)
    return min(starts), max(ends)


def parquet_digest(f: BinaryIO, md: pq.FileMetaData, schema: bytes, a: int,
                   b: int) -> tuple[str, int]:
    """sha256 of the schema and the bytes of row groups [a, b): the Parquet chunk's identity."""
    h = hashlib.sha256(schema)
    nbytes = 0
    for i in range(a, b):
        lo, hi = _row_group_span(md, i)
        f.seek(lo)
        data = f.read(hi - lo)
        h.update(data)
        nbytes += len(data)
    return h.hexdigest(), nbytes


def _read_parquet(spec: ChunkSpec, recs: Records) -> Records:
    assert spec.row_group_start is not None and spec.row_group_end is not None
    a, b = spec.row_group_start, spec.row_group_end
    try:
        with _open(spec.source_path) as f:
            pf = pq.ParquetFile(f)
            if b > pf.metadata.num_row_groups:  # rewritten with fewer row groups (IndexError)
                raise _changed(spec)
            _check(spec, parquet_digest(f, pf.metadata, str(pf.schema_arrow).encode(), a, b)[0])
            table = pf.read_row_groups(list(range(a, b)))
    except FileNotFoundError as exc:
        raise PermanentChunkError(f"{spec.source_path} disappeared after planning") from exc
    except (OSError, ValueError) as exc:
        raise PermanentChunkError(f"{spec.source_path}: unreadable Parquet ({exc})") from exc
    for i, row in enumerate(table.to_pylist()):
        recs.add_object(spec.first_line + i, row, None)
    return recs
