"""The write session and the one recovery path: every writing command finishes an interrupted
commit the same way, near-dedup bands included, and `verify` holds the band index to the table."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from helpers import NEAR_CONFIG, PROSE, run_lakecurate

from lakecurate import Lake
from lakecurate.config import load
from lakecurate.lake.paths import LakePaths
from lakecurate.store.band_shards import Shards
from lakecurate.store.session import write_session


def _corpus(folder: Path, files: int = 3) -> Path:
    folder.mkdir(parents=True)
    for f in range(files):
        lines = [
            json.dumps({"id": f"f{f}-{i}", "text": f"{PROSE[(f + i) % 6]} Note {f} {i}."})
            for i in range(12)
        ]
        (folder / f"part{f}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "near.toml"
    cfg.write_text(NEAR_CONFIG)
    return cfg


def _bands(lake: Path) -> list[tuple[object, ...]]:
    """Every band-index document (seq, id, cluster), read straight from the state file."""
    con = duckdb.connect(str(lake / "state.duckdb"), read_only=True)
    try:
        return con.execute(
            "SELECT doc_seq >> 32, doc_id, cluster_id FROM minhash_docs ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()


def _unindexed(lake: Path) -> list[str]:
    con = duckdb.connect(str(lake / "state.duckdb"), read_only=True)
    try:
        return [
            k
            for (k,) in con.execute(
                "SELECT chunk_key FROM chunks WHERE status = 'SUCCESS' AND commit_seq NOT IN "
                "(SELECT DISTINCT doc_seq >> 32 FROM minhash_docs)"
            ).fetchall()
        ]
    finally:
        con.close()


def _edit_state(lake: Path, sql: str) -> None:
    con = duckdb.connect(str(lake / "state.duckdb"))
    try:
        con.execute(sql)
    finally:
        con.close()


def test_compact_after_a_crash_finalises_the_commit_with_its_bands(tmp_path: Path) -> None:
    data, cfg, lake = _corpus(tmp_path / "in"), _config(tmp_path), tmp_path / "lake"
    fault = {"LAKECURATE_FAULT": "after_delta_commit:kill:part1"}
    killed = run_lakecurate("ingest", data, "--lake", lake, "--config", cfg, env=fault)
    assert killed.returncode != 0
    Lake.open(lake).compact()  # finalises the commit of part1 (COMMITTING -> SUCCESS)
    assert _unindexed(lake) == []  # ...with its bands: before, only the next ingest added them
    problems = Lake.open(lake).verify().problems
    assert [p for p in problems if not p.startswith("Bloom cache")] == []  # (killed before saving)


def test_verify_finds_a_band_index_that_lacks_a_chunk_and_repair_rebuilds_it(
    tmp_path: Path,
) -> None:
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([_corpus(tmp_path / "in")], config=_config(tmp_path)).ok
    before = _bands(lake.root)
    assert before and lake.verify().ok
    (seq,) = {s for s, _, _ in before if s == max(x for x, _, _ in before)}
    _edit_state(lake.root, f"DELETE FROM minhash_docs WHERE doc_seq >> 32 = {seq}")
    report = lake.verify()
    assert [p for p in report.problems if "near-dedup band index" in p] == [
        f"chunk {_unindexed(lake.root)[0]} is missing from the near-dedup band index"
    ]
    repaired = lake.verify(repair=True)
    assert "rebuilt the near-dedup band index from the table" in repaired.repaired
    assert _bands(lake.root) == before
    assert lake.verify().ok


def test_verify_finds_band_rows_of_commits_that_left(tmp_path: Path) -> None:
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([_corpus(tmp_path / "in", files=1)], config=_config(tmp_path)).ok
    before = _bands(lake.root)
    ghost = "((999::BIGINT << 32) | 1, 'ghost', 7)"
    _edit_state(lake.root, f"INSERT INTO minhash_docs VALUES {ghost}")
    problems = lake.verify().problems
    assert "the near-dedup band index holds 1 document(s) of commits the lake no longer has" in (
        problems
    )
    assert lake.verify(repair=True).repaired
    assert _bands(lake.root) == before


def test_the_next_writer_removes_temp_files_a_killed_one_left_in_the_index(
    tmp_path: Path,
) -> None:
    """A kill while a signature, band or Bloom file was being written leaves its temp file
    (found by a model campaign: `verify` then reported it after every later ingest)."""
    lake_dir = tmp_path / "lake"
    corpus = _corpus(tmp_path / "in")
    lake = Lake.open(lake_dir)
    assert lake.ingest([corpus], config=_config(tmp_path)).ok
    index = lake_dir / "index"
    temps = [
        index / "signatures" / "451.arrow.tmp_18105_1796534814546301973",
        index / "bands" / "7.arrow.tmp_1_2",
        index / "content.bloom.tmp_3_4",
    ]
    for temp in temps:
        temp.write_bytes(b"cut off")
    problems = Lake.open(lake_dir).verify().problems
    assert sum("leftover temp file" in p for p in problems) == len(temps), problems
    assert Lake.open(lake_dir).ingest([corpus], config=_config(tmp_path)).ok
    assert not [t for t in temps if t.exists()]
    assert Lake.open(lake_dir).verify().ok


def test_a_sessions_deciders_hold_the_band_index_and_the_keys(tmp_path: Path) -> None:
    """``[ingest] deciders = 2``: one set of decider processes holds the band index's rows and
    both key caches' keys (an empty one included: a holder with no rows yet is still one)."""
    cfg = tmp_path / "deciders.toml"
    cfg.write_text(NEAR_CONFIG.replace("[ingest]\n", "[ingest]\ndeciders = 2\n"))
    with write_session(LakePaths(tmp_path / "lake"), "ingest", "", load(cfg), create=True) as s:
        assert isinstance(s.deciders, Shards)
        assert s.near is not None and s.near.cache.holder is s.deciders
        assert all(cache.holder is s.deciders for cache in s.index.tier2.values())


def test_more_deciders_than_the_machine_runs_well_start_fewer_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``deciders = 1000`` started a thousand processes and the kernel killed the driver: a
    session starts at most two per core and says so (where the index is held decides
    nothing); the lake is the one fewer deciders make."""
    import os

    from lakecurate.store import session as session_module

    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    cfg = tmp_path / "deciders.toml"
    cfg.write_text(NEAR_CONFIG.replace("[ingest]\n", "[ingest]\ndeciders = 1000\n"))
    with write_session(LakePaths(tmp_path / "lake"), "ingest", "", load(cfg), create=True) as s:
        assert isinstance(s.deciders, Shards)
        assert s.deciders.count == session_module.DECIDERS_PER_CORE
        assert any("deciders = 1000" in note and "1 core" in note for note in s.notes)
