"""`verify --repair` rebuilds a lost or corrupt state.duckdb from the Delta table alone."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import duckdb
import pytest
from helpers import lake_rows, run_lakecurate

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


def test_chunks_queued_to_be_decided_again_are_not_index_damage(tmp_path: Path) -> None:
    """A run killed right after a changed input's rows left the lake leaves the chunks that
    pointed at them queued to be decided again, out of the indexes until the next ingest:
    once the interrupted commit is finished, `verify` says so and finds nothing to repair
    (it counted their documents as missing index entries and sent the user to `verify
    --repair`: found by the model campaign, seed 27); the next ingest decides them."""
    data = tmp_path / "in"
    (data / "a").mkdir(parents=True)
    texts = [f"document {i} " + "plain words " * 20 for i in range(60)]
    (data / "a" / "data.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8"
    )
    (data / "b").mkdir()
    shutil.copy(data / "a" / "data.jsonl", data / "b" / "data.jsonl")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[ingest]\nchunk_size = "4KiB"\n[near_dedup]\nenabled = true\n')
    lake = tmp_path / "lake"
    first = run_lakecurate("ingest", data, "--lake", lake, "--config", cfg, "--workers", "1")
    assert first.returncode == 0, first.stderr
    # the folder whose copies were kept (chunk keys hash the path: either) changes, so the
    # other folder's exact duplicates point at documents that leave
    kept_a = (
        Lake.open(lake)
        .sql("SELECT count(*) FROM documents WHERE kept AND source_path LIKE '%/a/data.jsonl'")
        .rows[0][0]
    )
    keeper = data / ("a" if kept_a else "b") / "data.jsonl"
    keeper.write_text(
        "".join(json.dumps({"text": "other " + t}) + "\n" for t in texts), encoding="utf-8"
    )
    killed = run_lakecurate(
        "ingest",
        data,
        "--lake",
        lake,
        "--workers",
        "1",
        env={"LAKECURATE_FAULT": "after_delta_commit:kill:supersede"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    state = duckdb.connect(str(lake / "state.duckdb"), read_only=True)
    queued = state.execute("SELECT count(*) FROM redecide").fetchall()[0][0]
    state.close()
    # a writer finishes the interrupted commit (verify only reads): here a compact
    assert run_lakecurate("compact", "--lake", lake).returncode == 0
    checked = run_lakecurate("verify", "--lake", lake)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "queued to be decided again" in checked.stdout
    assert "problem" not in checked.stdout
    done = run_lakecurate("ingest", data, "--lake", lake, "--workers", "1")
    assert done.returncode == 0, done.stderr
    after = run_lakecurate("verify", "--lake", lake)
    assert after.returncode == 0 and "queued" not in after.stdout, after.stdout
    assert queued >= 1
