"""The staged file: vocabulary shared by the worker (which writes it) and the driver (reads it).

A staged file is ``staging/<chunk_key>.<config_hash>.parquet``: the decided rows of one chunk, its
``ChunkResult`` in the footer, and a sha256 seal over the whole file so damage is found on read.
Staged files live on the lake's storage (``lake.storage.Location``: local disk, or object storage
where every node reaches them), written whole or not at all, so a reader never sees a partial
file.

With near-dedup verification on, the sets verification compares (a third of the text's size with
shingle sets) are not in the staged file but in its *sets file* beside it (``lake.sets``), and
with near dedup on the band hashes are in its *bands file*: both written first and named in
the staged file's footer by their sha256, so the files are sealed as one. The driver reads only
a staged file's key columns and bands file (``read_keys``: ids, hashes, verdicts and the band
hashes, never the text or the sets) and answers with a *patch*: the rows whose verdict
its lake-wide decisions changed. A worker applies the patch to the file a row group at a time
(``iter_staged``, ``apply_patch``) and writes the table's data files, so document text never
passes through the driver.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate import faults
from lakecurate.lake import atomic, sets
from lakecurate.lake.storage import Location
from lakecurate.schema import BANDS_COLUMN, DECISION_COLUMNS, KEY_COLUMNS, SIGNATURE_COLUMN
from lakecurate.types import ChunkResult

RESULT_KEY = b"lakecurate.result"
SETS_KEY = b"lakecurate.sets_sha256"
"""The staged file's footer key naming its sets file by digest (absent: no sets file)."""
BANDS_KEY = b"lakecurate.bands_sha256"
"""The same for its bands file (absent: near dedup off, or a file of the layout before, whose
band hashes are a column)."""
BESIDE = {SETS_KEY: sets.SUFFIX, BANDS_KEY: sets.BANDS_SUFFIX}
STAGED_GROUP_ROWS = 8192


def staged_name(chunk_key: str, config_hash: str) -> str:
    """The staged file of a chunk under one config; the name says what it holds."""
    return f"{chunk_key}.{config_hash}.parquet"


def write_atomic_parquet(table: pa.Table, path: Location) -> None:
    """Write and seal with a checksum, whole or not at all, so a reader never sees a partial
    file and a file damaged later (a bit flip, a truncation, a power cut before the page
    cache reached the disk) is found by ``read_staged_result`` and its chunk redone. On local
    disk: a temp file sealed in place and renamed, without fsync (the seal is what makes it
    trusted; two fsyncs were about a tenth of a small chunk's work); on object storage: sealed in
    memory and uploaded once (an object is whole or absent)."""
    if not path.is_local:
        sink = io.BytesIO()
        _write_unsealed(table, sink)
        _seal(sink)
        faults.hit("staged_write", path.name)
        path.write_bytes(sink.getvalue())
        return
    with atomic.replacing(path.local, durable=False) as tmp:
        _write_unsealed(table, tmp)
        with open(tmp, "r+b") as f:
            _seal(f)
        faults.hit("staged_write", path.name)


def _write_unsealed(table: pa.Table, where: str | os.PathLike[str] | BinaryIO) -> None:
    """The Parquet file with a checksum placeholder in its footer."""
    with pq.ParquetWriter(where, table.schema, compression="zstd") as writer:
        # Row groups of STAGED_GROUP_ROWS: the writer holds one group's pages at a time (the
        # whole chunk in one group was the worker's peak at 256 MiB chunks).
        writer.write_table(table, row_group_size=STAGED_GROUP_ROWS)
        writer.add_key_value_metadata({CHECKSUM_KEY: _CHECKSUM_HOLE})


def read_staged_result(path: Location) -> ChunkResult | None:
    """The result stored in a staged file, or None if the file is absent, not ours, or fails
    its checksum. A damaged file (or one from before checksums) is deleted: the caller redoes
    the chunk instead of committing what the file now says."""
    try:
        md = pq.read_metadata(path.fs_path, filesystem=path.fs).metadata or {}
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
    if not sealed or not all(_beside_intact(path, k, md.get(k)) for k in BESIDE):
        _discard(path)
        return None
    return result


def _beside_intact(path: Location, key: bytes, digest: bytes | None) -> bool:
    """Whether the sets or bands file (``key``) the staged file at ``path`` names (if any) is
    there, unchanged. Read whole, but only for a chunk staged by an earlier run
    (``read_staged_result``)."""
    if digest is None:
        return True
    try:
        return sets.digest(sets.beside(path.uri, BESIDE[key])) == digest.decode()
    except (OSError, ValueError):
        return False


def delete_staged(staged_path: str) -> None:
    """Remove a staged file and the files beside it (the chunk is committed)."""
    Location(staged_path).delete()
    for suffix in BESIDE.values():
        sets.beside(staged_path, suffix).delete()


ROW = "staged_row"
"""The position of a row in its staged file: how a patch names the rows it changes."""


def iter_staged(path: str, columns: list[str]) -> Iterator[tuple[int, pa.Table]]:
    """The rows of the staged file at ``path`` (a ``Location`` URI) a row group at a time,
    each with the position of its first row: a finalise holds one group, not the chunk (a
    256 MiB chunk's finalise held it about three times over: read, patched, split by
    partition). Read column chunk by column chunk (no pre-buffering, as ``read_keys``)."""
    loc = Location(path)
    offset = 0
    with pq.ParquetFile(loc.fs_path, filesystem=loc.fs, pre_buffer=False) as staged:
        for batch in staged.iter_batches(batch_size=STAGED_GROUP_ROWS, columns=columns):
            yield offset, pa.Table.from_batches([batch])
            offset += batch.num_rows


def read_keys(path: str, band_lists: bool = True) -> tuple[pa.Table, sets.SetsFile | None]:
    """The columns the driver decides a staged chunk on (the band hashes too, and the sets
    when a file of the layout before holds them), plus each row's position; the text is never
    read. The band hashes come from the bands file when there is one (returned too, opened:
    it becomes the commit's band file), put in as the column a staged file used to hold;
    without ``band_lists`` (decider processes read the file) as an empty list per row that
    has bands (NULL: no tokens), and only the file's keys are read."""
    loc = Location(path)
    with pq.ParquetFile(loc.fs_path, filesystem=loc.fs, pre_buffer=False) as staged:
        schema = staged.schema_arrow  # one open, one footer read
        names = [c for c in (*KEY_COLUMNS, SIGNATURE_COLUMN, BANDS_COLUMN) if c in schema.names]
        keys = staged.read(columns=names).replace_schema_metadata(None)
    keys = keys.append_column(ROW, pa.array(np.arange(keys.num_rows, dtype=np.int64)))
    if BANDS_KEY not in (schema.metadata or {}):
        return keys, None
    bands = sets.SetsFile(sets.beside(path, sets.BANDS_SUFFIX))
    return keys.append_column(BANDS_COLUMN, _bands_by_row(keys, bands, band_lists)), bands


def _bands_by_row(keys: pa.Table, file: sets.SetsFile, with_lists: bool = True) -> pa.Array:
    """The bands file's lists as a column of the staged rows (NULL: no tokens; without
    ``with_lists``, empty lists). The file is keyed by rank in line order; the staged rows may
    be in another order."""
    lines = np.asarray(keys["source_line"].to_numpy(), dtype=np.int64)
    by_rank = np.argsort(lines, kind="stable")  # staged row of each rank
    ranks = file.keys()
    if len(ranks) and (ranks[-1] >= len(lines) or ranks[0] < 0):
        raise ValueError(f"{file.path} names rows its staged chunk does not have")
    where = np.full(len(lines), -1, dtype=np.int64)
    where[by_rank[ranks]] = np.arange(len(ranks))
    if with_lists:
        lists = file.take(np.arange(len(ranks), dtype=np.int64))
    else:
        kind = file.table.schema.field(1).type
        empty = pa.array(np.zeros(len(ranks) + 1, dtype=np.int32))
        lists = pa.ListArray.from_arrays(empty, pa.array([], kind.value_type), type=kind)
    return lists.take(pa.array(where, mask=where < 0))


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


def count_true(mask: pa.Array | pa.ChunkedArray) -> int:
    """How many rows a boolean column marks (NULL counts as false): the funnels' counting."""
    return int(pc.sum(pc.fill_null(mask, False)).as_py() or 0)


def read_patch(patch: bytes) -> pa.Table:
    """The changed rows a ``patch_of`` names (``ROW`` and the decision columns)."""
    return pa.ipc.open_stream(patch).read_all()


def apply_patch(rows: pa.Table, changes: pa.Table, offset: int = 0) -> pa.Table:
    """Staged rows (in staged order, the first at position ``offset`` of its staged file) with
    the driver's verdicts of ``changes`` (``read_patch``) that fall among them."""
    at = changes[ROW].to_numpy() - offset
    mine = (at >= 0) & (at < rows.num_rows)
    if not mine.any():  # the driver changed none of them (most rows of most chunks)
        return rows
    where = np.full(rows.num_rows, -1, dtype=np.int64)
    where[at[mine]] = np.flatnonzero(mine)
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


def _seal(f: BinaryIO) -> None:
    """Replace the checksum placeholder in the footer of the open file ``f`` with the file's
    digest."""
    start, footer = _footer(f)
    hole = start + footer.rindex(_CHECKSUM_HOLE)
    digest = _digest(f, hole)
    f.seek(hole)
    f.write(digest)


def _sealed(path: Location, digest: bytes | None) -> bool:
    """Whether the file still has the digest it was sealed with (False when it has none)."""
    if not digest or len(digest) != len(_CHECKSUM_HOLE):
        return False
    with path.open() as f:
        start, footer = _footer(f)
        at = footer.rfind(digest)
        return at >= 0 and _digest(f, start + at) == digest


def _discard(path: Location) -> None:
    """Delete a damaged staged file (the chunk is redone and written again)."""
    with contextlib.suppress(OSError):
        path.delete()
