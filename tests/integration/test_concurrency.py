"""While an ingest runs: a second writer is refused at once; status and sql keep answering from
a consistent snapshot, and never modify anything. Readers never block a writer, and while one
runs they read the Delta version its snapshot names."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, SMALL_CONFIG, cli_env, start_lakecurate

from lakecurate import Lake
from lakecurate.lake.lock import LakeLock
from lakecurate.lake.paths import SNAPSHOT_NAME
from lakecurate.read.export import verify as export_verify


def test_readers_and_a_second_writer_during_an_ingest(
    corpus: Path, config_file: Path, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    lake = tmp_path / "lake"
    # A commit per chunk, so the readers' snapshots move during the run (in one commit group,
    # all of them read 0 chunks committed and "only move forward" held trivially).
    config_file.write_text(SMALL_CONFIG.replace("[ingest]\n", "[ingest]\ncommit_chunks = 1\n"))
    args = ("ingest", corpus, "--lake", lake, "--config", config_file, "--workers", "2")
    # A second's sleep after the Delta commit of each of web_a's 6 chunks (of 12): the ingest
    # lasts long enough for several reader rounds.
    slow = "after_delta_commit:sleep:web_a"
    proc = start_lakecurate(*args, env={"LAKECURATE_FAULT": slow})
    try:
        deadline = time.monotonic() + 60
        while not (lake / "state.snapshot.duckdb").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        second = run_cli("ingest", corpus, "--lake", lake)
        assert second.returncode == 1
        assert "locked by pid" in second.stderr and "ingest" in second.stderr
        seen: list[int] = []
        answered_during = 0
        while proc.poll() is None and time.monotonic() < deadline:
            st = run_cli("status", "--lake", lake, "--format", "json")
            q = run_cli(
                "sql",
                "--lake",
                lake,
                "--format",
                "json",
                "SELECT count(*) AS n FROM chunks WHERE status = 'SUCCESS'",
            )
            if proc.poll() is None:
                assert st.returncode == 0, st.stderr
                assert q.returncode == 0, q.stderr
                answered_during += 1
                seen.append(json.loads(q.stdout.splitlines()[0])["n"])
            refused = run_cli("sql", "--lake", lake, "DELETE FROM chunks")
            assert refused.returncode == 1 and "read-only" in refused.stderr
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert answered_during >= 2
    assert seen == sorted(seen)  # snapshots only move forward
    total = Lake.open(lake).sql("SELECT count(*) FROM chunks WHERE status = 'SUCCESS'").rows
    assert seen[-1] <= total[0][0]
    assert not list(lake.glob("*.tmp_*"))


# --- readers never stand in a writer's way (D8), and read one consistent moment (D18) -------
_OPEN_READER = """
import sys, time
from pathlib import Path
from lakecurate.read import query
lake = Path(sys.argv[1])
con = query.open_reader(lake / "state.duckdb", lake / "documents")
print(con.execute("SELECT count(*) FROM docs").fetchone()[0],
      con.execute("SELECT count(*) FROM chunks").fetchone()[0], flush=True)
while not Path(sys.argv[2]).exists():  # the test says when the writers are done
    time.sleep(0.05)
print(con.execute("SELECT count(*) FROM docs").fetchone()[0],
      con.execute("SELECT count(*) FROM chunks").fetchone()[0], flush=True)
"""

_HOLD_WRITER = """
import sys, time
from pathlib import Path
from lakecurate.lake.lock import LakeLock
from lakecurate.store.state import StateStore
lake = Path(sys.argv[1])
lock = LakeLock.acquire(lake / "lock", "ingest")
state = StateStore.open(lake / "state.duckdb")
print("holding", flush=True)
time.sleep(120)
"""

_HOLD_READING = """
import sys, time
from pathlib import Path
from lakecurate.lake.lock import reading
with reading(Path(sys.argv[1])) as free:
    print("reading" if free else "refused", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _child(script: str, *args: object, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        env=cli_env(env),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        pytest.fail(f"child did not start: {proc.communicate(timeout=30)[1]}")
    return line


def _stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def _part(first_part: tuple[Path, Path], tmp_path: Path) -> Lake:
    """A lake of the corpus's books and forum files of its own (a copy of ``first_part``'s)."""
    return Lake.open(shutil.copytree(first_part[1], tmp_path / "lake"))


def test_readers_never_block_a_writer(
    corpus: Path, first_part: tuple[Path, Path], tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    """A reader with an open connection and a long export run while ingest, compact, retry
    and restore write the lake: none of them is refused (they were, with "open for writing
    by another process"), and the readers finish with what they started from."""
    lake = _part(first_part, tmp_path).root
    done = tmp_path / "writers-done"
    reader = _child(_OPEN_READER, lake, done)
    export = _child(_EXPORT, lake, tmp_path / "out", done)  # holds its first shard till done
    try:
        seen = _first_line(reader)
        assert _first_line(export) == "exporting"
        for args in (("ingest", corpus), ("compact",), ("retry",), ("restore", "1")):
            proc = run_cli(*args, "--lake", lake)
            assert proc.returncode == 0, (args, proc.stderr)
            assert reader.poll() is None and export.poll() is None  # still reading
        done.touch()
        assert _first_line(reader) == seen  # the moment it opened, whatever happened since
        _, err = export.communicate(timeout=300)
        assert export.returncode == 0, err
    finally:
        _stop(reader, export)
    docs = int(seen.split()[0])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["rows"] == docs > 0 and export_verify(tmp_path / "out") == []


_EXPORT = """
import sys, time
from pathlib import Path
from lakecurate import Lake, faults
done, hit = Path(sys.argv[3]), faults.hit
def slow(point, key=""):  # a long export: its first shard waits until the writers are done
    while point == "export_shard" and not done.exists():
        time.sleep(0.05)
    hit(point, key)
faults.hit = slow
lake = Lake.open(Path(sys.argv[1]))
version = lake.history().rows[-1][0]
print("exporting", flush=True)
lake.export(version, Path(sys.argv[2]), fmt="jsonl", shard_size=16 * 1024)
"""


def test_a_writer_waits_for_a_reader_copying_the_state(tmp_path: Path) -> None:
    """Readers hold the lake lock shared for the moment they copy the state: a writer that
    comes then waits for them (also past a dead writer's record) instead of failing."""
    path = tmp_path / "lock"
    path.write_text(
        json.dumps(
            {
                "pid": 2**22 + 7,
                "host": socket.gethostname(),
                "command": "ingest",
                "since": "long ago",
            }
        )
    )  # a dead writer
    reader = _child(_HOLD_READING, path, 1.5)
    try:
        assert _first_line(reader) == "reading"
        started = time.monotonic()
        with LakeLock.acquire(path, "compact"):
            waited = time.monotonic() - started
            late = _child(_HOLD_READING, path, 0)
            assert _first_line(late) == "refused"  # a reader never holds a writer's lake
            _stop(late)
    finally:
        _stop(reader)
    assert 0.5 < waited < 30


def test_sql_during_a_write_reads_the_version_its_snapshot_names(
    corpus: Path, first_part: tuple[Path, Path], tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    """While a writer holds the lake, readers use its last snapshot: the documents are the
    Delta version that snapshot names, not a newer one (D18: docs must equal the kept rows
    of the SUCCESS chunks the reader sees)."""
    first = _part(first_part, tmp_path)
    lake = first.root
    old_snapshot = (lake / SNAPSHOT_NAME).read_bytes()
    (kept_then, version_then) = first.sql(
        "SELECT sum(rows_kept), max(delta_version) FROM chunks WHERE status = 'SUCCESS'"
    ).rows[0]
    assert first.ingest([corpus]).ok
    latest = first.history().rows[-1][0]
    assert latest > version_then
    # an ingest in progress: it holds the lake, its last snapshot is older than its commits
    (lake / SNAPSHOT_NAME).write_bytes(old_snapshot)
    writer = _child(_HOLD_WRITER, lake)
    try:
        assert _first_line(writer) == "holding"
        query = (
            "SELECT (SELECT count(*) FROM docs) AS docs, (SELECT sum(rows_kept) FROM "
            "chunks WHERE status = 'SUCCESS') AS kept"
        )
        proc = run_cli("sql", query, "--lake", lake, "--format", "json")
        assert proc.returncode == 0, proc.stderr
        row = json.loads(proc.stdout)
        assert row == {"docs": kept_then, "kept": kept_then}
        proc = run_cli(
            "sql",
            "SELECT count(*) AS n FROM docs",
            "--lake",
            lake,
            "--version",
            str(latest),
            "--format",
            "json",
        )  # an explicit version is that one
        assert proc.returncode == 0 and json.loads(proc.stdout)["n"] > kept_then
        proc = run_cli("export", tmp_path / "out", "--lake", lake)
        assert proc.returncode == 0, proc.stderr
        manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
        assert (manifest["version"], manifest["rows"]) == (version_then, kept_then)
        assert run_cli("status", "--lake", lake).returncode == 0
    finally:
        _stop(writer)
