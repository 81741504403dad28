"""Workers that die or hang (issue 7): the OOM killer taking one worker (SIGKILL of that process
only) and a frozen worker (SIGSTOP: no heartbeat) must not take the driver down; the chunk is
retried, goes DEAD after its attempts with the reason on record, and the bystanders that shared
the broken pool are not charged an attempt."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import SMALL_CONFIG, assert_lake_consistent, lake_rows, run_lakecurate

from lakecurate import Lake

VICTIM = "web_a_00002"


def _cfg(tmp_path: Path, attempts: int = 3, extra: str = "") -> Path:
    path = tmp_path / "lakecurate.toml"
    path.write_text(SMALL_CONFIG.replace("max_attempts = 3", f"max_attempts = {attempts}\n{extra}"))
    return path


def _victim(lake: Path) -> str:
    (key,) = (
        Lake.open(lake)
        .sql("SELECT chunk_key FROM chunks WHERE contains(chunk_key, $v)", params={"v": VICTIM})
        .rows[0]
    )
    return str(key)


def _ingest(
    corpus: Path, lake: Path, cfg: Path, fault: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    args = ("ingest", corpus, "--lake", lake, "--config", cfg, "--workers", "2")
    return run_lakecurate(
        *args, env={"LAKECURATE_FAULT": fault} if fault else None, timeout=timeout
    )


def _retry_and_finish(corpus: Path, lake: Path, cfg: Path, small_reference: list) -> None:  # type: ignore[type-arg]
    assert Lake.open(lake).retry() == [_victim(lake)]
    again = _ingest(corpus, lake, cfg)
    assert again.returncode == 0, again.stdout + again.stderr
    assert_lake_consistent(lake, None)
    # Every input line once, and the same content kept. Which copy of a duplicate is kept may
    # differ: the victim committed last, so "first seen" is another chunk's copy.
    rows = lake_rows(lake)
    assert sorted(r[:2] for r in rows) == sorted(r[:2] for r in small_reference)
    assert sorted(r[3] for r in rows if r[4]) == sorted(r[3] for r in small_reference if r[4])


def _events(lake: Path) -> list[tuple[str, str]]:
    return [
        tuple(r)
        for r in Lake.open(lake)
        .sql(  # type: ignore[misc]
            "SELECT to_status, message FROM chunk_events WHERE chunk_key = $k ORDER BY event_id",
            params={"k": _victim(lake)},
        )
        .rows
    ]


def test_oom_killed_worker_is_retried_and_the_driver_survives(
    corpus: Path, tmp_path: Path, small_reference: list
) -> None:  # type: ignore[type-arg]
    lake, cfg = tmp_path / "lake", _cfg(tmp_path)
    done = _ingest(corpus, lake, cfg, f"worker:oom:{VICTIM}")
    # The driver finished the run: every other chunk committed, the victim DEAD with the cause.
    assert done.returncode == 2, done.stdout + done.stderr
    victim = _victim(lake)
    assert f"DEAD: {victim}" in done.stdout and "signal 9" in done.stdout, done.stdout
    lk = Lake.open(lake)
    statuses = dict(lk.sql("SELECT chunk_key, status FROM chunks").rows)
    assert statuses.pop(victim) == "DEAD"
    assert set(statuses.values()) == {"SUCCESS"}
    assert [s for s, _ in _events(lake) if s in ("FAILED", "DEAD")] == ["FAILED", "FAILED", "DEAD"]
    # Only the victim was blamed: no bystander has a FAILED event.
    failed = lk.sql(
        "SELECT DISTINCT chunk_key FROM chunk_events WHERE to_status IN ('FAILED', 'DEAD')"
    ).rows
    assert failed == [(victim,)]
    _retry_and_finish(corpus, lake, cfg, small_reference)


def test_hung_worker_is_killed_on_heartbeat_timeout(
    corpus: Path, tmp_path: Path, small_reference: list
) -> None:  # type: ignore[type-arg]
    lake = tmp_path / "lake"
    # The least heartbeat_timeout the config takes (workers beat every second; a healthy task
    # here takes well under a second): each attempt hangs only this long before its kill.
    cfg = _cfg(tmp_path, attempts=2, extra="heartbeat_timeout = 2")
    done = _ingest(corpus, lake, cfg, f"worker:hang:{VICTIM}", timeout=240)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no heartbeat" in done.stdout, done.stdout
    events = _events(lake)
    assert [s for s, _ in events if s in ("FAILED", "DEAD")] == ["FAILED", "DEAD"]
    assert all("heartbeat_timeout = 2 s" in m for s, m in events if s in ("FAILED", "DEAD"))
    assert Lake.open(lake).sql("SELECT count(*) FROM chunks WHERE status <> 'SUCCESS'").rows == [
        (1,)
    ]
    _retry_and_finish(corpus, lake, cfg, small_reference)


def test_chunk_timeout_kills_a_worker_that_still_beats(corpus: Path, tmp_path: Path) -> None:
    """A stalled worker keeps beating: only the chunk's time limit catches it."""
    lake = tmp_path / "lake"
    cfg = _cfg(tmp_path, attempts=1, extra="chunk_timeout = 2.5")
    done = _ingest(corpus, lake, cfg, f"worker:stall:{VICTIM}")
    assert done.returncode == 2, done.stdout + done.stderr
    (message,) = (
        Lake.open(lake)
        .sql("SELECT last_error FROM chunks WHERE chunk_key = $k", params={"k": _victim(lake)})
        .rows[0]
    )
    assert "chunk_timeout = 2.5 s" in message


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("heartbeat_timeout = 1", "[ingest].heartbeat_timeout = 1.0: must be seconds >= 2"),
        ("heartbeat_timeout = nan", "[ingest].heartbeat_timeout = nan: must be seconds >= 0"),
        ("chunk_timeout = -1", "[ingest].chunk_timeout = -1: must be seconds >= 0"),
        ('chunk_timeout = "1h"', "[ingest].chunk_timeout = '1h': must be seconds >= 0"),
    ],
)
def test_timeouts_are_validated(text: str, error: str) -> None:
    import tomllib

    from lakecurate.config import from_dict
    from lakecurate.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        from_dict(tomllib.loads(f"[ingest]\n{text}\n"))
    assert str(exc.value) == error


def test_workers_that_die_as_they_start_stop_the_run_with_one_line(
    corpus: Path, small_cfg: Path, tmp_path: Path
) -> None:
    """A worker that cannot start (here: its initializer raises; in life, an unguarded
    script re-run by spawn) breaks every pool before any chunk begins: the run stops after a
    few pools with one line saying so, instead of starting pools forever."""
    done = _ingest(corpus, tmp_path / "lake", small_cfg, "worker_start:raise", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "die as they start" in errors[0], done.stderr
    assert "__main__" in errors[0]


def _pool_children(pid: int) -> list[int]:
    """The worker processes (multiprocessing's spawned children) of process ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its exit status waits for a reaper


def test_workers_end_when_their_driver_is_ended_alone(corpus: Path, tmp_path: Path) -> None:
    """SIGTERM the driver alone, not its process group, while its workers run: they notice
    within a beat and end, instead of waiting forever to hand back a result nobody takes."""
    import time

    from helpers import start_lakecurate

    args = ("ingest", corpus, "--lake", tmp_path / "lake", "--config", _cfg(tmp_path))
    proc = start_lakecurate(*args, "--workers", "2", env={"LAKECURATE_FAULT": "worker:sleep"})
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = _pool_children(proc.pid)
            time.sleep(0.1)
        assert workers, proc.communicate()
        proc.terminate()
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 15
        while any(_running(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _running(w)]
    finally:
        if proc.poll() is None:
            proc.kill()
