"""While an ingest runs: a second writer is refused at once; status and sql keep answering from
a consistent snapshot, and never modify anything."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from helpers import ROOT, cli_env

from lakecurate import Lake


def test_readers_and_a_second_writer_during_an_ingest(corpus: Path, config_file: Path,
                                                      tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    lake = tmp_path / "lake"
    cmd = [sys.executable, "-m", "lakecurate", "ingest", str(corpus), "--lake", str(lake),
           "--config", str(config_file), "--workers", "2"]
    proc = subprocess.Popen(cmd, env=cli_env({"LAKECURATE_FAULT": "after_delta_commit:sleep"}),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
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
            q = run_cli("sql", "--lake", lake, "--format", "json",
                        "SELECT count(*) AS n FROM chunks WHERE status = 'SUCCESS'")
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
