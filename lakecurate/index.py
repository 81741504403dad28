"""The two-tier membership index: "is this document id / this content already in the lake?".

Tier 2 is authoritative: DuckDB tables of 128-bit keys in ``state.duckdb`` (``doc_ids``,
``content_hashes``), written inside the caller's state transaction so the index and the chunk
statuses never disagree. Tier 1, when enabled, is a Bloom filter per key space in memory: a "no"
from it is final, only "maybe" keys reach DuckDB, in one batched join per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from lakecurate import engine


@dataclass
class IndexStats:
    """Counters of one run, for `index stats` and for tests that count tier-2 queries."""

    lookups: int = 0          # keys asked about
    maybe: int = 0            # keys tier 1 could not rule out (all of them without tier 1)
    tier2_queries: int = 0    # batched DuckDB joins issued
    tier2_hits: int = 0       # keys DuckDB confirmed as present


class MembershipIndex:
    """Lake-wide membership of document ids and kept contents; see the module docstring."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self.stats = IndexStats()
        # Tier 1 filters by key space ("content", "ids"); None = every key is a "maybe".
        self.tier1: dict[str, object] = {}

    # -- lookups ---------------------------------------------------------------------------
    def _keys(self, statement: str, column: str, values: pa.Array) -> pa.Table:
        self._con.register("candidates", pa.table({column: values}))
        try:
            return self._con.sql(engine.q(statement)).to_arrow_table()
        finally:
            self._con.unregister("candidates")

    def _maybe(self, space: str, keys: pa.Table) -> pa.Table:
        """The rows of ``keys`` that tier 1 cannot rule out."""
        self.stats.lookups += keys.num_rows
        bloom = self.tier1.get(space)
        if bloom is not None and keys.num_rows:
            halves = np.stack([keys["hi"].to_numpy(), keys["lo"].to_numpy()], axis=1)
            keys = keys.filter(pa.array(bloom.contains_hashes(halves)))  # type: ignore[attr-defined]
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
        maybe = self._maybe("content", self._keys("index.content_keys", "content_hash", hashes))
        if maybe.num_rows == 0:
            return pa.table({"content_hash": pa.array([], pa.string()),
                             "doc_id": pa.array([], pa.string())})
        return self._join("index.content_seen", maybe)

    def ids_seen(self, ids: pa.Array) -> pa.Table:
        """(id) of each given document id already in the lake."""
        maybe = self._maybe("ids", self._keys("index.id_keys", "id", ids))
        if maybe.num_rows == 0:
            return pa.table({"id": pa.array([], pa.string())})
        return self._join("index.ids_seen", maybe)

    # -- writes (inside the caller's transaction) ------------------------------------------
    def add(self, kept: pa.Table, given_ids: pa.Table, seq: int) -> None:
        """Index a committed chunk: ``kept`` (content_hash, id, chunk_key) of its kept rows,
        ``given_ids`` (id, chunk_key) of every row whose id came from the source."""
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
            bloom = self.tier1.get(space)
            if bloom is not None:
                # Before the transaction commits: a rollback leaves extra keys in tier 1,
                # which only costs a "maybe", never a wrong answer.
                keys = self._keys(keyer, column, rows[column])
                bloom.add_hashes(np.stack([keys["hi"].to_numpy(),  # type: ignore[attr-defined]
                                           keys["lo"].to_numpy()], axis=1))

    def remove_chunks(self, keys: Sequence[str]) -> None:
        """Forget the documents of chunks whose rows left the table (tier 1 keeps them as
        harmless false positives until it is rebuilt)."""
        for statement in ("index.remove_content_of_chunks", "index.remove_ids_of_chunks"):
            self._con.execute(engine.q(statement), {"keys": list(keys)})
