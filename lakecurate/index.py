"""The membership index behind a small interface: "which of these contents are in the lake?".

Today tier 2 alone (DuckDB tables in ``state.duckdb``); the Bloom front-end slots in here without
the driver changing. Writes happen inside the caller's state transaction, so the index and the
chunk statuses can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import duckdb
import pyarrow as pa

from lakecurate import engine


class ContentIndex(Protocol):
    """Lake-wide exact-dedup membership."""

    def seen(self, hashes: pa.Array) -> pa.Table:
        """(content_hash, doc_id) for each hash already kept somewhere in the lake."""
        ...

    def add(self, kept: pa.Table) -> None:
        """Index the kept rows (content_hash, id, chunk_key) of a chunk being committed."""
        ...

    def remove_chunks(self, keys: Sequence[str]) -> None:
        """Forget the documents of chunks whose rows left the table."""
        ...


class DuckDBContentIndex:
    """Tier 2 only: one batched join per chunk, never a query per document."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self.queries = 0

    def seen(self, hashes: pa.Array) -> pa.Table:
        candidates = pa.table({"content_hash": hashes})
        self.queries += 1
        self._con.register("candidates", candidates)
        try:
            return self._con.sql(engine.q("index.seen")).to_arrow_table()
        finally:
            self._con.unregister("candidates")

    def add(self, kept: pa.Table) -> None:
        self._con.register("new_hashes", kept)
        try:
            self._con.execute(engine.q("index.add"))
        finally:
            self._con.unregister("new_hashes")

    def remove_chunks(self, keys: Sequence[str]) -> None:
        self._con.execute(engine.q("index.remove_chunks"), {"keys": list(keys)})
