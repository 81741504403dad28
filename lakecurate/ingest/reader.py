"""Reading one chunk's records, exactly: every line is parsed on its own, and one that does not
parse becomes a *malformed* record carrying its raw bytes and the error, never a failed chunk.

(pyarrow's JSON reader accepts invalid UTF-8 silently and DuckDB's drops bad lines with
``ignore_errors``; per-line ``json.loads`` is exact and fast enough: ~0.45 s per 200 MB.)
"""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import json
import lzma
import math
import re
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate.config import IngestConfig, InputConfig
from lakecurate.errors import PermanentChunkError, TransientError, one_line
from lakecurate.ingest.digest import DECOMPRESSORS, HashingReader, parquet_digest
from lakecurate.lake.storage import open_input
from lakecurate.types import ChunkSpec, Format

RECORD_SCHEMA = pa.schema(
    [
        ("source_line", pa.int64()),
        ("id", pa.string()),
        ("text", pa.string()),
        ("meta", pa.string()),
        ("raw", pa.binary()),
        ("kind", pa.string()),
        ("error", pa.string()),
        ("id_given", pa.bool_()),
    ]
)


_JSON_TYPES = {
    "dict": "object",
    "list": "array",
    "str": "string",
    "int": "number",
    "float": "number",
    "bool": "boolean",
    "NoneType": "null",
}


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


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_pairs, parse_constant=_no_constant, parse_float=_finite_float
)
# A lone surrogate can only come from a \uD800-\uDFFF escape (the strict UTF-8 decode lets none
# through), so the costly encode check runs only on lines that may hold one: checking a 200 MB
# text cost a transient 200 MB copy (issue 7, memory). A false positive only costs the check.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


# Records are moved from Python lists into Arrow every this many bytes of text, meta and raw: a
# Python str costs ~50 bytes more than its text, and converting a whole chunk at once held it twice
# (issue D12: a 2 GB compressed chunk drove a worker past 9.5 GB).
_BATCH_BYTES = 32 << 20


class Records:
    """Column builders for one chunk's parsed records.

    The text and the id are read from the fields ``fields`` names (``[input]``: ``text`` and
    ``id`` unless configured). A record without a usable id gets ``<source path>:<line>``: the
    full path the planner gives, so same-named files in two folders cannot collide (issue D11).
    """

    def __init__(self, source: str, fields: InputConfig | None = None) -> None:
        self.source = source
        self.fields = fields or InputConfig()
        self.blank_lines = 0
        self._cols: dict[str, list[Any]] = {n: [] for n in RECORD_SCHEMA.names}
        self._pending = 0
        self._parts: list[pa.Table] = []
        self._table: pa.Table | None = None

    def derived_id(self, line: int) -> str:
        return f"{self.source}:{line}"

    def malformed(self, line: int, raw: bytes, kind: str, error: str) -> None:
        self._append(line, self.derived_id(line), None, None, raw, kind, error, False)

    def add_object(
        self,
        line: int,
        obj: object,
        raw: bytes | None,
        *,
        id_ok: bool = True,
        text_type: str | None = None,
    ) -> None:
        """Validate one decoded record and append it (as a document or as malformed).

        For a Parquet row, ``id_ok`` is false when the id column is neither string nor integer
        (its value then stays in meta, as a float id does in JSON), and ``text_type`` names the
        type of a text column that is not a string column (every row is ``text_not_string``).
        """
        if not isinstance(obj, dict):
            self.malformed(
                line, raw or _dump(obj), "not_object", f"a JSON {_type_name(obj)}, not an object"
            )
            return
        text_field, id_field = self.fields.text_field, self.fields.id_field
        rid = obj.get(id_field)
        usable = id_ok and (
            (isinstance(rid, str) and rid != "")
            or (isinstance(rid, int) and not isinstance(rid, bool))
        )
        doc_id = str(rid) if usable else self.derived_id(line)
        if text_field not in obj:
            self.malformed(
                line, raw or _dump(obj), "missing_text", f"the record has no {text_field!r}"
            )
            return
        text = obj[text_field]
        if text_type is not None or not isinstance(text, str):
            what = text_type if text_type is not None and text is not None else _type_name(text)
            error = f"{text_field!r} is {what}, not a string"
            self.malformed(line, raw or _dump(obj), "text_not_string", error)
            return
        # An id that cannot name the document (null, "", a float, ...) stays in meta: a kept
        # document has no raw bytes, so dropping it here would lose it for good.
        meta = {k: v for k, v in obj.items() if k != text_field and (k != id_field or not usable)}
        try:
            meta_json = _json(meta) if meta else None
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
            self.malformed(
                line,
                raw or _dump(obj),
                "invalid_unicode",
                f"lone surrogate escape: {exc.reason} at {exc.start}",
            )
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
            self.malformed(
                line,
                raw,
                "invalid_utf8",
                f"invalid UTF-8 byte 0x{raw[exc.start]:02x} at offset {exc.start}",
            )
            return
        try:
            if s.startswith("\ufeff"):  # what json.loads says; the decoder itself does not check
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", s, 0)
            obj = _DECODER.decode(s)
        except json.JSONDecodeError as exc:
            # Some messages end in "at" ("Invalid control character at"): no "at at column".
            self.malformed(
                line, raw, "bad_json", f"{exc.msg.removesuffix(' at')} at column {exc.colno}"
            )
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
            self._cols[name].append(v)
        _, _, text, meta, raw, *_ = values
        self._pending += len(text or "") + len(meta or "") + len(raw or b"") + 64
        if self._pending >= _BATCH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._cols["source_line"]:
            self._parts.append(pa.table(self._cols, schema=RECORD_SCHEMA))
            self._cols = {n: [] for n in RECORD_SCHEMA.names}
        self._pending = 0

    def table(self) -> pa.Table:
        """The records as Arrow (batches joined without a copy; kept for later calls)."""
        if self._table is None:
            self._flush()
            self._table = (
                pa.concat_tables(self._parts) if self._parts else RECORD_SCHEMA.empty_table()
            )
            self._parts = []
        return self._table


def _json(value: object, ascii_only: bool = False) -> str:
    """``value`` as JSON text; NaN and ±Infinity (possible in Parquet floats, not JSON) become
    the strings "NaN", "Infinity", "-Infinity" so that ``meta`` stays valid JSON."""
    try:
        return json.dumps(value, ensure_ascii=ascii_only, allow_nan=False, default=str)
    except ValueError:
        return json.dumps(_finite(value), ensure_ascii=ascii_only, allow_nan=False, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _dump(obj: object) -> bytes:
    return _json(obj, ascii_only=True).encode()


def _split_lines(data: bytes) -> Iterator[bytes]:
    """``data.split(b"\\n")`` without a trailing empty part, one line at a time: a list of
    every line doubled the memory of a chunk (a 200 MB line was held twice)."""
    start = 0
    while (nl := data.find(b"\n", start)) != -1:
        yield data[start:nl]
        start = nl + 1
    if start < len(data):
        yield data[start:]


def _bounded_lines(spec: ChunkSpec, stream: io.BufferedIOBase, limit: int) -> Iterator[bytes]:
    """The lines of a decompressed stream, read one at a time so that neither the whole text
    nor one endless line is ever held: past ``limit`` decompressed bytes the chunk fails."""
    total = 0
    while line := stream.readline(limit - total + 1):
        total += len(line)
        if total > limit:
            raise PermanentChunkError(
                f"{spec.source_path} decompresses to more than [ingest].max_compressed_chunk_bytes"
                f" = {limit} bytes ({limit / 2**20:g} MiB) in chunk {spec.chunk_key}: a "
                "chunk is held in memory by one worker, and a compressed file is cut into chunks "
                "of [ingest].chunk_size only at line ends; lower chunk_size, split or recompress "
                "it into smaller shards, or raise the setting if the workers have the memory"
            )
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
        return open_input(path)
    except FileNotFoundError as exc:
        raise PermanentChunkError(
            f"{path} disappeared after planning: restore it or re-run the ingest without it"
        ) from exc
    except OSError as exc:
        raise TransientError(f"cannot open {path}: {exc.strerror}") from exc


def read_chunk(
    spec: ChunkSpec,
    max_decompressed: int = IngestConfig.max_compressed_chunk_bytes,
    fields: InputConfig | None = None,
) -> Records:
    """All records of one chunk, verified against the chunk's sha256.

    ``max_decompressed`` bounds a compressed chunk (``[ingest].max_compressed_chunk_bytes``);
    ``fields`` names the text and id fields (``[input]``).
    """
    recs = Records(spec.source_path, fields)
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
        return _read_compressed(spec, f, recs, max_decompressed)


def _read_compressed(spec: ChunkSpec, f: BinaryIO, recs: Records, limit: int) -> Records:
    """A whole compressed file, hashed as it is read; or one slice of its decompressed text
    (``ChunkSpec.is_slice``): the text before it is decompressed and thrown away, and only the
    slice's bytes are hashed and held."""
    kind, decompress = DECOMPRESSORS[spec.format]
    whole = HashingReader(f)
    line = spec.first_line
    try:
        stream = decompress(io.BufferedReader(whole, 1 << 20))
        if spec.is_slice:
            assert spec.byte_start is not None and spec.byte_end is not None
            skip = spec.byte_start
            while skip and (n := len(stream.read(min(skip, 1 << 20)))):
                skip -= n
            part = HashingReader(stream, spec.byte_end - spec.byte_start)
            stream = io.BufferedReader(part, 1 << 20)
        for raw in _bounded_lines(spec, stream, limit):
            recs.add_line(line, raw)
            line += 1
    except (EOFError, OSError, zlib.error, lzma.LZMAError, ValueError) as exc:
        raise PermanentChunkError(
            f"{spec.source_path}: corrupt or truncated {kind} stream after line "
            f"{line - 1} ({one_line(exc)}); fix or remove the file and re-run"
        ) from exc
    if spec.is_slice:
        _check(spec, part.sha.hexdigest())
    else:
        whole.drain()
        _check(spec, whole.sha.hexdigest())
    return recs


_PARQUET_BATCH_ROWS = 8192


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
    names = table.column_names
    types = {n: _plain_type(table.schema.field(n).type) for n in names}
    id_col, text_col = recs.fields.id_field, recs.fields.text_field
    id_ok = id_col not in types or _is_string(types[id_col]) or pa.types.is_integer(types[id_col])
    text_type = (
        None
        if text_col not in types or _is_string(types[text_col])
        else str(table.schema.field(text_col).type)
    )
    line = spec.first_line
    # A batch at a time: the whole chunk as Python dicts weighed several times its Arrow size.
    for batch in table.to_batches(max_chunksize=_PARQUET_BATCH_ROWS):
        columns = [_column_values(spec, n, batch.column(j)) for j, n in enumerate(names)]
        rows = zip(*columns, strict=True) if columns else itertools.repeat((), batch.num_rows)
        for values in rows:
            recs.add_object(
                line, dict(zip(names, values, strict=True)), None, id_ok=id_ok, text_type=text_type
            )
            line += 1
    return recs


def _plain_type(t: pa.DataType) -> pa.DataType:
    """The type a column's values have once read: dictionary and extension wrappers removed."""
    while isinstance(t, pa.DictionaryType | pa.BaseExtensionType):
        t = t.value_type if isinstance(t, pa.DictionaryType) else t.storage_type
    return t


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _column_values(spec: ChunkSpec, name: str, arr: pa.Array) -> list[Any]:
    """One column's values as JSON-ready Python values; a column that cannot be converted fails
    the chunk for good (the same bytes fail the same way on every attempt)."""
    try:
        return cast(list[Any], _jsonable(arr).to_pylist())
    except pa.ArrowMemoryError:
        raise
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise PermanentChunkError(
            f"{spec.source_path}: Parquet column {name!r} of type {arr.type} cannot be read "
            f"({one_line(exc)}); cast or drop that column in the file and re-run"
        ) from exc


def _is_binary(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def _is_list(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def _needs_conversion(t: pa.DataType) -> bool:
    if isinstance(t, pa.UuidType):
        return True
    if isinstance(t, pa.BaseExtensionType):
        return _needs_conversion(t.storage_type)
    if (
        pa.types.is_dictionary(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
        or pa.types.is_decimal(t)
        or pa.types.is_float16(t)
        or _is_binary(t)
    ):
        return True
    return any(_needs_conversion(t.field(i).type) for i in range(t.num_fields))


_UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_DATE_TIME = r"^(-?\d+-\d\d-\d\d) (.*)$"


def _jsonable(arr: pa.Array) -> pa.Array:
    """``arr`` with every value ``to_pylist`` cannot give exactly, or JSON cannot hold, turned
    into a JSON value without pandas (which ``to_pylist`` asks for at nanoseconds):

    - timestamps: ISO 8601 text with all the digits of the unit (``2024-01-02T03:04:05.123456789``;
      with a time zone, in UTC with a ``Z``); dates and times of day likewise;
    - durations: ISO 8601 ``PT<seconds>S`` with all the digits of the unit (``-PT1.500000001S``);
    - decimals: their exact decimal text (``"-12.50"``); half floats: floats;
    - binary: base64 text; a UUID: its canonical text; dictionaries: their values;
    - lists, structs and maps: the same, element by element (a map stays a list of pairs).

    A value out of the range Arrow can print (a timestamp past year 9999 in seconds) keeps
    Arrow's own text for it; floats NaN/±Infinity are handled when dumping (``_json``).
    """
    t = arr.type
    if not _needs_conversion(t):
        return arr
    if isinstance(t, pa.UuidType):
        return pa.array([None if v is None else str(v) for v in arr.to_pylist()], pa.string())
    if isinstance(t, pa.BaseExtensionType):
        return _jsonable(arr.storage)
    if pa.types.is_dictionary(t):
        return _jsonable(arr.dictionary_decode())
    if pa.types.is_timestamp(t):
        zoned = t.tz is not None
        text = arr.cast(pa.timestamp(t.unit)) if zoned else arr
        return pc.replace_substring_regex(
            text.cast(pa.string()), _DATE_TIME, r"\1T\2Z" if zoned else r"\1T\2"
        )
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_decimal(t):
        return arr.cast(pa.string())
    if pa.types.is_float16(t):
        return arr.cast(pa.float64())
    if pa.types.is_duration(t):
        digits = _UNIT_DIGITS[t.unit]
        return pa.array(
            [
                None if v is None else _iso_duration(v, digits)
                for v in arr.cast(pa.int64()).to_pylist()
            ],
            pa.string(),
        )
    if _is_binary(t):
        return pa.array(
            [None if v is None else base64.b64encode(v).decode("ascii") for v in arr.to_pylist()],
            pa.string(),
        )
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):
        children = [_jsonable(c) for c in arr.flatten()]
        fields = [pa.field(t.field(i).name, c.type) for i, c in enumerate(children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    if pa.types.is_map(t):
        arr = pa.concat_arrays([arr])  # a compact copy: its offsets and entries are its own
        entries = arr.values
        return pa.MapArray.from_arrays(
            arr.offsets, _jsonable(entries.field(0)), _jsonable(entries.field(1)), mask=mask
        )
    if _is_list(t):
        # flatten() and value_lengths() honour slices, nulls and list views alike (a cast of a
        # list view to a list gave wrong values in pyarrow 26).
        lengths = pc.fill_null(arr.value_lengths(), 0).cast(pa.int64())
        offsets = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(lengths)])
        return pa.LargeListArray.from_arrays(offsets, _jsonable(arr.flatten()), mask=mask)
    return arr  # e.g. a union: to_pylist decides, a failure names the column


def _iso_duration(value: int, digits: int) -> str:
    seconds, fraction = divmod(abs(value), 10**digits)
    tail = f".{fraction:0{digits}d}" if digits else ""
    return f"{'-' if value < 0 else ''}PT{seconds}{tail}S"
