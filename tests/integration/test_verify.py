"""`verify --repair` rebuilds a lost or corrupt state.duckdb from the Delta table alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import lake_rows

from lakecurate import Lake


@pytest.fixture
def built(small_lake: Path, tmp_path: Path) -> Path:
    """The corpus ingested with the small-chunk config: a copy of the session's ``small_lake``
    for each test to damage."""
    return Path(shutil.copytree(small_lake, tmp_path / "lake"))


def _state_summary(lake: Path) -> tuple:  # type: ignore[type-arg]
    lk = Lake.open(lake)
    return (
        lk.sql(
            "SELECT chunk_key, status, rows_in, rows_kept, rows_malformed, delta_version "
            "FROM chunks ORDER BY chunk_key"
        ).rows,
        lk.sql("SELECT count(*) FROM content_hashes").rows,
        lk.sql("SELECT count(*) FROM doc_ids").rows,
        lk.sql("SELECT chunk_key, step, docs_in, docs_dropped FROM filter_stats ORDER BY ALL").rows,
    )


def test_clean_lake_verifies(built: Path) -> None:
    report = Lake.open(built).verify()
    assert report.problems == [] and report.files_checked > 0


@pytest.mark.parametrize("damage", ["delete", "corrupt"])
def test_repair_rebuilds_state_and_next_ingest_skips_everything(
    damage: str, built: Path, corpus: Path
) -> None:
    before_rows = lake_rows(built)
    before_state = _state_summary(built)
    state = built / "state.duckdb"
    if damage == "delete":
        state.unlink()
    else:
        data = bytearray(state.read_bytes())
        data[0:4096] = b"\x5a" * 4096
        state.write_bytes(bytes(data))
    report = Lake.open(built).verify()
    assert report.problems and not report.repaired
    repaired = Lake.open(built).verify(repair=True)
    assert repaired.repaired and not repaired.unrepairable
    assert Lake.open(built).verify().problems == []
    assert _state_summary(built) == before_state
    again = Lake.open(built).ingest([corpus])
    assert again.outcome == "NOTHING_TO_DO" and again.chunks_committed == 0
    assert lake_rows(built) == before_rows
    if damage == "corrupt":
        assert list(built.glob("state.duckdb.corrupt-*"))


def test_verify_finds_a_missing_data_file(built: Path) -> None:
    victim = next((built / "documents").rglob("*.parquet"))
    shutil.move(str(victim), str(built / "moved.parquet"))
    report = Lake.open(built).verify(repair=True)
    assert any("data file missing" in p for p in report.problems)
    assert report.unrepairable and not report.ok


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("leftover", ["orphan data file", "stale staged file", "Bloom file"])
def test_leftovers_are_found_and_repaired(leftover: str, built: Path, corpus: Path) -> None:
    """What a killed run may leave: a data file no version names, the staged file of a chunk
    already committed, a damaged Bloom cache. Found, removed or rewritten, results unchanged."""
    before_rows = lake_rows(built)
    if leftover == "orphan data file":
        some = next((built / "documents").rglob("*.parquet"))
        target = some.with_name("part-00000-killed-write.zstd.parquet")
        shutil.copy(some, target)
        expect = "orphan data file"
    elif leftover == "stale staged file":
        key = Lake.open(built).sql("SELECT min(chunk_key) FROM chunks").rows[0][0]
        target = built / "staging" / f"{key}.0123456789abcdef.parquet"
        shutil.copy(next((built / "documents").rglob("*.parquet")), target)
        expect = "staged file of a committed chunk"
    else:
        target = built / "index" / "content.bloom"
        _flip_a_bit(target)
        expect = "Bloom cache"
    found = Lake.open(built).verify()
    assert [p for p in found.problems if expect in p], found.problems
    repaired = Lake.open(built).verify(repair=True)
    assert repaired.repaired and not repaired.unrepairable
    if leftover != "Bloom file":
        assert not target.exists()
    assert Lake.open(built).verify().problems == []
    assert lake_rows(built) == before_rows
    again = Lake.open(built).ingest([corpus])
    assert again.outcome == "NOTHING_TO_DO" and lake_rows(built) == before_rows
