"""The two-tier membership index: tier 1 (Bloom files) is a cache in front of tier 2 (DuckDB).
Losing or damaging it loses nothing; only keys tier 1 cannot rule out reach DuckDB."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import SMALL_CONFIG, key_tables, lake_rows

from lakecurate import Lake
from lakecurate.errors import LakeError
from lakecurate.store.index import MembershipIndex
from lakecurate.store.state import StateStore


def _hex(i: int) -> str:
    return f"{i:032x}"


def test_tier2_sees_only_the_keys_tier1_cannot_rule_out(tmp_path: Path) -> None:
    state = StateStore.open(tmp_path / "state.duckdb")
    index = MembershipIndex(state.con)
    index.open_tier1(tmp_path / "index")  # empty lake: empty filters, no warning
    known = pa.table(
        {
            "content_hash": [_hex(i) for i in range(20_000)],
            "id": [f"d{i}" for i in range(20_000)],
            "chunk_key": ["c"] * 20_000,
        }
    )
    with state.transaction():
        index.add(known, known.select(["id", "chunk_key"]), seq=1)
    # 20,000 keys never added: tier 1 answers almost all of them alone
    fresh = pa.array([_hex(i) for i in range(10**6, 10**6 + 20_000)])
    before = index.stats.tier2_queries
    assert index.content_seen(fresh).num_rows == 0
    maybe = index.stats.maybe
    assert maybe < 20_000 * 0.01  # p = 0.001, with room for chance
    assert index.stats.tier2_queries - before == (1 if maybe else 0)
    # keys that are all present: every one is a maybe, answered in one batched join
    before_q, before_m = index.stats.tier2_queries, index.stats.maybe
    found = index.content_seen(pa.array([_hex(i) for i in range(0, 20_000, 7)]))
    assert found.num_rows == len(range(0, 20_000, 7))
    assert index.stats.tier2_queries - before_q == 1
    assert index.stats.maybe - before_m == found.num_rows
    ids = index.ids_seen(pa.array(["d5", "d19999", "nope"]))
    assert sorted(ids["id"].to_pylist()) == ["d19999", "d5"]
    index.save_tier1(tmp_path / "index")
    state.close()

    # reopened: loaded from the files (nothing to top up), the same answers
    state = StateStore.open(tmp_path / "state.duckdb")
    again = MembershipIndex(state.con)
    assert again.open_tier1(tmp_path / "index") == []
    assert again.content_seen(pa.array([_hex(3)])).num_rows == 1
    halves = np.array([[1, 2]], dtype=np.uint64)
    assert again.tier1["content"].contains_hashes(halves).tolist() == [False]
    state.close()


@pytest.fixture(scope="module")
def two_step(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Lake]:
    """Made once for the module, never written afterwards: a copy of the corpus, a lake of its
    first two files, and the lake a clean two-step ingest (those files, then all of the copy)
    gives."""
    folder = tmp_path_factory.mktemp("index")
    config = folder / "lakecurate.toml"
    config.write_text(SMALL_CONFIG, encoding="utf-8")
    data = folder / "data"
    shutil.copytree(corpus, data)
    first = sorted(data.iterdir())[:2]
    assert Lake.open(folder / "first").ingest(first, config=config).ok
    twin = Lake.open(folder / "twin")
    assert twin.ingest(first, config=config).ok
    assert twin.ingest([data]).ok
    return data, folder / "first", twin


def _first_part(two_step: tuple[Path, Path, Lake], tmp_path: Path) -> tuple[Lake, Path, Lake]:
    """A lake of the corpus's first two files (a copy of the module's, the test's own); returns
    it, the whole corpus and the clean two-step twin to compare with."""
    data, first, twin = two_step
    return Lake.open(shutil.copytree(first, tmp_path / "lake")), data, twin


@pytest.mark.parametrize(  # the default run keeps "flip"; `-m slow` runs the other damages
    "damage",
    [
        pytest.param("truncate", marks=pytest.mark.slow),
        "flip",
        pytest.param("foreign", marks=pytest.mark.slow),
        pytest.param("delete", marks=pytest.mark.slow),
    ],
)
def test_a_damaged_index_file_is_rebuilt_and_results_stay_exact(
    damage: str, two_step: tuple[Path, Path, Lake], tmp_path: Path
) -> None:
    lake, data, twin = _first_part(two_step, tmp_path)
    lake_dir = lake.root
    bloom_file = lake_dir / "index" / "content.bloom"
    assert bloom_file.exists()
    raw = bytearray(bloom_file.read_bytes())
    if damage == "truncate":
        bloom_file.write_bytes(bytes(raw[: len(raw) // 2]))
    elif damage == "flip":
        raw[len(raw) - 10] ^= 0x40
        bloom_file.write_bytes(bytes(raw))
    elif damage == "foreign":
        bloom_file.write_bytes(json.dumps({"not": "a bloom file"}).encode() * 50)
    else:
        bloom_file.unlink()
    report = lake.ingest([data])
    assert report.ok
    warnings = [n for n in report.notes if "content.bloom" in n]
    assert len(warnings) == 1 and "rebuilt from state.duckdb" in warnings[0]
    # exactly the lake a clean two-step ingest gives
    assert lake_rows(lake_dir) == lake_rows(twin.root)
    # and the rebuilt file is good again: the next run loads it without a word
    assert not [n for n in lake.ingest([data]).notes if "bloom" in n]


def test_keys_computed_in_numpy_equal_the_sql_definition() -> None:
    """Tier 1 keys are computed in numpy; tier 2 stores keys computed in SQL. They must agree."""
    from lakecurate import engine

    con = engine.connect()
    ids = ["hello", "d5", "é", "", "x" * 500]
    hexes = ["5d41402abc4b2a76b9719d911017c592", "0" * 32, "f" * 32]
    for statement, column, values in (
        ("index.id_keys", "id", ids),
        ("index.content_keys", "content_hash", hexes),
    ):
        con.register("candidates", pa.table({column: values}))
        sql = con.sql(engine.q(statement)).fetchall()
        mine = MembershipIndex._keys(statement, column, pa.array(values))
        assert [tuple(r.values()) for r in mine.to_pylist()] == sql


def test_index_writes_store_the_keys_sql_computes(tmp_path: Path) -> None:
    """`add` writes key files with keys from numpy; they must equal what the SQL definitions
    (and so `rebuild`) store, and roll back with the caller's transaction."""
    state = StateStore.open(tmp_path / "state.duckdb")
    index = MembershipIndex(state.con)
    hexes = ["5d41402abc4b2a76b9719d911017c592", "0" * 32, "f" * 32, "0123456789ABCDEF" * 2]
    ids = ["hello", "é", "", "x" * 500]
    kept = pa.table({"content_hash": hexes, "id": ids})
    given = pa.table({"id": [*ids, "hello"]})  # an id twice: one row
    with state.transaction():
        index.add(kept, given, seq=3)
    con = state.con
    key_tables(con)
    assert con.execute(
        "SELECT count(*) FROM content_hashes h JOIN (SELECT unnest($h) AS x, "
        "unnest($i) AS i) v ON h.hash = ('0x' || v.x)::UHUGEINT AND h.doc_id = v.i "
        "WHERE h.seq = 3",
        {"h": hexes, "i": ids},
    ).fetchall() == [(4,)]
    assert con.execute("SELECT count(*), count(DISTINCT hash) FROM doc_ids").fetchall() == [(4, 4)]
    assert con.execute(
        "SELECT count(*) FROM doc_ids h JOIN (SELECT unnest($i) AS i) v "
        "ON h.hash = md5_number(v.i) WHERE h.seq = 3",
        {"i": ids},
    ).fetchall() == [(4,)]
    assert sorted(index.ids_seen(pa.array(ids))["id"].to_pylist()) == sorted(ids)
    assert index.content_seen(pa.array([hexes[3]])).to_pylist() == [
        {"content_hash": hexes[3], "doc_id": ids[3]}
    ]
    # a rolled-back chunk leaves no tier-2 rows behind, and the next write still works
    with pytest.raises(RuntimeError), state.transaction():
        index.add(
            pa.table({"content_hash": ["1" * 32], "id": ["r"]}),
            pa.table({"id": ["r"]}),
            seq=4,
        )
        raise RuntimeError("crash before SUCCESS")
    key_tables(con)
    assert con.execute("SELECT count(*) FROM content_hashes WHERE seq = 4").fetchall() == [(0,)]
    with state.transaction():
        index.add(
            pa.table({"content_hash": ["2" * 32], "id": ["s"]}),
            pa.table({"id": ["s"]}),
            seq=5,
        )
    key_tables(con)
    assert con.execute("SELECT count(*) FROM content_hashes").fetchall() == [(5,)]
    assert con.execute("SELECT count(*) FROM doc_ids").fetchall() == [(5,)]
    # a chunk's rows leave by its commit seq, and only they
    with state.transaction():
        index.remove_commits([3])
    key_tables(con)
    assert con.execute("SELECT seq FROM content_hashes").fetchall() == [(5,)]
    assert con.execute("SELECT seq FROM doc_ids").fetchall() == [(5,)]
    # the rolled-back chunk's and the forgotten commit's files are leftovers, swept
    assert index.files.sweep() == 4  # two spaces each
    assert len(list(index.files.folder.iterdir())) == 2
    state.close()


def test_a_state_of_the_layout_before_loses_the_chunk_key_columns_and_no_row(
    tmp_path: Path,
) -> None:
    """Migrations 004 and 005: the index rows of a state made when they carried their chunk's
    key, in DuckDB tables, keep their keys and seqs in key files, and leave by seq afterwards."""
    from lakecurate import engine
    from lakecurate.store.state import SCHEMA_VERSION_KEY

    path = tmp_path / "state.duckdb"
    con = engine.connect(path)
    for number, text in engine.migrations():
        if number <= 3:
            con.execute(text)
    con.execute("INSERT INTO lake_meta VALUES (?, '3')", [SCHEMA_VERSION_KEY])
    con.execute("INSERT INTO content_hashes VALUES (1, 'a', 'k1', 1), (2, 'b', 'k2', 2)")
    con.execute("INSERT INTO doc_ids VALUES (1, 'k1', 1), (2, 'k2', 2)")
    con.close()
    state = StateStore.open(path)
    assert state.con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'content_hashes'"
    ).fetchall() == [(0,)]
    key_tables(state.con)
    assert state.con.execute("SELECT * FROM content_hashes ORDER BY seq").fetchall() == [
        (1, "a", 1),
        (2, "b", 2),
    ]
    assert [c[0] for c in state.con.execute("DESCRIBE content_hashes").fetchall()] == [
        "hash",
        "doc_id",
        "seq",
    ]
    assert [c[0] for c in state.con.execute("DESCRIBE doc_ids").fetchall()] == ["hash", "seq"]
    with state.transaction():
        MembershipIndex(state.con).remove_commits([1])
    key_tables(state.con)
    assert state.con.execute("SELECT * FROM content_hashes").fetchall() == [(2, "b", 2)]
    assert state.con.execute("SELECT * FROM doc_ids").fetchall() == [(2, 2)]
    state.close()


def test_bulk_and_row_writes_store_the_same_rows(tmp_path: Path) -> None:
    """A chunk of BULK_ROWS ids or more is keyed by SQL over Arrow, a smaller one by numpy:
    the same rows either way (repeated ids one row), and tier 1 given the same keys."""
    from lakecurate.store import index as index_module

    rng = random.Random(5)
    n = index_module.BULK_ROWS + 10
    ids = [f"doc-{rng.randrange(n)}-é" for _ in range(n)]  # some ids repeat
    hexes = [f"{rng.getrandbits(128):032x}" for _ in range(n)]
    kept = pa.table({"content_hash": hexes, "id": ids})
    given = pa.table({"id": ids})
    stored = []
    for bulk, folder in ((n, "bulk"), (n + 1, "rows")):
        (tmp_path / folder).mkdir()
        state = StateStore.open(tmp_path / folder / "state.duckdb")
        index = MembershipIndex(state.con)
        index.open_tier1(tmp_path / folder)
        index_module.BULK_ROWS, saved = bulk, index_module.BULK_ROWS
        try:
            with state.transaction():
                index.add(kept, given, seq=3)
        finally:
            index_module.BULK_ROWS = saved
        key_tables(state.con)
        stored.append(
            (
                state.con.execute("SELECT * FROM content_hashes ORDER BY ALL").fetchall(),
                state.con.execute("SELECT * FROM doc_ids ORDER BY ALL").fetchall(),
                index.ids_seen(pa.array(sorted(set(ids)))).num_rows,
                index.stats.tier2_queries,
            )
        )
        state.close()
    assert stored[0] == stored[1]
    assert len(stored[0][1]) == len(set(ids)) < n  # a repeated id is one row
    assert stored[0][2] == len(set(ids))


def test_a_batch_of_chunks_writes_one_key_file_per_space(tmp_path: Path) -> None:
    """Inside `batch` every chunk's keys go into one file per space, each under its own seq
    (forgotten one by one later); a batch that fails writes no file at all."""
    state = StateStore.open(tmp_path / "state.duckdb")
    index = MembershipIndex(state.con)

    def chunk(n: int) -> tuple[pa.Table, pa.Table]:
        kept = pa.table(
            {"content_hash": [_hex(n * 10 + i) for i in range(3)], "id": [f"{n}-0"] * 3}
        )
        return kept, pa.table({"id": [f"{n}-{i}" for i in range(4)]})

    with state.transaction(), index.batch():
        for seq in (1, 2, 3):
            index.add(*chunk(seq), seq=seq)
    names = sorted(p.name.split("-")[0] for p in index.files.folder.iterdir())
    assert names == ["content", "ids"]
    assert index.content_seen(pa.array([_hex(21)]))["doc_id"].to_pylist() == ["2-0"]
    with state.transaction():
        index.remove_commits([2])
    assert index.content_seen(pa.array([_hex(21), _hex(31)]))["doc_id"].to_pylist() == ["3-0"]
    assert sorted(index.ids_seen(pa.array(["1-3", "2-3", "3-3"]))["id"].to_pylist()) == [
        "1-3",
        "3-3",
    ]
    with pytest.raises(RuntimeError), state.transaction(), index.batch():
        index.add(*chunk(4), seq=4)
        raise RuntimeError("the batch's transaction fails")
    assert len(list(index.files.folder.iterdir())) == 2
    assert index.content_seen(pa.array([_hex(41)])).num_rows == 0
    with state.transaction():
        index.add(*chunk(5), seq=5)  # nothing of the failed batch comes with the next add
    assert index.files.fingerprint("content") == (9, 5)  # seqs 1, 3 and 5
    state.close()


def test_a_lost_key_file_is_written_again_from_the_table(
    two_step: tuple[Path, Path, Lake], tmp_path: Path
) -> None:
    """Tier 2's key files are derived from the table: the index folder deleted, the next
    run writes the index again (and says so), and the lake ends as a clean one."""
    lake, data, twin = _first_part(two_step, tmp_path)
    lake_dir = lake.root
    shutil.rmtree(lake_dir / "index")
    report = lake.ingest([data])
    assert report.ok
    assert any("wrote the index again from the table" in n for n in report.notes), report.notes
    assert lake.verify().ok
    assert lake_rows(lake_dir) == lake_rows(twin.root)
    assert (
        lake.sql("SELECT count(*) FROM content_hashes").rows
        == twin.sql("SELECT count(*) FROM content_hashes").rows
    )


def test_a_torn_key_file_is_named_and_written_again_by_repair(
    two_step: tuple[Path, Path, Lake], tmp_path: Path
) -> None:
    """A key file cut short stops the run that reads it with the file named and the way out;
    `verify` reports it and `verify --repair` writes the index again from the table."""
    lake, data, twin = _first_part(two_step, tmp_path)
    lake_dir = lake.root
    victim = sorted((lake_dir / "index" / "keys").glob("content-*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    (lake_dir / "index" / "content.bloom").unlink()  # rebuilt from the key files on open
    with pytest.raises(LakeError, match=r"verify --repair") as caught:
        lake.ingest([data])
    assert victim.name in str(caught.value)
    report = lake.verify()
    assert not report.ok and any(victim.name in p for p in report.problems), report.problems
    assert lake.verify(repair=True).ok
    assert lake.verify().ok
    assert lake.ingest([data]).ok
    assert lake_rows(lake_dir) == lake_rows(twin.root)


def test_ids_keyed_for_a_lookup_are_reused_right_for_the_index_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk's given ids are keyed once for its lookups and reused for its index rows (in
    another order, repeated, a subset): the stored keys are still md5_number of each id."""
    from lakecurate.store import index as index_module

    monkeypatch.setattr(index_module, "BULK_ROWS", 2)
    state = StateStore.open(tmp_path / "state.duckdb")
    index = MembershipIndex(state.con)
    ids = [f"doc-{i}-é" for i in range(50)]
    assert index.ids_seen(pa.array(ids)).num_rows == 0
    given = [ids[i] for i in (7, 3, 3, 41, 0, 19)]
    with state.transaction():
        index.add(pa.table({"content_hash": [], "id": []}), pa.table({"id": given}), seq=1)
    key_tables(state.con)
    assert state.con.execute(
        "SELECT count(*) FROM doc_ids h JOIN (SELECT DISTINCT unnest($i) AS i) v "
        "ON h.hash = md5_number(v.i)",
        {"i": given},
    ).fetchall() == [(5,)]
    assert state.con.execute("SELECT count(*) FROM doc_ids").fetchall() == [(5,)]
    state.close()


def test_content_keys_decoded_in_numpy_equal_bytes_fromhex() -> None:
    """The driver decodes content hashes from the Arrow column's bytes: the same keys as
    ``bytes.fromhex`` for slices, chunked and large strings and either case, and an error
    (never a wrong key) for anything that is not 32 hex digits."""
    from lakecurate.store.index import content_halves

    rng = np.random.default_rng(3)
    hexes = [rng.bytes(16).hex() for _ in range(50)] + ["0123456789ABCDEF" * 2]

    def expected(values: list[str]) -> list[list[int]]:
        raw = np.frombuffer(bytes.fromhex("".join(values)), dtype=">u8").reshape(-1, 2)
        return raw.astype(np.uint64).tolist()

    arr = pa.array(hexes, pa.string())
    assert content_halves(arr).tolist() == expected(hexes)
    assert content_halves(arr.slice(7, 20)).tolist() == expected(hexes[7:27])
    chunked = pa.chunked_array([arr.slice(0, 5), arr.slice(5)])
    assert content_halves(chunked).tolist() == expected(hexes)
    assert content_halves(arr.cast(pa.large_string())).tolist() == expected(hexes)
    assert content_halves(arr.slice(3, 0)).shape == (0, 2)
    for bad in (["0" * 31], ["g" * 32], ["0" * 32, None]):
        with pytest.raises(ValueError, match="content hash"):
            content_halves(pa.array(bad, pa.string()))
