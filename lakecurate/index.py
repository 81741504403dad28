"""The two-tier membership index: "is this document id / this content already in the lake?".

Tier 2 is authoritative: DuckDB tables of 128-bit keys in ``state.duckdb`` (``doc_ids``,
``content_hashes``), written inside the caller's state transaction so the index and the chunk
statuses never disagree. Tier 1, when enabled, is a Bloom filter per key space in memory: a "no"
from it is final, only "maybe" keys reach DuckDB, in one batched join per chunk.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from lakecurate import bloom, engine

TIER1_P = 0.001          # target false-positive rate of each Bloom filter
TIER1_MIN_N = 1_000_000  # initial capacity; the filter grows as a chain beyond it
SPACES = (("content", "index.content_since"), ("ids", "index.ids_since"))


def describe_filter(filt: bloom.BloomFilter | bloom.ScalableBloomFilter) -> dict[str, object]:
    """n, m, k, fill ratio, estimated and target p, memory of a tier-1 filter (`index stats`)."""
    parts = filt.filters if isinstance(filt, bloom.ScalableBloomFilter) else (filt,)
    return {"n": len(filt), "filters": len(parts), "m_bits": sum(f.m for f in parts),
            "k": ",".join(str(f.k) for f in parts),
            "fill_ratio": round(max(f.fill_ratio for f in parts), 6),
            "estimated_p": float(f"{sum(f.estimated_fp_rate for f in parts):.3g}"),
            "target_p": filt.target_p, "memory_mib": round(filt.memory_bytes / 2**20, 3)}


@dataclass
class IndexStats:
    """Counters of one run, for `index stats` and for tests that count tier-2 queries."""

    lookups: int = 0          # keys asked about
    maybe: int = 0            # keys tier 1 could not rule out (all of them without tier 1)
    tier2_queries: int = 0    # batched DuckDB joins issued
    tier2_hits: int = 0       # keys DuckDB confirmed as present
    seconds: float = 0.0      # time spent in lookups and index writes

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class MembershipIndex:
    """Lake-wide membership of document ids and kept contents; see the module docstring."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self.stats = IndexStats()
        # Tier 1 filters by key space ("content", "ids"); absent = every key is a "maybe".
        self.tier1: dict[str, bloom.BloomFilter | bloom.ScalableBloomFilter] = {}

    # -- tier 1: load, verify, top up, save ------------------------------------------------
    def _halves(self, statement: str, since: int) -> Iterator[np.ndarray]:
        reader = self._con.sql(engine.q(statement), params={"since": since}).to_arrow_reader(
            1_000_000)
        for batch in reader:
            if batch.num_rows:
                yield np.stack([batch.column(0).to_numpy(), batch.column(1).to_numpy()], axis=1)

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
        for (space, since_statement), n in zip(SPACES, counts[:2], strict=True):
            path = index_dir / f"{space}.bloom"
            filt: bloom.BloomFilter | bloom.ScalableBloomFilter | None = None
            since = -1
            try:
                filt, since = bloom.load(path)
                if since > watermark:
                    warnings.append(f"index file {path} is ahead of state.duckdb (watermark "
                                    f"{since} > {watermark}): rebuilt from state.duckdb")
                    filt, since = None, -1
            except bloom.BloomFileError as exc:
                if exc.problem != "missing" or n:
                    warnings.append(f"index file {path} is {exc.problem} ({exc.detail}): "
                                    "rebuilt from state.duckdb")
            if filt is None:
                filt = bloom.ScalableBloomFilter(max(TIER1_MIN_N, 2 * int(n)), TIER1_P)
            for halves in self._halves(since_statement, since):
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
    def _keys(statement: str, column: str, values: pa.Array) -> pa.Table:
        """(value, hi, lo): the two 64-bit halves of each value's 128-bit tier-2 key.

        Computed in numpy, no query: content keys are the md5 hex read big-endian (DuckDB's
        ``('0x' || hex)::UHUGEINT``), id keys the md5 of the UTF-8 id read little-endian
        (DuckDB's ``md5_number(id)``), so SQL over the stored keys agrees with these.
        """
        strings = values.to_pylist() if isinstance(values, pa.Array | pa.ChunkedArray) else values
        if not strings:
            halves = np.zeros((0, 2), dtype=np.uint64)
        elif statement == "index.content_keys":
            halves = np.frombuffer(bytes.fromhex("".join(strings)), dtype=">u8").reshape(-1, 2)
        else:
            digests = b"".join(hashlib.md5(v.encode("utf-8", "surrogatepass")).digest()
                               for v in strings)
            halves = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)[:, ::-1]
        return pa.table({column: pa.array(strings, pa.string()),
                         "hi": pa.array(halves[:, 0].astype(np.uint64)),
                         "lo": pa.array(halves[:, 1].astype(np.uint64))})

    def _maybe(self, space: str, keys: pa.Table) -> pa.Table:
        """The rows of ``keys`` that tier 1 cannot rule out."""
        self.stats.lookups += keys.num_rows
        filt = self.tier1.get(space)
        if filt is not None and keys.num_rows:
            halves = np.stack([keys["hi"].to_numpy(), keys["lo"].to_numpy()], axis=1)
            keys = keys.filter(pa.array(filt.contains_hashes(halves)))
        self.stats.maybe += keys.num_rows
        return keys

    def _join(self, statement: str, maybe: pa.Table) -> pa.Table:
        self.stats.tier2_queries += 1
        self._con.register("maybe", maybe)
        try:
            found = self._con.sql(engine.q(statement)).to_arrow_table()
        finally:
            self._con.unregister("maybe")
        self.stats.tier2_hits += found.num_rows
        return found

    def content_seen(self, hashes: pa.Array) -> pa.Table:
        """(content_hash, doc_id) of each content already kept somewhere in the lake."""
        started = time.perf_counter()
        maybe = self._maybe("content", self._keys("index.content_keys", "content_hash", hashes))
        found = (self._join("index.content_seen", maybe) if maybe.num_rows else
                 pa.table({"content_hash": pa.array([], pa.string()),
                           "doc_id": pa.array([], pa.string())}))
        self.stats.seconds += time.perf_counter() - started
        return found

    def ids_seen(self, ids: pa.Array) -> pa.Table:
        """(id) of each given document id already in the lake."""
        started = time.perf_counter()
        maybe = self._maybe("ids", self._keys("index.id_keys", "id", ids))
        found = (self._join("index.ids_seen", maybe) if maybe.num_rows else
                 pa.table({"id": pa.array([], pa.string())}))
        self.stats.seconds += time.perf_counter() - started
        return found

    # -- writes (inside the caller's transaction) ------------------------------------------
    def add(self, kept: pa.Table, given_ids: pa.Table, seq: int) -> None:
        """Index a committed chunk: ``kept`` (content_hash, id, chunk_key) of its kept rows,
        ``given_ids`` (id, chunk_key) of every row whose id came from the source."""
        started = time.perf_counter()
        for statement, rows, space, keyer, column in (
                ("index.add_content", kept, "content", "index.content_keys", "content_hash"),
                ("index.add_ids", given_ids, "ids", "index.id_keys", "id")):
            if rows.num_rows == 0:
                continue
            self._con.register("new_rows", rows)
            try:
                self._con.execute(engine.q(statement), {"seq": seq})
            finally:
                self._con.unregister("new_rows")
            filt = self.tier1.get(space)
            if filt is not None:
                # Before the transaction commits: a rollback leaves extra keys in tier 1,
                # which only costs a "maybe", never a wrong answer.
                keys = self._keys(keyer, column, rows[column])
                filt.add_hashes(np.stack([keys["hi"].to_numpy(), keys["lo"].to_numpy()],
                                         axis=1))
        self.stats.seconds += time.perf_counter() - started

    def remove_chunks(self, keys: Sequence[str]) -> None:
        """Forget the documents of chunks whose rows left the table (tier 1 keeps them as
        harmless false positives until it is rebuilt)."""
        for statement in ("index.remove_content_of_chunks", "index.remove_ids_of_chunks"):
            self._con.execute(engine.q(statement), {"keys": list(keys)})
