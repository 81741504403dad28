"""How an input's bytes are named and read: shared by the planner, which cuts inputs into chunks,
and the reader, which checks that a chunk still has the bytes it was planned with.

Both decompress through the one table ``DECOMPRESSORS`` and hash through ``HashingReader``, so a
slice of a compressed file is cut and verified on the same bytes.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
from collections.abc import Callable
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from lakecurate.types import Format


class HashingReader(io.RawIOBase):
    """A stream wrapper that hashes every byte read, and reads at most ``limit`` bytes."""

    def __init__(self, f: BinaryIO | io.BufferedIOBase, limit: int | None = None) -> None:
        self._f = f
        self._left = limit
        self.sha = hashlib.sha256()
        self.nbytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        want = len(b) if self._left is None else min(len(b), self._left)
        data = self._f.read(want) if want else b""
        self.sha.update(data)
        self.nbytes += len(data)
        if self._left is not None:
            self._left -= len(data)
        b[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        """Read (and hash) what is left, so the digest covers every byte."""
        while self.read(1 << 20):
            pass


def _zstd(f: BinaryIO) -> io.BufferedIOBase:
    # Arrow's stream hands out at most what is asked for: zstandard's decompressobj returns all
    # the output of its input at once (the first 64 KiB of a 10,000:1 file came back as all its
    # 200 MB), and its stream_reader misses a cut frame.
    return io.BufferedReader(pa.CompressedInputStream(f, "zstd"), 1 << 20)


# The one table of compressed formats: the name errors use, and the decompressing stream. Each
# stream hands out bytes on demand, so what is held stays bounded whatever the file's size.
DECOMPRESSORS: dict[Format, tuple[str, Callable[[BinaryIO], io.BufferedIOBase]]] = {
    Format.JSONL_GZ: ("gzip", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),
    Format.JSONL_ZST: ("zstd", _zstd),
    Format.JSONL_BZ2: ("bzip2", lambda f: bz2.BZ2File(f, "rb")),
    Format.JSONL_XZ: ("xz", lambda f: lzma.LZMAFile(f, "rb")),  # noqa: SIM115
}


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
