"""The band cache answers what a join over every indexed band row answers, and never from stale
rows: its truth is the band files of the commits ``minhash_docs`` holds documents of. So does
it when decider processes hold its rows (``store.band_shards``), even when one is killed."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from helpers import held_in, kill_decider

from lakecurate import engine
from lakecurate.store.band_cache import BandCache, BandSource, Holder
from lakecurate.store.band_shards import Shards
from lakecurate.store.signatures import SignatureFiles

# The model: every live band row, kept by the test beside the index.
JOIN = """
SELECT DISTINCT n.doc_seq AS src, o.doc_seq AS dst
FROM q n JOIN model o ON o.band = n.band AND o.band_hash = n.band_hash
WHERE o.doc_seq < $below ORDER BY src, dst
"""
BANDS = 4


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    con = engine.connect(threads=1)
    con.execute(engine.q("dedup.create_docs"))
    con.execute("CREATE TABLE model (band UTINYINT, band_hash UBIGINT, doc_seq BIGINT)")
    yield con
    con.close()


@pytest.fixture
def files(tmp_path: Path) -> SignatureFiles:
    return SignatureFiles(tmp_path / "signatures").bands()


@pytest.fixture(params=["driver", "3 deciders"])
def holder(request: pytest.FixtureRequest) -> Iterator[Holder | None]:
    """Where the cache's rows live: in the test's process, or in 3 real decider processes."""
    yield from held_in(request)


Chunk = tuple[np.ndarray, np.ndarray]  # (doc_seq, hashes of shape (docs, BANDS))


def chunk(rng: np.random.Generator, seq: int, docs: int) -> Chunk:
    """``docs`` documents of 4 bands, hashes from a small range so that buckets collide across
    chunks (and, rarely, across bands)."""
    hashes = rng.integers(0, 400, (docs, BANDS)).astype(np.uint64) * np.uint64(2**40)
    return (np.int64(seq) << np.int64(32)) | np.arange(docs, dtype=np.int64), hashes


def rows(c: Chunk) -> tuple[np.ndarray, ...]:
    doc_seq, hashes = c
    bands = np.tile(np.arange(BANDS, dtype=np.uint8), len(doc_seq))
    return hashes.reshape(-1), bands, np.repeat(doc_seq, BANDS)


def insert(
    con: duckdb.DuckDBPyConnection, files: SignatureFiles, cache: BandCache, c: Chunk
) -> None:
    """What ``NearDedupIndex.add_chunk`` does: the band file first, then the documents."""
    doc_seq, hashes = c
    offsets = pa.array(np.arange(0, hashes.size + 1, BANDS, dtype=np.int32))
    lists = pa.ListArray.from_arrays(offsets, pa.array(hashes.reshape(-1), pa.uint64()))
    files.write(pa.table({"doc_seq": doc_seq, "bands": lists}))
    con.executemany(
        "INSERT INTO minhash_docs VALUES (?, 'id', ?)", [(int(s), int(s)) for s in doc_seq]
    )
    h, b, s = rows(c)
    con.register("new", {"band": b.astype(np.int64), "band_hash": h, "doc_seq": s})
    con.execute("INSERT INTO model SELECT band, band_hash, doc_seq FROM new")
    con.unregister("new")
    # A holder in other processes reads the band file just written instead of the rows.
    cache.add(h, b, s, sources=[BandSource(int(doc_seq[0]) >> 32)])


def forget(con: duckdb.DuckDBPyConnection, seq: int) -> None:
    """A supersede's or an abandoned intent's forget: the documents only (the file stays)."""
    for table in ("minhash_docs", "model"):
        con.execute(f"DELETE FROM {table} WHERE doc_seq >> 32 = {seq}")


def joined(con: duckdb.DuckDBPyConnection, c: Chunk, below: int) -> list:
    hashes, bands, seqs = rows(c)
    con.register("q", {"band_hash": hashes, "band": bands.astype(np.int64), "doc_seq": seqs})
    try:
        return con.execute(JOIN, {"below": below}).fetchall()
    finally:
        con.unregister("q")


def cached(cache: BandCache, c: Chunk, below: int) -> list:
    src, dst = cache.candidates(*rows(c), below=below)
    return list(zip(src.tolist(), dst.tolist(), strict=True))


def test_cache_equals_the_join_as_the_index_grows(
    con: duckdb.DuckDBPyConnection, files: SignatureFiles, holder: Holder | None
) -> None:
    rng = np.random.default_rng(1)
    cache = BandCache(con, files, holder)
    for seq in range(1, 30):
        c = chunk(rng, seq, int(rng.integers(1, 40)))
        below = seq << 32
        assert cached(cache, c, below) == joined(con, c, below)
        insert(con, files, cache, c)
    assert cache.loads == 1  # loaded once, then kept up by add
    assert cache.rows == con.execute("SELECT count(*) FROM model").fetchall()[0][0]
    # A new cache (the next session) loads the same rows from the files.
    probe = chunk(rng, 40, 30)
    fresh = BandCache(con, files)
    assert cached(fresh, probe, 40 << 32) == cached(cache, probe, 40 << 32)
    assert fresh.rows == cache.rows
    if isinstance(holder, Shards):  # every shard holds a part: the rows are spread
        held = holder._ask([("rows", ())] * holder.count)
        assert sum(held) == cache.rows and min(held) > 0


def test_a_change_the_cache_did_not_make_reloads_it(
    con: duckdb.DuckDBPyConnection, files: SignatureFiles, holder: Holder | None
) -> None:
    rng = np.random.default_rng(2)
    cache = BandCache(con, files, holder)
    for seq in range(1, 6):
        c = chunk(rng, seq, 30)
        cached(cache, c, 0)
        insert(con, files, cache, c)
    probe = chunk(rng, 9, 30)
    before = cached(cache, probe, 9 << 32)
    assert before  # the probe does meet earlier chunks
    # Documents forgotten behind the cache's back (a supersede, an abandoned intent): their
    # band file stays, and must not be read.
    forget(con, 3)
    assert cached(cache, probe, 9 << 32) == joined(con, probe, 9 << 32) != before
    assert cache.loads == 2
    # A rolled-back transaction: the cache saw the insert, the index does not keep it (its
    # band file is a leftover).
    con.begin()
    insert(con, files, cache, chunk(rng, 7, 30))
    con.rollback()
    assert cached(cache, probe, 9 << 32) == joined(con, probe, 9 << 32)
    assert cache.loads == 3
    # The same seq written again (a retried chunk): never two copies of its rows.
    forget(con, 5)
    insert(con, files, cache, chunk(rng, 5, 30))
    assert cached(cache, probe, 9 << 32) == joined(con, probe, 9 << 32)


def sharded_lake(
    con: duckdb.DuckDBPyConnection, files: SignatureFiles, shards: Shards, rng: np.random.Generator
) -> tuple[BandCache, Chunk, list]:  # type: ignore[type-arg]
    """A cache on ``shards`` holding 7 chunks, a probe chunk, and the probe's candidates
    (checked against the join: not empty)."""
    cache = BandCache(con, files, shards)
    for seq in range(1, 8):
        insert(con, files, cache, chunk(rng, seq, 30))
    probe = chunk(rng, 9, 30)
    before = cached(cache, probe, 9 << 32)
    assert before == joined(con, probe, 9 << 32) and before
    return cache, probe, before


def test_a_killed_decider_loses_nothing(
    con: duckdb.DuckDBPyConnection, files: SignatureFiles
) -> None:
    """SIGKILL a decider process between lookups, and between an insert and the next lookup:
    the cache starts them again, reads the band files again, and answers as before."""
    rng = np.random.default_rng(4)
    shards = Shards(2)
    try:
        cache, probe, before = sharded_lake(con, files, shards, rng)
        kill_decider(shards, 1)
        assert cached(cache, probe, 9 << 32) == before
        assert shards.starts == 2 and cache.loads == 2
        kill_decider(shards, 0)
        insert(con, files, cache, chunk(rng, 8, 30))  # the add finds it dead: reload next
        assert cached(cache, probe, 9 << 32) == joined(con, probe, 9 << 32)
        assert shards.starts == 3 and cache.loads == 3
    finally:
        shards.close()


def test_deciders_lost_while_another_cache_asked_are_given_the_rows_again(
    con: duckdb.DuckDBPyConnection, files: SignatureFiles
) -> None:
    """The decider processes also hold tier 2's keys: when they die while a key cache asks
    them, they are started again empty, and the band cache must notice (their generation)
    rather than search shards that hold nothing."""
    from lakecurate.store.band_cache import HolderLostError

    rng = np.random.default_rng(5)
    shards = Shards(2)
    try:
        cache, probe, before = sharded_lake(con, files, shards, rng)
        kill_decider(shards, 0)
        with pytest.raises(HolderLostError):  # another cache's question finds it dead
            shards.keys_held("content")
        assert shards.keys_held("content") == 0  # started again, empty
        assert cached(cache, probe, 9 << 32) == before
        assert cache.loads == 2
    finally:
        shards.close()


def test_a_merge_keeps_every_row_in_hash_order() -> None:
    from lakecurate.store.band_cache import _Run

    rng = np.random.default_rng(3)

    def run(n: int) -> _Run:
        hashes = rng.integers(0, 50, n).astype(np.uint64)  # many equal hashes across runs
        return _Run([hashes, rng.integers(0, 4, n).astype(np.uint8), rng.integers(0, 10**9, n)])

    a, b = run(300), run(120)
    m = a.merged(b)
    assert (np.diff(m.hashes.astype(np.int64)) >= 0).all()

    def rows(r: _Run) -> list[tuple[int, int, int]]:
        return sorted(zip(r.hashes.tolist(), r.bands.tolist(), r.seqs.tolist(), strict=True))

    assert rows(m) == sorted(rows(a) + rows(b))


def test_chunk_pairs_equal_the_join_of_a_chunks_buckets(con: duckdb.DuckDBPyConnection) -> None:
    """What decider processes pair inside a chunk is what ``dedup.chunk_candidates`` joins."""
    from lakecurate.store.band_cache import by_hash, chunk_pairs, distinct_pairs

    rng = np.random.default_rng(5)
    c = chunk(rng, 3, 300)  # small hash range: big buckets, and shared across bands
    hashes, bands, seqs = rows(c)
    con.register("b", {"band": bands.astype(np.int64), "band_hash": hashes, "doc_seq": seqs})
    join = con.execute(
        "SELECT DISTINCT n.doc_seq, m.doc_seq FROM b n JOIN b m ON m.band = n.band "
        "AND m.band_hash = n.band_hash WHERE m.doc_seq < n.doc_seq ORDER BY 1, 2"
    ).fetchall()
    for given in (by_hash((hashes, bands, seqs)), (hashes, bands, seqs)):  # sorted or not
        src, dst = distinct_pairs(*chunk_pairs(given))  # type: ignore[arg-type]
        assert list(zip(src.tolist(), dst.tolist(), strict=True)) == join and len(join) > 300
    lone = chunk(rng, 4, 50)  # hashes from a huge range: no bucket shared, no pair
    lone_hashes = rng.integers(0, 2**62, lone[1].shape).astype(np.uint64)
    src, _ = chunk_pairs(by_hash(rows((lone[0], lone_hashes))))  # type: ignore[arg-type]
    assert len(src) == 0


def test_a_deciders_error_reaches_the_driver_as_itself(files: SignatureFiles) -> None:
    """A band file missing under a decider: the driver gets the same error, with what to do."""
    from lakecurate.errors import IndexFilesError

    shards = Shards(2)
    try:
        with pytest.raises(IndexFilesError, match="verify --repair"):
            shards.load(files, [7])  # no band file of commit seq 7
        assert shards.starts == 1  # the shards are still up: no restart
        assert len(shards) == 0
    finally:
        shards.close()


def test_a_frozen_decider_is_killed_and_replaced(
    con: duckdb.DuckDBPyConnection, files: SignatureFiles
) -> None:
    """SIGSTOP a decider (frozen: alive, silent): after ``silence`` seconds without a beat it
    is killed, the shards start again and read the band files again, and the answer is the
    same."""
    import os
    import signal
    import time

    shards = Shards(2, silence=2.0)
    try:
        cache, probe, before = sharded_lake(con, files, shards, np.random.default_rng(6))
        os.kill(shards._procs[0].pid, signal.SIGSTOP)  # type: ignore[arg-type]
        started = time.monotonic()
        assert cached(cache, probe, 9 << 32) == before
        assert 2.0 <= time.monotonic() - started < 30
        assert shards.starts == 2 and cache.loads == 2
    finally:
        shards.close()


def test_a_decider_reads_a_runs_band_files_once_and_holds_only_that_run(
    files: SignatureFiles,
) -> None:
    """A shard's run rows (looked up, paired within, then pushed) are read once, equal what a
    fresh read gives, and are forgotten when pushed or when another run is asked for: what a
    shard holds stays one run's part of the band rows."""
    from lakecurate.store.band_cache import Rows, merged
    from lakecurate.store.band_shards import _RunRows, part

    rng = np.random.default_rng(11)
    for seq in (1, 2, 3):
        doc_seq, hashes = chunk(rng, seq, 50)
        offsets = pa.array(np.arange(0, hashes.size + 1, BANDS, dtype=np.int32))
        lists = pa.ListArray.from_arrays(offsets, pa.array(hashes.reshape(-1), pa.uint64()))
        files.write(pa.table({"doc_seq": doc_seq, "bands": lists}))

    def keep(r: Rows) -> Rows:
        return part(r, 1, 3)

    held = _RunRows(keep)
    folder, column = str(files.folder), files.column
    run = [BandSource(1), BandSource(2)]
    fresh = merged([s.rows(files, keep) for s in run])
    for _ in range(2):  # the second time from what is held
        got = held.run(folder, column, run)
        assert all(np.array_equal(a, b) for a, b in zip(got, fresh, strict=True))
        assert np.all(np.diff(got[0].astype(np.float64)) >= 0)
    assert {k[2] for k in held.held} == set(run)
    pushed = held.take(folder, column, BandSource(1))
    assert all(np.array_equal(a, b) for a, b in zip(pushed, run[0].rows(files, keep), strict=True))
    assert {k[2] for k in held.held} == {BandSource(2)}
    held.run(folder, column, [BandSource(3)])  # the next run: the last one's rows go
    assert {k[2] for k in held.held} == {BandSource(3)}
    # A run read from its workers' bands files, then pushed as the commits' stored band files
    # (the same bytes, placed): the push takes what the run held. The stored file of seq 3 is
    # gone here, so a push that read it would fail.
    worker = files.folder.parent / "worker-3.bands"
    shutil.copy(files._path(3), worker)
    files._path(3).unlink()
    from_worker = BandSource(3, str(worker))
    got = held.run(folder, column, [from_worker])
    pushed = held.take(folder, column, BandSource(3))
    assert all(np.array_equal(a, b) for a, b in zip(pushed, got, strict=True)) and not held.held
