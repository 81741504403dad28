"""The staged file: vocabulary shared by the worker (which writes it) and the driver (reads it).

A staged file is ``staging/<chunk_key>.<config_hash>.parquet``: the decided rows of one chunk, its
``ChunkResult`` in the footer, and a sha256 seal over the whole file so damage is found on read.
Written through a temp file, fsync and an atomic rename, so a reader never sees a partial file.

The driver reads only a staged file's key columns (``read_keys``: ids, hashes, verdicts and the
near-dedup signatures, never the text) and answers with a *patch*: the rows whose verdict its
lake-wide decisions changed. A worker applies the patch to the whole file (``apply_patch``)
and writes the table's data files, so document text never passes through the driver.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate import faults
from lakecurate.lake import atomic
from lakecurate.schema import BANDS_COLUMN, DECISION_COLUMNS, KEY_COLUMNS, SIGNATURE_COLUMN
from lakecurate.types import ChunkResult

RESULT_KEY = b"lakecurate.result"


def staged_name(chunk_key: str, config_hash: str) -> str:
    """The staged file of a chunk under one config; the name says what it holds."""
    return f"{chunk_key}.{config_hash}.parquet"


def write_atomic_parquet(table: pa.Table, path: Path) -> None:
    """Write, seal with a checksum, fsync and rename, so a reader never sees a partial file
    and a file damaged later (a bit flip, a truncation) is found by ``read_staged_result``."""
    with atomic.replacing(path) as tmp:
        with pq.ParquetWriter(tmp, table.schema, compression="zstd") as writer:
            writer.write_table(table)
            writer.add_key_value_metadata({CHECKSUM_KEY: _CHECKSUM_HOLE})
        _seal(tmp)
        faults.hit("staged_write", path.name)


def read_staged_result(path: Path) -> ChunkResult | None:
    """The result stored in a staged file, or None if the file is absent, not ours, or fails
    its checksum. A damaged file (or one from before checksums) is deleted: the caller redoes
    the chunk instead of committing what the file now says."""
    try:
        md = pq.read_metadata(path).metadata or {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, pa.ArrowException):  # a torn or garbled footer
        _discard(path)
        return None
    if RESULT_KEY not in md:
        return None  # not a staged file of ours: leave it alone
    try:
        sealed = _sealed(path, md.get(CHECKSUM_KEY))
        data = json.loads(md[RESULT_KEY])
        data["filter_stats"] = [tuple(x) for x in data["filter_stats"]]
        result = ChunkResult(**data)
    except (OSError, ValueError, TypeError, KeyError):
        sealed, result = False, None
    if not sealed:
        _discard(path)
        return None
    return result


ROW = "staged_row"
"""The position of a row in its staged file: how a patch names the rows it changes."""


def read_keys(path: str | Path) -> pa.Table:
    """The columns the driver decides a staged chunk on (the near-dedup signatures too, when
    the file has them), plus each row's position; the text is never read."""
    present = set(pq.read_schema(path).names)
    names = [c for c in (*KEY_COLUMNS, SIGNATURE_COLUMN, BANDS_COLUMN) if c in present]
    keys = pq.read_table(path, columns=names).replace_schema_metadata(None)
    return keys.append_column(ROW, pa.array(np.arange(keys.num_rows, dtype=np.int64)))


def patch_of(keys: pa.Table, decided: pa.Table) -> bytes:
    """The rows of ``decided`` (the driver's verdicts on ``keys``, any order) whose decision
    columns differ from the staged ones, as Arrow IPC bytes: small, and picklable anywhere."""
    decided = decided.sort_by(ROW)
    if decided.num_rows != keys.num_rows:
        raise ValueError(f"decided {decided.num_rows} rows of a chunk of {keys.num_rows}")
    changed = pa.array(np.zeros(keys.num_rows, dtype=bool))
    for name in DECISION_COLUMNS:
        before, after = keys[name], decided[name].cast(keys[name].type)
        differs = pc.or_(
            pc.fill_null(pc.not_equal(before, after), False),
            pc.xor(pc.is_null(before), pc.is_null(after)),
        )
        changed = pc.or_(changed, differs)
    patch = decided.filter(changed).select([ROW, *DECISION_COLUMNS])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, patch.schema) as writer:
        writer.write_table(patch)
    return bytes(sink.getvalue())


def apply_patch(rows: pa.Table, patch: bytes) -> pa.Table:
    """A staged chunk's rows (in staged order) with the driver's verdicts of ``patch``."""
    changes = pa.ipc.open_stream(patch).read_all()
    where = np.full(rows.num_rows, -1, dtype=np.int64)
    where[changes[ROW].to_numpy()] = np.arange(changes.num_rows)
    patched = pa.array(where >= 0)
    take = pa.array(where, mask=where < 0)
    for name in DECISION_COLUMNS:
        column = rows[name]
        value = pc.take(changes[name].cast(column.type), take)
        rows = rows.set_column(
            rows.schema.get_field_index(name), name, pc.if_else(patched, value, column)
        )
    return rows


SAMPLE_EVERY = 100
"""``keep_rejected_text = "sample"``: the text stays for rows at a line number divisible by this."""


def without_rejected_text(rows: pa.Table, mode: str) -> pa.Table:
    """Drop the text of documents a quality filter rejected (``mode``: ``drop``, or
    ``sample`` to keep one in ``SAMPLE_EVERY``); ``keep`` leaves ``rows`` as they are. Only a
    filter's verdict is final: a duplicate keeps its text, it may become the kept copy."""
    if mode == "keep":
        return rows
    gone = pc.fill_null(pc.starts_with(rows["reason"], "filter:"), False)
    if mode == "sample":
        sampled = pc.equal(pc.remainder(rows["source_line"], SAMPLE_EVERY), 0)
        gone = pc.and_(gone, pc.invert(sampled))
    i = rows.schema.get_field_index("text")
    return rows.set_column(
        i, "text", pc.if_else(gone, pa.scalar(None, rows["text"].type), rows["text"])
    )


# The staged file's checksum: sha256 of the whole file with the 64 hex digits of the digest
# itself left out. It is written as a placeholder of the same length, hashed, then overwritten
# in place, so no offset in the Parquet footer moves.
CHECKSUM_KEY = b"lakecurate.sha256"
_CHECKSUM_HOLE = b"0" * 64
_BLOCK = 1 << 20


def _footer(f: BinaryIO) -> tuple[int, bytes]:
    """(offset, bytes) of a Parquet file's footer: its last 8 bytes are its length + PAR1."""
    size = f.seek(0, os.SEEK_END)
    if size < 12:
        raise ValueError("too short to be a Parquet file")
    f.seek(size - 8)
    length = int.from_bytes(f.read(4), "little")
    if length > size - 12:
        raise ValueError("footer length out of range")
    f.seek(size - 8 - length)
    return size - 8 - length, f.read(length)


def _digest(f: BinaryIO, hole: int) -> bytes:
    """sha256 of the file without the 64 bytes at ``hole``."""
    h = hashlib.sha256()
    f.seek(0)
    pos = 0
    while block := f.read(_BLOCK):
        end = pos + len(block)
        if end <= hole or pos >= hole + len(_CHECKSUM_HOLE):
            h.update(block)
        else:
            h.update(block[: max(0, hole - pos)])
            h.update(block[max(0, hole + len(_CHECKSUM_HOLE) - pos) :])
        pos = end
    return h.hexdigest().encode()


def _seal(path: Path) -> None:
    """Replace the checksum placeholder in the footer with the file's digest."""
    with open(path, "r+b") as f:
        start, footer = _footer(f)
        hole = start + footer.rindex(_CHECKSUM_HOLE)
        digest = _digest(f, hole)
        f.seek(hole)
        f.write(digest)


def _sealed(path: Path, digest: bytes | None) -> bool:
    """Whether the file still has the digest it was sealed with (False when it has none)."""
    if not digest or len(digest) != len(_CHECKSUM_HOLE):
        return False
    with open(path, "rb") as f:
        start, footer = _footer(f)
        at = footer.rfind(digest)
        return at >= 0 and _digest(f, start + at) == digest


def _discard(path: Path) -> None:
    """Delete a damaged staged file (the chunk is redone and written again)."""
    with contextlib.suppress(OSError):
        path.unlink()
