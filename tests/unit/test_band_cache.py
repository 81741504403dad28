"""The band cache answers what a join over ``minhash_bands`` answers, and never from stale rows."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pytest

from lakecurate import engine
from lakecurate.store.band_cache import BandCache

JOIN = """
SELECT DISTINCT n.doc_seq AS src, o.doc_seq AS dst
FROM q n JOIN minhash_bands o ON o.band = n.band AND o.band_hash = n.band_hash
WHERE o.doc_seq < $below ORDER BY src, dst
"""


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    con = engine.connect(threads=1)
    con.execute(engine.q("dedup.create_bands"))
    yield con
    con.close()


def chunk(rng: np.random.Generator, seq: int, docs: int) -> tuple[np.ndarray, ...]:
    """(hash, band, doc_seq) rows of ``docs`` documents of 4 bands, hashes from a small range
    so that buckets collide across chunks (and, rarely, across bands)."""
    n = docs * 4
    hashes = rng.integers(0, 400, n).astype(np.uint64) * np.uint64(2**40)
    bands = np.tile(np.arange(4, dtype=np.uint8), docs)
    seqs = (np.int64(seq) << np.int64(32)) | np.repeat(np.arange(docs, dtype=np.int64), 4)
    return hashes, bands, seqs


def insert(con: duckdb.DuckDBPyConnection, cache: BandCache, rows: tuple[np.ndarray, ...]) -> None:
    hashes, bands, seqs = rows
    con.executemany(
        "INSERT INTO minhash_bands VALUES (?, ?, ?)",
        [(int(b), int(h), int(s)) for h, b, s in zip(hashes, bands, seqs, strict=True)],
    )
    cache.add(hashes, bands, seqs)


def joined(con: duckdb.DuckDBPyConnection, rows: tuple[np.ndarray, ...], below: int) -> list:
    hashes, bands, seqs = rows
    con.register("q", {"band_hash": hashes, "band": bands.astype(np.int64), "doc_seq": seqs})
    try:
        return con.execute(JOIN, {"below": below}).fetchall()
    finally:
        con.unregister("q")


def cached(cache: BandCache, rows: tuple[np.ndarray, ...], below: int) -> list:
    src, dst = cache.candidates(*rows, below=below)
    return list(zip(src.tolist(), dst.tolist(), strict=True))


def test_cache_equals_the_join_as_the_index_grows(con: duckdb.DuckDBPyConnection) -> None:
    rng = np.random.default_rng(1)
    cache = BandCache(con)
    for seq in range(1, 30):
        rows = chunk(rng, seq, int(rng.integers(1, 40)))
        below = seq << 32
        assert cached(cache, rows, below) == joined(con, rows, below)
        insert(con, cache, rows)
    assert cache.loads == 1  # loaded once, then kept up by add
    assert cache.rows == con.execute("SELECT count(*) FROM minhash_bands").fetchall()[0][0]


def test_a_change_the_cache_did_not_make_reloads_it(con: duckdb.DuckDBPyConnection) -> None:
    rng = np.random.default_rng(2)
    cache = BandCache(con)
    chunks = [chunk(rng, seq, 30) for seq in range(1, 6)]
    for rows in chunks:
        cached(cache, rows, 0)
        insert(con, cache, rows)
    probe = chunk(rng, 9, 30)
    before = cached(cache, probe, 9 << 32)
    assert before  # the probe does meet earlier chunks
    # Rows forgotten behind the cache's back (a supersede, an abandoned intent).
    con.execute("DELETE FROM minhash_bands WHERE doc_seq >> 32 = 3")
    assert cached(cache, probe, 9 << 32) == joined(con, probe, 9 << 32) != before
    assert cache.loads == 2
    # A rolled-back transaction: the cache saw the insert, the table does not keep it.
    con.begin()
    insert(con, cache, chunk(rng, 7, 30))
    con.rollback()
    assert cached(cache, probe, 9 << 32) == joined(con, probe, 9 << 32)
    assert cache.loads == 3
    # The same seq written again (a retried chunk): never two copies of its rows.
    again = chunk(rng, 5, 30)
    con.execute("DELETE FROM minhash_bands WHERE doc_seq >> 32 = 5")
    insert(con, cache, again)
    assert cached(cache, probe, 9 << 32) == joined(con, probe, 9 << 32)
