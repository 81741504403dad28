"""The band index's buckets in the driver's memory: a chunk's lake candidates by keyed lookup.

Matching a chunk against a band table in DuckDB was a hash join that scans the whole table
(the band hashes are random, so no zone map prunes a row group): its cost grew with the lake,
about 0.03 s of CPU per 16 MiB chunk at 1.7 M band rows and 0.1 s at 6.8 M (issue 14). Here the
(band, band_hash, doc_seq) rows are sorted runs of numpy arrays (a small log-structured merge: a
new chunk is a run, runs of similar size merge), so a chunk's candidates cost a binary search
per band hash: O(chunk * log(lake)).

The truth is the band files (``index/bands/<seq>.arrow``, the workers' bands files put in
place) of the commits ``minhash_docs`` holds documents of: a file is written before its
documents' rows, and a file of a commit that left the index is a leftover nothing reads. This
is a cache of them, 17 bytes per band row. It is loaded on first use, kept up by
:meth:`BandCache.add` (the index's own inserts), and checked before every lookup and every add
against ``minhash_docs``'s row count and largest doc_seq (both O(1) in DuckDB): any other change
(documents forgotten by a supersede or an abandoned intent, a rolled-back transaction, a cleared
index) makes it reload instead of answering from stale rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from lakecurate import engine
from lakecurate.errors import LakeError
from lakecurate.lake.storage import Location
from lakecurate.store.runs import SortedRun, push_run
from lakecurate.store.signatures import ROW_BITS, ChunkSets, SignatureFiles

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Rows = tuple[U64, U8, I64]


class _Run(SortedRun):
    """Band rows sorted by band hash: (hashes, bands, seqs), 17 bytes a row."""

    __slots__ = ()

    @property
    def hashes(self) -> U64:
        return self.cols[0]

    @property
    def bands(self) -> U8:
        return self.cols[1]

    @property
    def seqs(self) -> I64:
        return self.cols[2]


@dataclass(frozen=True)
class BandSource:
    """Where a holder in another process reads a chunk's band rows itself instead of being
    sent them (every row would pass through the driver's pipes): the worker's bands file of
    commit ``seq`` at ``uri``, or (``uri`` None) the commit's band file in the index."""

    seq: int
    uri: str | None = None

    def rows(self, files: SignatureFiles, keep: Keep) -> Rows:
        """The band rows ``keep`` keeps, sorted by hash (``files``: the index's band files);
        kept before they are sorted, so a shard sorts only its part."""
        if self.uri is None:
            table = files.whole(self.seq)
        else:
            table = ChunkSets.of_file(self.seq, Location(self.uri)).whole()
        return by_hash(keep(band_rows(table["doc_seq"], table[table.schema.names[1]])))


def merged(parts: Sequence[Rows]) -> Rows:
    """The band rows of a run of chunks (one part each, sorted by hash) as one set of rows
    sorted by hash: what a run matched as one looks up, and pairs within."""
    if len(parts) == 1:
        return parts[0]
    return by_hash(
        (
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
        )
    )


class Runs:
    """Band rows as sorted runs that merge as they grow (a small log-structured merge): what
    holds the cache's rows, here in the driver's memory (``store.band_shards`` holds them in
    other processes, partitioned by hash, behind the same methods)."""

    generation = 0  # nothing here is lost behind the cache's back

    def __init__(self) -> None:
        self._runs: list[_Run] = []

    def clear(self) -> None:
        self._runs = []

    def push(self, hashes: U64, bands: U8, seqs: I64, *, ordered: bool = False) -> None:
        """Add band rows (``ordered``: sorted by hash)."""
        if len(hashes):
            push_run(self._runs, _Run([hashes, bands, seqs], ordered=ordered))

    def load(self, files: SignatureFiles, seqs: Sequence[int], keep: Keep | None = None) -> None:
        """Hold exactly the band files of ``seqs``, read file by file as the index's adds did
        (no copy of the whole); ``keep`` picks the rows of a file to hold (all: None)."""
        self.clear()
        for seq in seqs:
            lists = files.whole(int(seq))
            if lists.num_rows:
                rows = band_rows(lists["doc_seq"], lists[files.column])
                self.push(*(rows if keep is None else keep(rows)))

    def search(self, hashes: U64, bands: U8, srcs: I64, below: int) -> tuple[I64, I64]:
        """(src, dst) of every held row in the bucket of a needle, with doc_seq < ``below``: a
        pair once per band it shares. The needles are sorted by hash (a binary search for
        sorted needles stays in cache: 9x faster)."""
        found_src: list[I64] = []
        found_dst: list[I64] = []
        for run in self._runs:
            lo = np.searchsorted(run.hashes, hashes, side="left")
            hit = np.flatnonzero(lo < len(run))
            hit = hit[run.hashes[lo[hit]] == hashes[hit]]
            if len(hit) == 0:
                continue
            first = lo[hit]
            counts = np.searchsorted(run.hashes, hashes[hit], side="right") - first
            total = int(counts.sum())
            rows = np.repeat(first, counts) + (
                np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            )
            src = np.repeat(srcs[hit], counts)
            same = (run.bands[rows] == np.repeat(bands[hit], counts)) & (run.seqs[rows] < below)
            found_src.append(src[same])
            found_dst.append(run.seqs[rows][same])
        if not found_src:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        return np.concatenate(found_src), np.concatenate(found_dst)

    def __len__(self) -> int:
        return sum(len(r) for r in self._runs)

    def close(self) -> None:
        self.clear()


class HolderLostError(LakeError):
    """A holder lost its rows (a decider process died): they are read again from the files."""


T = TypeVar("T")

Keep = Callable[[Rows], Rows]
"""Which of a band file's rows a holder keeps (a shard: those of its hashes)."""


class Holder(Protocol):
    """Where the cache's band rows are held: ``Runs`` here, or ``band_shards.Shards``."""

    @property
    def generation(self) -> int:
        """Changes whenever the holder lost what it held (a decider process died, perhaps
        while another cache asked it)."""
        ...

    def clear(self) -> None: ...

    def push(self, hashes: U64, bands: U8, seqs: I64, *, ordered: bool = False) -> None: ...

    def load(self, files: SignatureFiles, seqs: Sequence[int]) -> None: ...

    def search(self, hashes: U64, bands: U8, srcs: I64, below: int) -> tuple[I64, I64]: ...

    def __len__(self) -> int: ...

    def close(self) -> None: ...


@runtime_checkable
class RemoteHolder(Holder, Protocol):
    """A holder in other processes, which reads a ``BandSource`` itself: cheaper than being
    sent the rows (``band_shards.Shards``). A lookup and the pairs within take a run of
    chunks matched as one (``sources``, one per chunk, in commit order)."""

    def push_source(self, files: SignatureFiles, source: BandSource) -> None: ...

    def search_source(
        self, files: SignatureFiles, sources: Sequence[BandSource], below: int
    ) -> tuple[I64, I64]: ...

    def chunk_pairs(
        self, files: SignatureFiles, sources: Sequence[BandSource]
    ) -> tuple[I64, I64]: ...


def chunk_pairs(rows: Rows) -> tuple[I64, I64]:
    """(src, dst) of the documents of one chunk's band rows that share a bucket (band and
    hash), src the later: ``dedup.chunk_candidates``'s join of the chunk's buckets, in numpy
    (a pair once per bucket it shares)."""
    hashes, bands, seqs = rows
    if len(hashes) > 1 and (hashes[1:] >= hashes[:-1]).all():
        # Sorted by hash (``by_hash``): only the rows whose hash repeats can share a bucket,
        # and only they are sorted (a lexsort of every row was a fifth of a shard's CPU).
        same = hashes[1:] == hashes[:-1]
        shared = np.zeros(len(hashes), dtype=bool)
        shared[1:] |= same
        shared[:-1] |= same
        at = np.flatnonzero(shared)
        order = at[np.lexsort((seqs[at], bands[at], hashes[at]))]
    else:
        order = np.lexsort((seqs, bands, hashes))  # by bucket, then document
    h, b, s = hashes[order], bands[order], seqs[order]
    new = np.ones(len(h), dtype=bool)
    new[1:] = (h[1:] != h[:-1]) | (b[1:] != b[:-1])
    starts = np.flatnonzero(new)
    first = np.repeat(starts, np.diff(np.append(starts, len(h))))  # each row's bucket start
    rank = np.arange(len(h)) - first  # how many of its bucket come before it
    src = np.repeat(np.arange(len(h)), rank)
    before = np.arange(int(rank.sum())) - np.repeat(np.cumsum(rank) - rank, rank)
    return s[src], s[np.repeat(first, rank) + before]


def distinct_pairs(src: I64, dst: I64) -> tuple[I64, I64]:
    """Each (src, dst) pair once, ordered."""
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    first = np.ones(len(src), dtype=bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return src[first], dst[first]


def by_hash(rows: Rows) -> Rows:
    """Band rows sorted by band hash: what :meth:`BandCache.candidates` and
    :meth:`BandCache.add` take with ``ordered=True`` (a chunk's rows are sorted once for both)."""
    hashes, bands, seqs = rows
    order = np.argsort(hashes)
    return hashes[order], bands[order], seqs[order]


def band_rows(doc_seq: pa.Array | pa.ChunkedArray, lists: pa.Array | pa.ChunkedArray) -> Rows:
    """(band_hash, band, doc_seq) rows of documents' band lists (none NULL)."""
    col = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    offsets = np.asarray(col.offsets.to_numpy(), dtype=np.int64)
    values = np.asarray(col.flatten().to_numpy(), dtype=np.uint64)
    lengths = np.diff(offsets)
    within = np.arange(len(values), dtype=np.int64) - np.repeat(offsets[:-1] - offsets[0], lengths)
    seqs = np.repeat(np.asarray(doc_seq.to_numpy(), dtype=np.int64), lengths)
    return values, within.astype(np.uint8), seqs


class BandCache:
    """The band rows of the documents ``minhash_docs`` on ``con`` holds, from ``files`` (see
    the module docstring), held by ``holder`` (default: in this process)."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, files: SignatureFiles, holder: Holder | None = None
    ) -> None:
        self.con = con
        self.files = files
        self.holder: Holder = holder if holder is not None else Runs()
        self._loaded = False  # False: not loaded, or stale
        self._commit_seqs: set[int] = set()  # commit seqs with rows here
        self._fingerprint: tuple[int, int] = (0, -1)  # (rows, largest doc_seq) cached
        self._generation = -1  # the holder's generation the rows were given to
        self.loads = 0  # full loads from the table, for tests

    def _table_fingerprint(self) -> tuple[int, int]:
        ((rows, top),) = self.con.execute(engine.q("dedup.bands_fingerprint")).fetchall()
        return int(rows), -1 if top is None else int(top)

    def _current(self) -> Holder:
        """The holder, reloaded from the files when the index changed behind the cache's back."""
        fingerprint = self._table_fingerprint()
        current = self.holder.generation == self._generation
        if self._loaded and fingerprint == self._fingerprint and current:
            return self.holder
        self._loaded = False
        indexed = [
            int(seq) for (seq,) in self.con.execute(engine.q("dedup.indexed_seqs")).fetchall()
        ]
        self.holder.load(self.files, indexed)
        self._generation = self.holder.generation
        self._commit_seqs = set(indexed)
        self._fingerprint = fingerprint
        self._loaded = True
        self.loads += 1
        return self.holder

    def candidates(
        self,
        hashes: U64,
        bands: U8,
        srcs: I64,
        below: int,
        *,
        ordered: bool = False,
        sources: Sequence[BandSource] = (),
    ) -> tuple[I64, I64]:
        """(src, dst) pairs, distinct: the chunks' band rows (``hashes``, ``bands``, ``srcs``
        their documents; ``ordered``: already sorted by hash, ``by_hash``; ``sources``: the
        files they came from, one per chunk, which a remote holder reads itself) against
        every cached row of the same bucket with doc_seq < ``below``."""
        if not ordered:
            hashes, bands, srcs = by_hash((hashes, bands, srcs))

        def search() -> tuple[I64, I64]:
            holder = self._current()
            if sources and isinstance(holder, RemoteHolder):
                return holder.search_source(self.files, sources, below)
            return holder.search(hashes, bands, srcs, below)

        return distinct_pairs(*self.retried(search))  # a pair once, not once per band

    def chunk_pairs(self, sources: Sequence[BandSource]) -> tuple[I64, I64]:
        """(src, dst), distinct: the documents of a run of chunks sharing a bucket
        (``chunk_pairs``), found by the holder from the chunks' band files (a remote holder:
        the driver need not read the bands)."""
        holder = self.holder
        assert isinstance(holder, RemoteHolder), "the chunk's own pairs are a remote holder's"
        return distinct_pairs(*self.retried(lambda: holder.chunk_pairs(self.files, sources)))

    def retried(self, ask: Callable[[], T]) -> T:
        """``ask`` (of the holder) again once when the holder lost its rows (read again on
        the next use)."""
        try:
            return ask()
        except HolderLostError:  # once: a holder that dies again is the news
            self._loaded = False
            return ask()

    def add(
        self,
        hashes: U64,
        bands: U8,
        seqs: I64,
        *,
        ordered: bool = False,
        docs: I64 | None = None,
        sources: Sequence[BandSource] = (),
    ) -> None:
        """After the index inserted the documents of these band rows (in the caller's
        transaction): add them, unless the cache is stale or already holds their commit seqs
        (an earlier attempt's rows the insert replaced): then the next use reloads.
        ``ordered``: the rows are sorted by hash (``by_hash``); ``docs``: their documents'
        doc_seqs when the caller has them (``np.unique`` over the band rows, 16 per document,
        was a sixth of adding a chunk, issue 14); ``sources``: the stored band files they are
        (``BandSource(seq)`` per commit, in order), which a remote holder reads itself."""
        if not self._loaded:
            return
        docs = seqs if docs is None else docs
        if len(docs) > 1 and not (docs[1:] > docs[:-1]).all():  # a chunk's come ascending
            docs = np.unique(docs)
        commits = docs >> ROW_BITS
        new = set(commits[np.flatnonzero(np.diff(commits, prepend=-1))].tolist())
        before = self._fingerprint
        after = (
            before[0] + len(docs),
            max(before[1], int(docs[-1]) if len(docs) else -1),
        )
        lost = self.holder.generation != self._generation
        if new & self._commit_seqs or self._table_fingerprint() != after or lost:
            self._loaded = False
            return
        self._loaded = False  # until the rows are in: a holder that fails reloads next time
        try:
            if sources and isinstance(self.holder, RemoteHolder):
                for source in sources:
                    self.holder.push_source(self.files, source)
            else:
                self.holder.push(hashes, bands, seqs, ordered=ordered)
        except HolderLostError:
            return  # the next lookup reads the files again
        self._loaded = True
        self._commit_seqs |= new
        self._fingerprint = after

    @property
    def rows(self) -> int:
        """Band rows held (0 when not loaded)."""
        try:
            return len(self.holder) if self._loaded else 0
        except HolderLostError:
            self._loaded = False
            return 0
