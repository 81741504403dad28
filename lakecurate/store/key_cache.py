"""Tier 2's keys in the driver's memory: "is this key in the lake?" by binary search.

A tier-2 lookup in DuckDB is a hash join that scans the whole key table: the keys are random, so
no zone map prunes a row group, and a chunk with one Bloom "maybe" paid for every key in the lake
(26 ns each: 52 ms at 2 M keys, 0.5 s at 20 M, issue 14). Here a key space's rows are sorted runs
of numpy arrays, as the band cache's are (``store.runs``: a small log-structured merge),
so a chunk's lookups cost O(keys * log(lake)).

The truth stays the key files (``store.key_files``): this is a cache of them, about 24 bytes a
key plus the document id of a content key. It is read on the first lookup that needs it, kept
up by :meth:`KeyCache.add` (the index's own writes), and checked before every lookup against
the registry's key count and largest seq: any other change (keys forgotten, a transaction
rolled back, a rebuilt index) makes it read the files again instead of answering from stale
rows.

Where the keys are held is the cache's *holder*: this process (``LocalKeys``), or, with
``[ingest] deciders = K``, the K decider processes (``store.band_shards.Shards``), shard ``i``
holding the keys whose high half is ``i`` modulo K: they read the key files themselves, so the
driver's memory no longer grows with the lake's keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from lakecurate.store.band_cache import HolderLostError
from lakecurate.store.key_files import KeyFiles, read_files
from lakecurate.store.runs import SortedRun, StringPool, push_run

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
NOT_FOUND = np.iinfo(np.int64).max
Listed = Sequence[tuple[str, Sequence[int]]]
"""Key files and the seqs registered of each (``key_files.read_files``)."""


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


class KeyRuns:
    """The keys of one space held in one process: sorted runs, and for the content space the
    document id of each key."""

    def __init__(self, space: str) -> None:
        self.space = space
        self._runs: list[_KeyRun] = []
        self._ids = StringPool()  # the content keys' document ids

    def hold(self, keys: pa.Table) -> None:
        """``keys`` (hi, lo, seq[, doc_id]) as a run; the content space keeps their seqs and
        document ids."""
        if not keys.num_rows:
            return
        cols: list[npt.NDArray[Any]] = [
            np.asarray(keys[c].to_numpy(), dtype=np.uint64) for c in ("hi", "lo")
        ]
        if self.space == "content":
            seq = np.asarray(keys["seq"].to_numpy(), dtype=np.int64)
            cols += [seq, self._ids.add(keys["doc_id"].combine_chunks())]
        push_run(self._runs, _KeyRun(cols))

    def find(self, hi: U64, lo: U64) -> tuple[npt.NDArray[np.bool_], pa.Array | None]:
        """Which of the keys (hi, lo) are held, and for the content space the document id of
        each one found (in the keys' order): that of its first entry (smallest seq, as the
        join's ``arg_min(doc_id, seq)`` it replaced); None for the ids space."""
        best_seq = np.full(len(hi), NOT_FOUND, dtype=np.int64)
        best_ref = np.full(len(hi), NOT_FOUND, dtype=np.int64)
        for run in self._runs:
            seq, ref = run.first(hi, lo)
            better = (seq < best_seq) | ((seq == best_seq) & (ref < best_ref))
            best_seq[better], best_ref[better] = seq[better], ref[better]
        found = best_seq != NOT_FOUND
        if self.space != "content":
            return found, None
        return found, self._ids.take(best_ref[found])

    def __len__(self) -> int:
        return sum(len(r) for r in self._runs)

    @property
    def nbytes(self) -> int:
        """Memory held: the key arrays and the document ids."""
        return sum(r.nbytes for r in self._runs) + self._ids.nbytes


class KeyHolder(Protocol):
    """Where a key cache's keys are held: ``LocalKeys``, or ``band_shards.Shards`` (decider
    processes, each holding a part and reading the key files itself)."""

    @property
    def generation(self) -> int:
        """Changes whenever the holder lost what it held (a decider process died)."""
        ...

    def keys_load(self, folder: Path, space: str, listed: Listed) -> None:
        """Hold exactly the keys of ``listed`` (the registry's files of ``space``)."""
        ...

    def keys_add(self, folder: Path, space: str, listed: Listed, keys: pa.Table) -> None:
        """Hold ``keys`` too: the rows of the key file ``listed`` names, just written."""
        ...

    def keys_find(
        self, space: str, hi: U64, lo: U64
    ) -> tuple[npt.NDArray[np.bool_], pa.Array | None]:
        """``KeyRuns.find`` over every key held."""
        ...

    def keys_held(self, space: str) -> int: ...


class LocalKeys:
    """Keys held in this process (the default holder)."""

    generation = 0  # nothing here is lost behind the cache's back

    def __init__(self) -> None:
        self.spaces: dict[str, KeyRuns] = {}

    def _runs(self, space: str) -> KeyRuns:
        return self.spaces.setdefault(space, KeyRuns(space))

    def keys_load(self, folder: Path, space: str, listed: Listed) -> None:
        # In one piece, sorted once (reading them in batches merged them: 4 s at 2 M keys).
        self.spaces[space] = KeyRuns(space)
        self.spaces[space].hold(read_files(folder, space, listed))

    def keys_add(self, folder: Path, space: str, listed: Listed, keys: pa.Table) -> None:
        self._runs(space).hold(keys)  # the rows in hand: no need to read the file

    def keys_find(
        self, space: str, hi: U64, lo: U64
    ) -> tuple[npt.NDArray[np.bool_], pa.Array | None]:
        return self._runs(space).find(hi, lo)

    def keys_held(self, space: str) -> int:
        return len(self._runs(space))


class KeyCache:
    """The keys of one space of ``files`` (``space``: ``"content"``, with the document id each
    stands for, or ``"ids"``), held by ``holder`` (default: this process); see the module
    docstring."""

    def __init__(self, files: KeyFiles, space: str, holder: KeyHolder | None = None) -> None:
        self.files = files
        self.space = space
        self.holder: KeyHolder = holder if holder is not None else LocalKeys()
        self._loaded = False  # False: not read yet, or stale
        self._fingerprint: tuple[int, int] = (0, -1)  # (rows, largest seq) held
        self._generation = -1  # the holder's generation the keys were given to
        self.loads = 0  # times the files were read, for tests

    def _current(self) -> None:
        """Make sure the holder holds the registry's keys: read again from the files when
        they changed behind the cache's back, or when the holder lost them."""
        fingerprint = self.files.fingerprint(self.space)
        if (
            self._loaded
            and fingerprint == self._fingerprint
            and self.holder.generation == self._generation
        ):
            return
        self._loaded = False
        self.holder.keys_load(self.files.folder, self.space, self.files.listed(self.space))
        self._generation = self.holder.generation
        self._fingerprint = fingerprint
        self._loaded = True
        self.loads += 1

    def find(self, halves: U64) -> tuple[npt.NDArray[np.bool_], pa.Array | None]:
        """Which of the keys (``halves``: (n, 2) uint64, hi and lo) the files hold, and for the
        content space the document id of each one found (``KeyRuns.find``); a holder lost
        on the way is given the keys again, once."""
        hi = np.ascontiguousarray(halves[:, 0])
        lo = np.ascontiguousarray(halves[:, 1])
        for attempt in (1, 2):
            try:
                self._current()
                return self.holder.keys_find(self.space, hi, lo)
            except HolderLostError:
                self._loaded = False
                if attempt == 2:  # a holder that dies again is the news
                    raise
        raise AssertionError("unreachable")

    def add(self, keys: pa.Table, name: str) -> None:
        """After the index registered ``keys`` (hi, lo, seq[, doc_id]), the key file ``name``,
        in the caller's transaction: hold them too, unless the cache is stale or the files
        changed otherwise (then the next lookup reads them again)."""
        if not self._loaded or not keys.num_rows:
            return
        seq = np.asarray(keys["seq"].to_numpy(), dtype=np.int64)
        before = self._fingerprint
        after = (before[0] + keys.num_rows, max(before[1], int(seq.max())))
        lost = self.holder.generation != self._generation
        if self.files.fingerprint(self.space) != after or lost:
            self._loaded = False
            return
        self._loaded = False  # until the keys are in: a holder lost meanwhile reloads
        listed = [(name, np.unique(seq).tolist())]
        try:
            self.holder.keys_add(self.files.folder, self.space, listed, keys)
        except HolderLostError:
            return
        self._loaded = True
        self._fingerprint = after

    def forget(self) -> None:
        """Keys left the index: read it again on the next lookup."""
        self._loaded = False

    @property
    def loaded(self) -> bool:
        """Whether the cache holds the index (``add`` does nothing otherwise)."""
        return self._loaded

    @property
    def rows(self) -> int:
        """Keys held (0 when not read)."""
        try:
            return self.holder.keys_held(self.space) if self._loaded else 0
        except HolderLostError:
            self._loaded = False
            return 0

    @property
    def nbytes(self) -> int:
        """Memory held in this process (0 when the keys are held elsewhere)."""
        if not isinstance(self.holder, LocalKeys) or not self._loaded:
            return 0
        return self.holder.spaces[self.space].nbytes if self.space in self.holder.spaces else 0
