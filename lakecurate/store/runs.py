"""Sorted runs of numpy columns in a small log-structured merge, and a pool of the strings they
point at: what the driver's in-memory caches of lake-wide tables are made of (the band cache,
tier 2's key cache, the band index's documents; issue 14). A lookup in them is a binary search
per key, where a join in DuckDB read the whole table: the keys are random or spread over the
whole lake, so no zone map prunes a row group.

A new batch of rows is a run; a run merges into the one before it while that one is less than
``MERGE_RATIO`` times its size, so there are about log_4(n) runs and each row moves O(log n)
times in all. A merge interleaves two sorted runs without sorting them again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

MERGE_RATIO = 4
"""A run merges into the one before it while that one is less than this many times its size."""


def merge_columns(
    earlier: Sequence[npt.NDArray[Any]], later: Sequence[npt.NDArray[Any]]
) -> list[npt.NDArray[Any]]:
    """The columns of two runs sorted by their first column, as one run so sorted: each of
    ``later``'s rows goes in after the equal keys of ``earlier``. No sort and no index array
    over the whole: the result is all the memory a merge adds (a stable sort of the two
    concatenated held about 3.5 times that at once, the driver's peak at 16x)."""
    at = np.searchsorted(earlier[0], later[0], side="right")
    at += np.arange(len(later[0]), dtype=at.dtype)
    mine = np.ones(len(earlier[0]) + len(later[0]), dtype=bool)
    mine[at] = False
    columns = []
    for old, new in zip(earlier, later, strict=True):
        out = np.empty(len(mine), dtype=old.dtype)
        out[mine] = old
        out[at] = new
        columns.append(out)
    return columns


S = TypeVar("S", bound="SortedRun")


class SortedRun:
    """Rows as numpy columns (``cols``) sorted by the first one."""

    __slots__ = ("cols",)

    def __init__(self, cols: list[npt.NDArray[Any]], *, ordered: bool = False) -> None:
        """``ordered``: ``cols`` are sorted already (else sorted here; equal keys in no
        particular order)."""
        if not ordered:
            order = np.argsort(cols[0])
            cols = [c[order] for c in cols]
        self.cols = cols

    def __len__(self) -> int:
        return len(self.cols[0])

    def merged(self: S, later: S) -> S:
        """Both runs as one, still sorted (``merge_columns``)."""
        return type(self)(merge_columns(self.cols, later.cols), ordered=True)

    @property
    def nbytes(self) -> int:
        return int(sum(c.nbytes for c in self.cols))


def push_run(runs: list[S], run: S) -> None:
    """Add a run; a run merges into the one before it while that one is less than
    ``MERGE_RATIO`` times its size."""
    runs.append(run)
    while len(runs) > 1 and len(runs[-2]) < MERGE_RATIO * len(runs[-1]):
        later, earlier = runs.pop(), runs.pop()
        runs.append(earlier.merged(later))


class StringPool:
    """Strings in the order they came, referred to by position (a run's ``ref`` column)."""

    def __init__(self) -> None:
        self._parts: list[pa.Array] = []
        self._size = 0

    def add(self, strings: pa.Array) -> npt.NDArray[np.int64]:
        """Hold ``strings``; returns their positions."""
        refs = np.arange(self._size, self._size + len(strings), dtype=np.int64)
        self._parts.append(strings.cast(pa.string()))
        self._size += len(strings)
        return refs

    def take(self, refs: npt.NDArray[np.int64]) -> pa.Array:
        """The strings at ``refs``, in that order."""
        if not len(refs):
            return pa.array([], pa.string())
        return pa.chunked_array(self._parts, pa.string()).take(pa.array(refs)).combine_chunks()

    @property
    def nbytes(self) -> int:
        return int(sum(p.nbytes for p in self._parts))
