"""MinHash signatures of a chunk's candidate rows as Arrow columns (pure numpy and Arrow).

The driver matches these columns against the lake's band index (``store.bands``); they are
computed where the text is, so the driver never shingles a document it only has to join.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import memory
from lakecurate.config import NearDedupConfig
from lakecurate.schema import BANDS_COLUMN, SIGNATURE_COLUMN
from lakecurate.steps.near import minhash

NEAR_DEDUP_REASONS = ("exact_dup", "duplicate_id", "near_dup")


def _list_array(
    matrix: npt.NDArray[np.generic], valid: npt.NDArray[np.bool_], value_type: pa.DataType
) -> pa.Array:
    """A list column of equal-length rows from a matrix, NULL where not ``valid``, zero copy."""
    n, width = matrix.shape
    offsets = pa.array(np.arange(0, (n + 1) * width, width, dtype=np.int32))
    values = pa.array(np.ascontiguousarray(matrix).reshape(-1), type=value_type)
    arr = pa.ListArray.from_arrays(offsets, values)
    if valid.all():
        return arr
    mask = pa.array(~valid)
    return pa.ListArray.from_arrays(offsets, values, mask=mask)


def chunk_signatures(texts: Sequence[str], cfg: NearDedupConfig) -> tuple[pa.Array, pa.Array]:
    """(signature, bands) list columns for ``texts``; both NULL for a text without tokens.

    This is what a worker computes for each kept document of its chunk; the driver only joins.
    With ``verify_on = "shingles"`` the "signature" column holds what verification compares:
    the document's shingle set (``minhash.shingle_sets``, sorted 32-bit hashes), not its MinHash
    signature; the bands are the signature's either way.
    """
    exact = cfg.verify and cfg.verify_on == "shingles"
    sig, set_values, set_offsets = minhash.sketch_texts(texts, cfg, with_sets=exact)
    valid = ~minhash.is_empty(sig)
    bands = _list_array(minhash.band_hashes(sig, *minhash.layout(cfg)), valid, pa.uint64())
    if not exact:
        return _list_array(sig, valid, pa.uint32()), bands
    offsets = pa.array(set_offsets.astype(np.int32))
    values = pa.array(set_values, type=pa.uint32())
    mask = None if valid.all() else pa.array(~valid)
    return pa.ListArray.from_arrays(offsets, values, mask=mask), bands


def near_dedup_candidates(rows: pa.Table) -> pa.Array:
    """Rows that take part in near dedup: everything that passed the filters."""
    reason = rows["reason"]
    return pc.or_(pc.is_null(reason), pc.is_in(reason, pa.array(NEAR_DEDUP_REASONS)))


def add_signatures(rows: pa.Table, cfg: NearDedupConfig) -> pa.Table:
    """Append the MinHash signature and band hashes of every candidate row (NULL elsewhere).

    The driver matches them against the lake's band index; they never reach the Delta table.
    Each column is put together once from the batches' values, in row order: the candidates
    come in order, so a row's list is its batch's (a concatenation and a ``take`` over the
    whole chunk held the shingle sets three times, the worker's peak at 256 MiB chunks).
    """
    candidate = near_dedup_candidates(rows).to_numpy(zero_copy_only=False)
    positions = np.flatnonzero(candidate)
    sigs: list[pa.Array] = []
    bands: list[pa.Array] = []
    batches = _batches(rows["text"], positions)
    for batch in batches:
        texts = rows["text"].take(pa.array(batch)).to_pylist()
        if len(batches) > 1:
            memory.release()  # the previous batch's strings and shingles, this one's take
        sig, band = chunk_signatures([t or "" for t in texts], cfg)
        sigs.append(sig)
        bands.append(band)
    empty_sig, empty_bands = chunk_signatures([], cfg)
    return rows.append_column(
        SIGNATURE_COLUMN, _spread(sigs, positions, rows.num_rows, empty_sig.type)
    ).append_column(BANDS_COLUMN, _spread(bands, positions, rows.num_rows, empty_bands.type))


def _spread(
    parts: list[pa.Array], positions: npt.NDArray[np.intp], n: int, kind: pa.DataType
) -> pa.Array:
    """The list column of ``n`` rows whose rows at ``positions`` (ascending) are the lists of
    ``parts`` in order, NULL elsewhere; the values are copied once."""
    lengths = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    if len(positions):
        lists = pa.chunked_array(parts, kind)
        lengths[positions] = pc.fill_null(pc.list_value_length(lists), 0).to_numpy()
        valid[positions] = pc.is_valid(lists).to_numpy(zero_copy_only=False)
        del lists
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    # One buffer of all the values, filled batch by batch as each batch's lists are let go:
    # a concatenation held every value twice, the stage's peak on a 256 MiB chunk.
    flat = np.empty(int(offsets[-1]), dtype=kind.value_type.to_pandas_dtype())
    at = 0
    parts.reverse()
    many = len(parts) > 1
    while parts:
        values = pc.list_flatten(parts.pop()).to_numpy(zero_copy_only=False)
        flat[at : at + len(values)] = values
        at += len(values)
        del values
        if many:
            memory.release()  # the batch's lists, gone as they are copied
    return pa.ListArray.from_arrays(
        pa.array(offsets),
        pa.array(flat, kind.value_type),
        type=kind,
        mask=None if valid.all() else pa.array(~valid),
    )


FILE_COLUMNS = {SIGNATURE_COLUMN: "signature", BANDS_COLUMN: "bands"}
"""The list columns a worker writes to files (``lake.sets``), and their names there."""


def split_sets(rows: pa.Table, name: str = SIGNATURE_COLUMN) -> tuple[pa.Table, pa.Table]:
    """``rows`` without the list column ``name``, and that column's non-NULL lists as a table
    ``(row, signature)`` (``(row, bands)`` for the band column, :data:`FILE_COLUMNS`): ``row``
    is each document's rank in the chunk's line order
    (``source_line``, unique in a chunk), the row its key ``seq << 32 | row`` names once the
    driver has ordered the chunk, ascending. The worker writes it as the chunk's sets file
    (the signature column) or bands file (the band column, ``lake.sets``); the lists' values
    are not copied when the rows are in line order (a NULL list is empty, so the valid lists'
    values are contiguous)."""
    column = rows[name]
    col = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    rest = rows.drop_columns([name])
    lines = np.asarray(rows["source_line"].to_numpy(), dtype=np.int64)
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    order = np.arange(len(lines), dtype=np.int64)
    rank = order
    if len(lines) and not (np.diff(lines) > 0).all():  # not in line order: rank them
        order = np.argsort(lines, kind="stable")
        rank = np.empty(len(lines), dtype=np.int64)
        rank[order] = np.arange(len(lines))
    signed = order[valid[order]]
    offsets = np.asarray(col.offsets.to_numpy(), dtype=np.int64)
    ends = offsets[signed + 1]
    if len(signed) and (offsets[signed[1:]] == ends[:-1]).all():  # contiguous: no copy
        starts = np.append(offsets[signed], ends[-1]).astype(np.int32)
        lists = pa.ListArray.from_arrays(pa.array(starts), col.values, type=col.type)
    else:
        lists = col.take(pa.array(signed))
    return rest, pa.table({"row": pa.array(rank[signed]), FILE_COLUMNS[name]: lists})


_BATCH_TEXT_BYTES = 16 << 20


def _batches(text: pa.ChunkedArray, positions: npt.NDArray[np.intp]) -> list[npt.NDArray[np.intp]]:
    """``positions`` in runs of about ``_BATCH_TEXT_BYTES`` of text: signing a 256 MiB chunk
    at once held all its text as Python strings beside the numpy shingles (~1.4x the chunk)."""
    if not len(positions):
        return []
    sizes = pc.binary_length(text.take(pa.array(positions))).to_numpy(zero_copy_only=False)
    ends = np.cumsum(np.nan_to_num(sizes.astype(np.float64)))
    cuts = np.searchsorted(ends, np.arange(_BATCH_TEXT_BYTES, ends[-1], _BATCH_TEXT_BYTES))
    return [b for b in np.split(positions, np.unique(cuts)) if len(b)]


def common_shingles(a: pa.Array, b: pa.Array) -> pa.Array:
    """The DuckDB Arrow UDF ``nd_common(a, b)``: how many shingles two documents share, row by
    row (NULL where either is NULL), for the exact test of ``verify_on = "shingles"``."""
    a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    b = b.combine_chunks() if isinstance(b, pa.ChunkedArray) else b
    counts = minhash.common_counts(*_flat(a), *_flat(b))
    return pa.array(counts, pa.int64(), mask=pc.or_(a.is_null(), b.is_null()).to_numpy(False))


def near_flags(
    a: pa.Array, b: pa.Array, min_matches: int, num: int, den: int
) -> npt.NDArray[np.bool_]:
    """The SQL's ``nd_near(a, b, min_matches, num, den)`` row by row, in numpy (decider
    processes test pairs without DuckDB): with ``num = 0`` at least ``min_matches`` equal
    positions of two signatures, else the exact Jaccard of two shingle sets at least
    ``num / den``, in integers."""
    va, oa = _flat(a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a)
    vb, ob = _flat(b.combine_chunks() if isinstance(b, pa.ChunkedArray) else b)
    la, lb = np.diff(oa), np.diff(ob)
    if num:
        common = minhash.common_counts(va, oa, vb, ob)
        return np.asarray(common * (den + num) >= num * (la + lb))
    # Equal positions up to the shorter list (list_zip pads the other with NULLs).
    short = np.minimum(la, lb)
    at_a = (
        np.repeat(oa[:-1], short)
        + np.arange(int(short.sum()))
        - np.repeat(np.cumsum(short) - short, short)
    )
    at_b = at_a - np.repeat(oa[:-1], short) + np.repeat(ob[:-1], short)
    row = np.repeat(np.arange(len(short)), short)
    equal = np.bincount(row[va[at_a] == vb[at_b]], minlength=len(short))
    return np.asarray(equal >= min_matches)


def _flat(col: pa.Array) -> tuple[minhash.U32, minhash.I64]:
    """A list column as (values, offsets from 0), NULL rows empty; slices handled."""
    lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(col) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.uint32)
    return values, offsets
