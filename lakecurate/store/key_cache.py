"""Tier 2's keys in the driver's memory: "is this key in the lake?" by binary search.

A tier-2 lookup in DuckDB is a hash join that scans the whole key table: the keys are random, so
no zone map prunes a row group, and a chunk with one Bloom "maybe" paid for every key in the lake
(26 ns each: 52 ms at 2 M keys, 0.5 s at 20 M, issue 14). Here a key space's rows are sorted runs
of numpy arrays, as the band cache's are (``store.runs``: a small log-structured merge),
so a chunk's lookups cost O(keys * log(lake)).

The truth stays the DuckDB tables (``content_hashes``, ``doc_ids``): this is a cache of them,
about 24 bytes a key plus the document id of a content key. It is read on the first lookup that
needs it, kept up by :meth:`KeyCache.add` (the index's own inserts), and checked before every
lookup against the table's row count and largest seq: any other change (rows forgotten, a
transaction rolled back, a rebuilt index) makes it read the table again instead of answering
from stale rows.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from lakecurate import engine
from lakecurate.store.runs import SortedRun, StringPool, push_run

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
NOT_FOUND = np.iinfo(np.int64).max


class _KeyRun(SortedRun):
    """Keys sorted by their high half (``cols``: hi, lo), and for the content space each
    key's commit seq and ``ref``: its document id's place in the cache's pool. The ids space
    needs neither: 16 bytes a key."""

    __slots__ = ()

    @property
    def hi(self) -> U64:
        return self.cols[0]

    def first(self, hi: U64, lo: U64) -> tuple[I64, I64]:
        """For each key (hi, lo): its first entry here, as (seq, ref): the smallest seq, then
        the earliest added (0, 0 without them); ``NOT_FOUND`` for both when absent. Several
        keys of one high half (one in 2^64 a lookup, or a key entered twice: an id given
        again in a later chunk) are compared all at once."""
        his, los = self.cols[0], self.cols[1]
        seqs, refs = (self.cols[2], self.cols[3]) if len(self.cols) > 2 else (None, None)
        at = np.searchsorted(his, hi, side="left")
        end = np.searchsorted(his, hi, side="right")
        best = np.full(len(hi), -1, dtype=np.int64)  # the row of each key's first entry
        one = np.flatnonzero(end - at == 1)
        match = one[los[at[one]] == lo[one]]
        best[match] = at[match]
        many = np.flatnonzero(end - at > 1)
        if len(many):  # each such needle against every row of its high half, at once
            counts = (end - at)[many]
            starts = np.cumsum(counts) - counts
            rows = (
                np.repeat(at[many], counts)
                + np.arange(int(counts.sum()))
                - np.repeat(starts, counts)
            )
            needle = np.repeat(many, counts)
            same = los[rows] == lo[needle]
            rows, needle = rows[same], needle[same]
            if seqs is not None and refs is not None:
                order = np.lexsort((refs[rows], seqs[rows], needle))
            else:
                order = np.argsort(needle, kind="stable")
            rows, needle = rows[order], needle[order]
            first = np.ones(len(needle), dtype=bool)
            first[1:] = needle[1:] != needle[:-1]
            best[needle[first]] = rows[first]
        found = best >= 0
        seq = np.full(len(hi), NOT_FOUND, dtype=np.int64)
        ref = np.full(len(hi), NOT_FOUND, dtype=np.int64)
        seq[found] = 0 if seqs is None else seqs[best[found]]
        ref[found] = 0 if refs is None else refs[best[found]]
        return seq, ref


class KeyCache:
    """The keys of one tier-2 table on ``con`` (``space``: ``"content"``, with the document
    id each stands for, or ``"ids"``); see the module docstring."""

    def __init__(self, con: duckdb.DuckDBPyConnection, space: str) -> None:
        self.con = con
        self.space = space
        self._runs: list[_KeyRun] = []
        self._ids = StringPool()  # the content keys' document ids
        self._loaded = False  # False: not read yet, or stale
        self._fingerprint: tuple[int, int] = (0, -1)  # (rows, largest seq) held
        self.loads = 0  # times the table was read, for tests

    def _table_fingerprint(self) -> tuple[int, int]:
        ((rows, top),) = self.con.execute(engine.q(f"index.{self.space}_fingerprint")).fetchall()
        return int(rows), int(top)

    def _current(self) -> list[_KeyRun]:
        """The runs, read again from the table when it changed behind the cache's back: in
        one piece, sorted once (reading it in batches merged them: 4 s at 2 M keys)."""
        fingerprint = self._table_fingerprint()
        if self._loaded and fingerprint == self._fingerprint:
            return self._runs
        self.forget()
        if self.space == "content":
            table = self.con.sql(engine.q("index.content_entries")).to_arrow_table()
            seq = np.asarray(table["seq"].to_numpy(), dtype=np.int64)
            ids: pa.Array | None = table["doc_id"].combine_chunks()
        else:
            table = self.con.sql(engine.q("index.ids_since"), params={"since": -1}).to_arrow_table()
            seq, ids = None, None
        if table.num_rows:
            hi = np.asarray(table["hi"].to_numpy(), dtype=np.uint64)
            self._push(hi, np.asarray(table["lo"].to_numpy(), dtype=np.uint64), seq, ids)
        self._fingerprint = fingerprint
        self._loaded = True
        self.loads += 1
        return self._runs

    def _push(self, hi: U64, lo: U64, seq: I64 | None, ids: pa.Array | None) -> None:
        """A run of keys; with ``ids`` (the content space) their seqs and document ids."""
        cols: list[npt.NDArray[Any]] = [hi, lo]
        if ids is not None and seq is not None:
            cols += [seq, self._ids.add(ids)]
        push_run(self._runs, _KeyRun(cols))

    def find(self, halves: U64) -> tuple[npt.NDArray[np.bool_], pa.Array | None]:
        """Which of the keys (``halves``: (n, 2) uint64, hi and lo) the table holds, and for
        the content space the document id of each one found (in the keys' order): that of
        its first entry (smallest seq, as the join's ``arg_min(doc_id, seq)`` it replaced);
        None for the ids space."""
        hi = np.ascontiguousarray(halves[:, 0])
        lo = np.ascontiguousarray(halves[:, 1])
        best_seq = np.full(len(hi), NOT_FOUND, dtype=np.int64)
        best_ref = np.full(len(hi), NOT_FOUND, dtype=np.int64)
        for run in self._current():
            seq, ref = run.first(hi, lo)
            better = (seq < best_seq) | ((seq == best_seq) & (ref < best_ref))
            best_seq[better], best_ref[better] = seq[better], ref[better]
        found = best_seq != NOT_FOUND
        if self.space != "content":
            return found, None
        return found, self._ids.take(best_ref[found])

    def add(self, halves: U64, seq: int, ids: pa.Array | None, rows: int) -> None:
        """After the index inserted ``rows`` rows of these keys under commit ``seq`` (in the
        caller's transaction): hold them too, unless the cache is stale or the table changed
        otherwise (then the next lookup reads it again)."""
        if not self._loaded:
            return
        before = self._fingerprint
        after = (before[0] + rows, max(before[1], seq))
        if self._table_fingerprint() != after:
            self._loaded = False
            return
        if len(halves):
            self._push(
                np.ascontiguousarray(halves[:, 0]),
                np.ascontiguousarray(halves[:, 1]),
                np.full(len(halves), seq, dtype=np.int64),
                ids if self.space == "content" else None,
            )
        self._fingerprint = after

    def forget(self) -> None:
        """Rows left the table: read it again on the next lookup."""
        self._loaded = False
        self._runs, self._ids = [], StringPool()

    @property
    def loaded(self) -> bool:
        """Whether the cache holds the table (``add`` does nothing otherwise)."""
        return self._loaded

    @property
    def rows(self) -> int:
        """Keys held (0 when not read)."""
        return sum(len(r) for r in self._runs) if self._loaded else 0

    @property
    def nbytes(self) -> int:
        """Memory held: the key arrays and the document ids."""
        return sum(r.nbytes for r in self._runs) + self._ids.nbytes
