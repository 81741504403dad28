"""The two-tier membership index: "is this document id / this content already in the lake?".

Tier 2 is authoritative: 128-bit keys in files beside ``state.duckdb`` (``store.key_files``),
registered inside the caller's state transaction so the index and the chunk statuses never
disagree. Tier 1, when enabled, is a Bloom filter per key space in memory: a "no"
from it is final, only "maybe" keys reach tier 2, whose keys a cache holds sorted in memory
(``store.key_cache``: a join in DuckDB scanned every key of the lake for each chunk).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import engine
from lakecurate.store import bloom
from lakecurate.store.key_cache import KeyCache, KeyHolder
from lakecurate.store.key_files import SPACES, KeyFiles

TIER1_P = 0.001  # target false-positive rate of each Bloom filter
TIER1_MIN_N = 1_000_000  # initial capacity; the filter grows as a chain beyond it
BULK_ROWS = 2048
"""From this many ids on, their keys are computed by DuckDB over the Arrow column; below it in
numpy (a query's fixed cost outweighs per-row Python)."""


def _nibbles() -> np.ndarray:
    """Byte -> its hex digit's value (255: not a hex digit)."""
    table = np.full(256, 255, dtype=np.uint8)
    for value, digit in enumerate("0123456789abcdef"):
        table[ord(digit)] = table[ord(digit.upper())] = value
    return table


_NIBBLE = _nibbles()


def content_halves(hashes: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """(n, 2) uint64: the content keys of md5 hex digests (``('0x' || hex)::UHUGEINT``),
    decoded in numpy from the Arrow column's bytes: a Python string per document (and
    ``bytes.fromhex`` of their join) cost the driver a microsecond a document (issue 14)."""
    arr = hashes.combine_chunks() if isinstance(hashes, pa.ChunkedArray) else hashes
    if len(arr) == 0:
        return np.zeros((0, 2), dtype=np.uint64)
    if arr.null_count:
        raise ValueError("a content hash is missing")
    wide = pa.types.is_large_string(arr.type)
    if not (wide or pa.types.is_string(arr.type)):
        arr = arr.cast(pa.string())
    _, offsets_buf, data_buf = arr.buffers()
    assert offsets_buf is not None and data_buf is not None
    offsets = np.frombuffer(
        offsets_buf, dtype=np.int64 if wide else np.int32, count=arr.offset + len(arr) + 1
    )[arr.offset :]
    if not (np.diff(offsets) == 32).all():
        raise ValueError("a content hash is not 32 hex digits")
    digits = _NIBBLE[np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]]
    if (digits == 255).any():
        raise ValueError("a content hash is not 32 hex digits")
    pairs = digits.reshape(-1, 32)
    raw = np.ascontiguousarray((pairs[:, 0::2] << 4) | pairs[:, 1::2])  # (n, 16) bytes
    return raw.view(">u8").astype(np.uint64)


def describe_filter(filt: bloom.BloomFilter | bloom.ScalableBloomFilter) -> dict[str, object]:
    """n, m, k, fill ratio, estimated and target p, memory of a tier-1 filter (`index stats`)."""
    parts = filt.filters if isinstance(filt, bloom.ScalableBloomFilter) else (filt,)
    return {
        "n": len(filt),
        "filters": len(parts),
        "m_bits": sum(f.m for f in parts),
        "k": ",".join(str(f.k) for f in parts),
        "fill_ratio": round(max(f.fill_ratio for f in parts), 6),
        "estimated_p": float(f"{sum(f.estimated_fp_rate for f in parts):.3g}"),
        "target_p": filt.target_p,
        "memory_mib": round(filt.memory_bytes / 2**20, 3),
    }


@dataclass
class IndexStats:
    """Counters of one run, for `index stats` and for tests that count tier-2 queries."""

    lookups: int = 0  # keys asked about
    maybe: int = 0  # keys tier 1 could not rule out (all of them without tier 1)
    tier2_queries: int = 0  # batched tier-2 lookups (of the key cache)
    tier2_hits: int = 0  # keys tier 2 confirmed as present
    seconds: float = 0.0  # time spent in lookups and index writes
    lookup_seconds: float = 0.0  # of which lookups (tier 1 and tier 2)
    write_seconds: float = 0.0  # of which index writes (tier 2 inserts and tier 1 adds)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _distinct(halves: np.ndarray) -> np.ndarray:
    """The distinct rows of ``halves`` ((n, 2) uint64), sorted: ``np.unique(axis=0)``'s
    answer, 4x faster (it sorts the rows as opaque bytes: 9 ms a chunk of 14,000 ids)."""
    ordered = halves[np.lexsort((halves[:, 1], halves[:, 0]))]
    first = np.ones(len(ordered), dtype=bool)
    first[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    return ordered[first]


class MembershipIndex:
    """Lake-wide membership of document ids and contents seen; see the module docstring."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self.stats = IndexStats()
        # Tier 1 filters by key space ("content", "ids"); absent = every key is a "maybe".
        self.tier1: dict[str, bloom.BloomFilter | bloom.ScalableBloomFilter] = {}
        self.files = KeyFiles(con)
        self._pending: dict[str, list[pa.Table]] = {space: [] for space in SPACES}
        self._batching = False
        self._id_memo: tuple[pa.Array, np.ndarray] | None = None  # see `_id_halves`
        self.tier2 = {space: KeyCache(self.files, space) for space in SPACES}

    def hold_keys_in(self, holder: KeyHolder) -> None:
        """Tier 2's key caches hold their keys in ``holder`` (decider processes) from now on."""
        self.tier2 = {space: KeyCache(self.files, space, holder) for space in SPACES}

    # -- tier 1: load, verify, top up, save ------------------------------------------------
    def _halves(self, space: str, since: int) -> np.ndarray:
        table = self.files.read(space, since)
        return np.stack([table["hi"].to_numpy(), table["lo"].to_numpy()], axis=1)

    def watermark(self) -> int:
        """The last DONE commit seq: what a Bloom file must cover to be current."""
        return int(self._con.execute(engine.q("index.counts")).fetchall()[0][2])

    def open_tier1(self, index_dir: Path) -> list[str]:
        """Load the Bloom files, checking and topping them up from DuckDB; returns warnings.

        The files are a cache: missing, damaged (checksum, truncation, foreign) or stale ones
        are rebuilt from tier 2, so the answer is never wrong, only slower once.
        """
        warnings: list[str] = []
        watermark = self.watermark()
        counts = self._con.execute(engine.q("index.counts")).fetchall()[0]
        for space, n in zip(SPACES, counts[:2], strict=True):
            path = index_dir / f"{space}.bloom"
            filt: bloom.BloomFilter | bloom.ScalableBloomFilter | None = None
            since = -1
            try:
                filt, since = bloom.load(path)
                if since > watermark:
                    warnings.append(
                        f"index file {path} is ahead of state.duckdb (watermark "
                        f"{since} > {watermark}): rebuilt from state.duckdb"
                    )
                    filt, since = None, -1
            except bloom.BloomFileError as exc:
                if exc.problem != "missing" or n:
                    warnings.append(
                        f"index file {path} is {exc.problem} ({exc.detail}): "
                        "rebuilt from state.duckdb"
                    )
            if filt is None:
                filt = bloom.ScalableBloomFilter(max(TIER1_MIN_N, 2 * int(n)), TIER1_P)
            halves = self._halves(space, since)
            if len(halves):
                filt.add_hashes(halves)
            self.tier1[space] = filt
        return warnings

    def save_tier1(self, index_dir: Path) -> None:
        """Persist the Bloom files with the watermark they cover (atomic; a cache only)."""
        index_dir.mkdir(exist_ok=True)
        watermark = self.watermark()
        for space, filt in self.tier1.items():
            filt.save(index_dir / f"{space}.bloom", watermark)

    # -- lookups ---------------------------------------------------------------------------
    @staticmethod
    def _halves_of(statement: str, strings: Sequence[str]) -> np.ndarray:
        """(n, 2) uint64: the two 64-bit halves of each value's 128-bit tier-2 key.

        Computed in numpy, no query: content keys are the md5 hex read big-endian (DuckDB's
        ``('0x' || hex)::UHUGEINT``), id keys the md5 of the UTF-8 id read little-endian
        (DuckDB's ``md5_number(id)``), so SQL over the stored keys agrees with these.
        """
        if not strings:
            return np.zeros((0, 2), dtype=np.uint64)
        if statement == "index.content_keys":
            return content_halves(pa.array(strings, pa.string()))
        digests = b"".join(
            hashlib.md5(v.encode("utf-8", "surrogatepass")).digest() for v in strings
        )
        return np.ascontiguousarray(np.frombuffer(digests, dtype="<u8").reshape(-1, 2)[:, ::-1])

    @classmethod
    def _keys(cls, statement: str, column: str, values: pa.Array | Sequence[str]) -> pa.Table:
        """(value, hi, lo) of each value; see ``_halves_of``."""
        strings = values.to_pylist() if isinstance(values, pa.Array | pa.ChunkedArray) else values
        halves = cls._halves_of(statement, strings)
        return pa.table(
            {
                column: pa.array(strings, pa.string()),
                "hi": pa.array(halves[:, 0]),
                "lo": pa.array(halves[:, 1]),
            }
        )

    def _maybe(self, space: str, statement: str, values: pa.Array) -> list[str]:
        """The values tier 1 cannot rule out (all of them without tier 1): only those become
        Python strings."""
        self.stats.lookups += len(values)
        filt = self.tier1.get(space)
        if filt is not None and len(values):
            halves = (
                self._id_halves(values) if statement == "index.id_keys" else content_halves(values)
            )
            values = values.take(pa.array(np.flatnonzero(filt.contains_hashes(halves))))
        strings: list[str] = values.to_pylist()
        self.stats.maybe += len(strings)
        return strings

    def _tier2(self, space: str, halves: np.ndarray) -> tuple[np.ndarray, pa.Array | None]:
        """One batched tier-2 lookup of the maybe keys (``halves``), in the key cache."""
        self.stats.tier2_queries += 1
        found, ids = self.tier2[space].find(halves)
        self.stats.tier2_hits += int(found.sum())
        return found, ids

    def content_seen(self, hashes: pa.Array) -> pa.Table:
        """(content_hash, doc_id) of each content already kept somewhere in the lake."""
        started = time.perf_counter()
        maybe = list(dict.fromkeys(self._maybe("content", "index.content_keys", hashes)))
        found: list[str] = []
        ids: pa.Array = pa.array([], pa.string())
        if maybe:
            hit, got = self._tier2("content", self._halves_of("index.content_keys", maybe))
            found = [maybe[i] for i in np.flatnonzero(hit)]
            ids = got if got is not None else ids
        table = pa.table({"content_hash": pa.array(found, pa.string()), "doc_id": ids})
        self._spent(started, "lookup_seconds")
        return table

    def ids_seen(self, ids: pa.Array) -> pa.Table:
        """(id) of each given document id already in the lake, once each."""
        started = time.perf_counter()
        maybe = list(dict.fromkeys(self._maybe("ids", "index.id_keys", ids)))
        found: list[str] = []
        if maybe:
            hit, _ = self._tier2("ids", self._id_halves(pa.array(maybe, pa.string())))
            found = [maybe[i] for i in np.flatnonzero(hit)]
        table = pa.table({"id": pa.array(found, pa.string())})
        self._spent(started, "lookup_seconds")
        return table

    def _id_halves(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """``_halves_of`` for document ids, computed by DuckDB's ``md5_number`` over the Arrow
        column (the key's own definition, ``index.id_keys``) instead of one Python md5 call
        per id. The last large call's keys are kept: a chunk's given ids are keyed for its
        lookups, then again for its index rows."""
        if len(ids) < BULK_ROWS:  # a query's fixed cost is more than a few md5 calls
            return self._halves_of("index.id_keys", ids.to_pylist())
        if self._id_memo is not None:
            at = pc.index_in(ids, value_set=self._id_memo[0])
            if at.null_count == 0:
                picked: np.ndarray = self._id_memo[1][at.to_numpy(zero_copy_only=False)]
                return picked
        self._con.register("candidates", pa.table({"id": ids}))
        try:
            cols = self._con.execute(engine.q("index.id_keys")).fetchnumpy()
        finally:
            self._con.unregister("candidates")
        halves = np.stack(
            [np.asarray(cols["hi"], dtype=np.uint64), np.asarray(cols["lo"], dtype=np.uint64)],
            axis=1,
        )
        chunked = ids if isinstance(ids, pa.ChunkedArray) else pa.chunked_array([ids])
        self._id_memo = (chunked.combine_chunks(), halves)
        return halves

    # -- writes (inside the caller's transaction) ------------------------------------------
    def add(self, kept: pa.Table, given_ids: pa.Table, seq: int) -> None:
        """Index a committed chunk under its commit ``seq``: ``kept`` (content_hash, id) of its
        kept rows, ``given_ids`` (id) of every row whose id came from the source (an id
        repeated within the chunk is one key, as in rebuild).

        A key file per space, registered in the caller's transaction, so the keys commit or
        roll back with the chunk's SUCCESS (inside :meth:`batch`, one file per space for every
        chunk of the batch), keyed as the SQL definitions key them (``('0x' || hex)::UHUGEINT``,
        ``md5_number(id)``; tested). Tier 1 and the key caches take the same keys.
        """
        started = time.perf_counter()
        if kept.num_rows:
            seqs = pa.array(np.full(kept.num_rows, seq, np.int64))
            self.add_content(kept.append_column("seq", seqs))
        if given_ids.num_rows:
            distinct = _distinct(self._id_halves(given_ids["id"]))
            seqs = np.full(len(distinct), seq, np.int64)
            keys = pa.table({"hi": distinct[:, 0], "lo": distinct[:, 1], "seq": seqs})
            self._stage("ids", keys, distinct)
        self._spent(started, "write_seconds")

    def add_content(self, rows: pa.Table) -> None:
        """Index ``rows`` (content_hash, id, seq) as content keys."""
        halves = content_halves(rows["content_hash"])
        keys = pa.table(
            {"hi": halves[:, 0], "lo": halves[:, 1], "seq": rows["seq"], "doc_id": rows["id"]}
        )
        self._stage("content", keys, halves)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Adds inside this block go into one key file per space, written when it ends: a
        batch of small chunks pays one file, one fsync, not one per chunk."""
        self._batching = True
        try:
            yield
            self._batching = False
            self._flush()
        finally:
            self._batching = False
            for parts in self._pending.values():
                parts.clear()

    def _stage(self, space: str, keys: pa.Table, halves: np.ndarray) -> None:
        self._tier1_add(space, halves)
        self._pending[space].append(keys)
        if not self._batching:
            self._flush()

    def _flush(self) -> None:
        for space, parts in self._pending.items():
            if parts:
                keys = pa.concat_tables(parts)
                parts.clear()
                self.tier2[space].add(keys, self.files.write(space, keys))

    def _tier1_add(self, space: str, halves: np.ndarray) -> None:
        filt = self.tier1.get(space)
        if filt is not None:
            # Before the transaction commits: a rollback leaves extra keys in tier 1,
            # which only costs a "maybe", never a wrong answer.
            filt.add_hashes(halves)

    def _spent(self, started: float, part: str) -> None:
        took = time.perf_counter() - started
        self.stats.seconds += took
        setattr(self.stats, part, getattr(self.stats, part) + took)

    def remove_commits(self, seqs: Sequence[int]) -> None:
        """Forget the documents of the chunks committed with ``seqs``, whose rows left the table
        (tier 1 keeps them as harmless false positives until it is rebuilt)."""
        self.files.forget(seqs)
        self.forget()

    def forget(self) -> None:
        """The key files changed behind the caches' backs: they read them again when asked."""
        for cache in self.tier2.values():
            cache.forget()
