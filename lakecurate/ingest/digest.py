"""How a Parquet chunk's bytes are named: shared by the planner, which cuts inputs into chunks,
and the reader, which checks that a chunk still has the bytes it was planned with."""

from __future__ import annotations

import hashlib
from typing import BinaryIO

import pyarrow.parquet as pq


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


def parquet_digest(
    f: BinaryIO, md: pq.FileMetaData, schema: bytes, a: int, b: int
) -> tuple[str, int]:
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
