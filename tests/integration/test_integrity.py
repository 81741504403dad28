"""Damage that `verify` must name correctly and `verify --repair` must handle safely (issue 12:
D7, D13, D14, D21), on real lakes, with real processes holding files and the real CLI.

* a state file another process holds is busy, never corrupt: nothing is moved or rebuilt;
* ``verify --deep`` reads every page, and names the chunks in a damaged file and what to do;
* a damaged checkpoint or a torn last commit file is set aside into ``LAKE/quarantine/``;
  any other command fails with one ``error:`` line, never a Rust backtrace;
* missing data files are "missing", not "removed by vacuum", and a repair after a lost last
  commit ends in a lake that ``verify`` accepts.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import cli_env, lake_rows, start_lakecurate

from lakecurate import Lake
from lakecurate.lake.record import CommitRecord

Run = Callable[..., subprocess.CompletedProcess[str]]
LOG = Path("documents") / "_delta_log"
# delta-rs appends a Rust backtrace to its messages when this is set: the user must not see it.
BACKTRACE = {"RUST_BACKTRACE": "1"}


@pytest.fixture(scope="module")
def base(corpus: Path, small_cfg: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("integrity")
    cfg = root / "groups.toml"  # Delta commits of three chunks: a log of several commits
    cfg.write_text(small_cfg.read_text().replace("[ingest]\n", "[ingest]\ncommit_chunks = 3\n"))
    lake = root / "lake"
    assert Lake.open(lake).ingest([corpus], config=cfg, workers=2).ok
    return lake


@pytest.fixture
def lake(base: Path, tmp_path: Path) -> Path:
    """A fresh copy of the module's lake, to damage."""
    return Path(shutil.copytree(base, tmp_path / "lake"))


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single ``error:`` line of a failed command (no traceback, no backtrace)."""
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def problems(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in done.stdout.splitlines() if ln.startswith("problem:")]


# -- D7: busy is not corrupt ------------------------------------------------------------------

HOLD = (
    "import sys, time, duckdb\n"
    "con = duckdb.connect(sys.argv[1], read_only=True)\n"
    "print('holding', flush=True)\n"
    "time.sleep(120)\n"
)


def test_state_held_by_a_reader_is_busy_and_left_alone(lake: Path, run_cli: Run) -> None:
    state = lake / "state.duckdb"
    before = state.read_bytes()
    runs = Lake.open(lake).sql("SELECT count(*) FROM runs").rows
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(state)], stdout=subprocess.PIPE, text=True, env=cli_env()
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        done = run_cli("verify", "--repair", "--lake", lake)
    finally:
        holder.kill()
        holder.communicate()
    line = one_error_line(done)
    assert f"busy: another process holds it (pid {holder.pid}," in line, line
    assert "unreadable" not in line and "corrupt" not in line
    assert not list(lake.glob("state.duckdb.corrupt-*"))
    assert state.read_bytes() == before
    assert Lake.open(lake).sql("SELECT count(*) FROM runs").rows == runs
    assert Lake.open(lake).verify().problems == []


@pytest.mark.slow  # 20 s of a deliberately slowed ingest; the other repairs stay
def test_repair_during_an_ingest_whose_lock_file_was_deleted(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    run_cli: Run,
) -> None:
    """The lake lock cannot stop verify here (its file is gone), DuckDB's own lock does: the
    state is busy, verify moves nothing, and the ingest finishes as if nothing happened."""
    lake = tmp_path / "lake"
    slow = {"LAKECURATE_FAULT": "worker:sleep,after_delta_commit:sleep"}
    args = ("ingest", corpus, "--lake", lake, "--config", small_cfg, "--workers", "2")
    ingest = start_lakecurate(*args, env=slow)
    try:
        deadline = time.monotonic() + 120
        while not (lake / LOG).is_dir():  # a first commit: the state is open for writing
            assert ingest.poll() is None and time.monotonic() < deadline, ingest.stderr
            time.sleep(0.1)
        (lake / "lock").unlink()
        done = run_cli("verify", "--repair", "--lake", lake)
        out, err = ingest.communicate(timeout=300)
    finally:
        if ingest.poll() is None:
            ingest.kill()
            ingest.communicate()
    assert ingest.returncode == 0, out + err
    line = one_error_line(done)
    assert f"busy: another process holds it (pid {ingest.pid}," in line, line
    assert not list(lake.glob("state.duckdb.corrupt-*"))
    assert Lake.open(lake).verify().problems == []
    assert lake_rows(lake) == small_reference
    assert Lake.open(lake).sql("SELECT outcome FROM runs").rows == [("OK",)]


# -- D13: verify --deep reads every page ------------------------------------------------------


def _largest_data_file(lake: Path) -> Path:
    return max((lake / "documents").glob("kept=true/*.parquet"), key=lambda p: p.stat().st_size)


def _break_a_page(path: Path) -> None:
    """Flip the first byte (from the start: the pages, not the footer) that makes reading the
    whole file fail; the footer still reads, so a footer-only check misses it."""
    data = path.read_bytes()
    for pos in range(4, len(data) - 8):
        broken = bytearray(data)
        broken[pos] ^= 0xFF
        try:
            pq.read_table(io.BytesIO(bytes(broken))).validate(full=True)
        except (OSError, ValueError):
            path.write_bytes(bytes(broken))
            pq.read_metadata(path)
            return
    raise AssertionError(f"no single byte breaks {path}")


def _change_a_text(path: Path) -> None:
    """Flip one bit that still decodes, changing only the text column: silent damage."""
    data = path.read_bytes()
    good = pq.read_table(path)
    for pos in range(4, len(data) - 8):
        changed = bytearray(data)
        changed[pos] ^= 0x01
        try:
            table = pq.read_table(io.BytesIO(bytes(changed)))
            table.validate(full=True)
        except (OSError, ValueError):
            continue
        differ = [c for c in good.column_names if not table[c].equals(good[c])]
        if differ == ["text"]:
            path.write_bytes(bytes(changed))
            return
    raise AssertionError(f"no single bit changes only the text of {path}")


def test_deep_verify_names_a_damaged_page_its_chunks_and_what_to_do(
    lake: Path, run_cli: Run
) -> None:
    victim = _largest_data_file(lake)
    keys = sorted(set(pq.read_table(victim, columns=["chunk_key"])["chunk_key"].to_pylist()))
    rows, intact = lake_rows(lake), victim.read_bytes()
    _break_a_page(victim)
    deep = run_cli("verify", "--deep", "--lake", lake, env=BACKTRACE)
    assert deep.returncode == 2 and "Traceback" not in deep.stdout + deep.stderr
    (bad,) = problems(deep)
    assert "unreadable" in bad and str(victim) in bad, bad
    assert all(k in bad for k in keys) and "restore" in bad, bad
    assert "cannot fix" in deep.stdout
    repair = run_cli("verify", "--deep", "--repair", "--lake", lake, env=BACKTRACE)
    assert repair.returncode == 2 and problems(repair) == [bad]
    assert not list(lake.glob("state.duckdb.corrupt-*"))
    victim.write_bytes(intact)  # one way out the message names: an intact copy put back
    assert Lake.open(lake).verify(deep=True).problems == []
    assert lake_rows(lake) == rows


def test_export_of_a_damaged_page_is_one_line_naming_verify_deep(
    lake: Path, run_cli: Run, tmp_path: Path
) -> None:
    _break_a_page(_largest_data_file(lake))
    done = run_cli("export", "--lake", lake, tmp_path / "out", env=BACKTRACE)
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    assert "verify --deep" in done.stderr and len(done.stderr.strip().splitlines()) == 1, (
        done.stderr
    )


def test_deep_verify_finds_text_that_no_longer_matches_its_hash(lake: Path) -> None:
    victim = _largest_data_file(lake)
    _change_a_text(victim)
    assert Lake.open(lake).verify().problems == []  # footers and counts are all fine
    report = Lake.open(lake).verify(deep=True)
    (bad,) = report.problems
    assert "no longer matches its content_hash" in bad and str(victim) in bad, bad
    assert report.unrepairable and not report.fixable


# -- D14: a damaged log ---------------------------------------------------------------------


@pytest.mark.parametrize(  # the default run keeps "flipped"
    "damage", [pytest.param("truncated", marks=pytest.mark.slow), "flipped"]
)
def test_repair_sets_aside_a_damaged_checkpoint(damage: str, lake: Path, run_cli: Run) -> None:
    rows = lake_rows(lake)
    assert run_cli("checkpoint", "--lake", lake).returncode == 0
    (checkpoint,) = (lake / LOG).glob("*.checkpoint.parquet")
    data = bytearray(checkpoint.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    checkpoint.write_bytes(bytes(data))
    for command in (["status"], ["history"], ["sql", "SELECT count(*) FROM docs"]):
        line = one_error_line(run_cli(*command, "--lake", lake, env=BACKTRACE))
        assert "verify --repair" in line, line
    found = run_cli("verify", "--lake", lake, env=BACKTRACE)
    assert found.returncode == 2 and "damaged checkpoint" in found.stdout, found.stdout
    repaired = run_cli("verify", "--repair", "--lake", lake, env=BACKTRACE)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert not checkpoint.exists() and not (lake / LOG / "_last_checkpoint").exists()
    assert len(list((lake / "quarantine").iterdir())) == 2
    assert run_cli("verify", "--lake", lake).stdout.startswith("ok:")
    assert lake_rows(lake) == rows


def test_repair_sets_aside_a_torn_last_commit(lake: Path, corpus: Path, run_cli: Run) -> None:
    rows = lake_rows(lake)
    last = max((lake / LOG).glob("*.json"))
    held = len(
        CommitRecord.parse(json.loads(last.read_text().splitlines()[0])["commitInfo"]).chunks
    )
    last.write_bytes(last.read_bytes()[:300])  # cut inside its first line
    line = one_error_line(run_cli("status", "--lake", lake, env=BACKTRACE))
    assert "verify --repair" in line and "  0: " not in line, line
    repaired = run_cli("verify", "--repair", "--lake", lake, env=BACKTRACE)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "torn last commit file" in repaired.stdout
    assert not last.exists() and [
        p.name.split("-", 1)[1] for p in (lake / "quarantine").iterdir()
    ] == [last.name]
    assert Lake.open(lake).verify().problems == []
    assert Lake.open(lake).ingest([corpus]).chunks_committed == held  # its chunks, again
    assert lake_rows(lake) == rows
    assert Lake.open(lake).verify().problems == []


def test_a_damaged_commit_that_is_not_the_last_is_left_in_place(lake: Path, run_cli: Run) -> None:
    middle = sorted((lake / LOG).glob("*.json"))[1]
    before = middle.read_bytes()
    middle.write_bytes(before[:300])
    repaired = run_cli("verify", "--repair", "--lake", lake, env=BACKTRACE)
    assert repaired.returncode == 2 and "Traceback" not in repaired.stderr
    assert f"damaged commit file {middle.name}" in repaired.stdout
    assert "put back an intact copy" in repaired.stdout
    assert middle.read_bytes() == before[:300] and not (lake / "quarantine").exists()
    assert not list(lake.glob("state.duckdb.corrupt-*"))


# -- D21: messages that say what happened -------------------------------------------------


def test_a_missing_data_file_is_not_blamed_on_vacuum(lake: Path, run_cli: Run) -> None:
    victim = _largest_data_file(lake)
    keys = set(pq.read_table(victim, columns=["chunk_key"])["chunk_key"].to_pylist())
    victim.unlink()
    line = one_error_line(run_cli("sql", "SELECT count(*) FROM docs", "--lake", lake))
    assert "are missing" in line and "removed by vacuum" not in line, line
    found = run_cli("verify", "--lake", lake)
    (bad,) = problems(found)
    assert bad.startswith(f"problem: data file missing: {victim}"), bad
    assert all(k in bad for k in keys) and "vacuum" not in bad, bad


def test_repair_after_a_lost_last_commit_ends_in_a_lake_verify_accepts(
    lake: Path, corpus: Path
) -> None:
    rows = lake_rows(lake)
    max((lake / LOG).glob("*.json")).unlink()
    assert Lake.open(lake).verify().problems
    repaired = Lake.open(lake).verify(repair=True)
    assert repaired.ok and not repaired.unrepairable, repaired
    assert Lake.open(lake).verify().problems == []
    Lake.open(lake).ingest([corpus])
    assert lake_rows(lake) == rows and Lake.open(lake).verify().problems == []
    assert os.listdir(lake / "staging") == []
