#!/usr/bin/env python
"""Crash campaign (issue 7): SIGKILL a real ``lakecurate ingest`` at random moments, N times in a
row, resuming each time with the same command until it completes; then compare the lake with
one built by an uninterrupted run.

What it does:

1. Generates a corpus with ``examples/generate_corpus.py`` (``--scale``, ``--seed``) and writes a
   pipeline config (exact and near dedup on, so the band and signature files are part of what
   a kill can tear; ``--no-near``: exact dedup only, chunks decided many at a time) with small
   chunks (``--chunk-size``), so that a run has many commits and a
   kill can land in every phase: start-up, planning, workers, the staged write, the commit
   intent, the Delta write, the state update, the snapshot, the end of the run.
2. A clean run (one uninterrupted ``ingest``) gives the reference: ``lake_rows`` (every row's
   chunk_key, source_line, id, content_hash, kept, reason, dup_of), the Delta version, the time.
3. The campaign: start the same command in a new session, sleep a random delay (uniform in
   ``--min-delay`` .. ``--max-delay``, from ``random.Random(--seed)``), SIGKILL the whole process
   group (driver and workers: a power cut), wait until no process of the group is left, look at
   the lake (on a *copy* of ``state.duckdb``, read-only for the lake) to record which phase the
   kill hit, and start again. After ``--kills`` kills, one last run goes uninterrupted.
4. Checks (``tests/helpers.py:lake_problems``, the invariants of ``tests/integration/
   test_crash.py``): same rows as the clean run, no duplicate (chunk_key, source_line), no id
   kept twice, no temp or staged file left, every Parquet file the log names readable, no
   orphan data file, DuckDB's SUCCESS chunks == the Delta log's commits version for version,
   every intent DONE, watermark == last seq, index size == kept documents; plus ``verify``
   finds nothing and one more run says "nothing to do".

Prints a JSON summary and writes it to ``benchmarks/results/chaos.json`` (``--out``): kills
survived, documents lost (must be 0), duplicated (must be 0), rows differing, extra Delta
versions vs the clean run (informative: chunks are committed in groups, and a killed run commits
the groups it finished, so the number of commits may differ; that each chunk is in the log once
is one of the checks), time lost per kill (total campaign wall time minus the clean run's,
divided by the kills), and where the kills landed. Exit code 0 only when everything holds.

Run from the repository root with the project's virtualenv::

    python benchmarks/chaos.py                          # 30 kills, the defaults below
    python benchmarks/chaos.py --kills 100 --seed 2
    python benchmarks/chaos.py --kills 5 --scale 1 --out /tmp/chaos.json   # a quick look

``tests/integration/test_chaos_fast.py`` runs ``campaign()`` with 3 kills in the test suite (5 with
``-m slow``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "chaos.json"
sys.path.insert(0, str(REPO / "tests"))  # the shared invariants live in tests/helpers.py

from helpers import cli_env, lake_problems, lake_rows, lakecurate_cmd, load_generator  # noqa: E402

CONFIG = """\
[ingest]
chunk_size = "{chunk_size}"
max_attempts = 3
retry_backoff = 0.05
deciders = {deciders}

[dedup]
exact = true
"""
NEAR = """
[near_dedup]
enabled = true
"""


def ingest_command(corpus: Path, lake: Path, config: Path, workers: int) -> list[str]:
    return lakecurate_cmd(
        "ingest", corpus, "--lake", lake, "--config", config, "--workers", workers
    )


def _group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` still exists (zombies excluded)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def kill_group(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGKILL the ingest's whole process group and wait until every member is gone, so no
    orphaned worker can write into the lake while the next run starts."""
    with contextlib.suppress(ProcessLookupError):  # it may have just ended by itself
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=timeout)
    deadline = time.monotonic() + timeout
    while _group_alive(proc.pid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"process group {proc.pid} survived SIGKILL for {timeout} s")
        time.sleep(0.01)


def kill_phase(lake: Path, pid: int, started: float) -> str:
    """Which step the kill interrupted, read from what the killed run (driver ``pid``, started
    at wall time ``started``) left behind. Only traces of *this* run count: what an earlier
    kill left stays until a run gets far enough to clean it up. Read on copies: the next run
    must find the lake exactly as the kill left it."""
    import duckdb
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    state = lake / "state.duckdb"
    if not state.exists():
        return "start-up (imports, lock, state not created yet)"
    with tempfile.TemporaryDirectory(prefix="chaos-state-") as tmp:
        copy = Path(tmp) / "state.duckdb"
        shutil.copy2(state, copy)
        wal = state.with_name("state.duckdb.wal")
        if wal.exists():
            shutil.copy2(wal, copy.with_name("state.duckdb.wal"))
        con = duckdb.connect(str(copy))
        try:
            tables = {
                r[0]
                for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
            }
            last = (
                con.execute(
                    "SELECT run_id, pid FROM runs ORDER BY started_at DESC LIMIT 1"
                ).fetchall()
                if "runs" in tables
                else []
            )
            if not last or last[0][1] != pid:
                return "start-up (imports, lock, state open: before the run was recorded)"
            run_id = last[0][0]
            intents = con.execute(
                "SELECT seq FROM commits WHERE status <> 'DONE' AND run_id = ?", [run_id]
            ).fetchall()
            statuses = dict(
                con.execute(
                    "SELECT status, count(*) FROM chunks WHERE run_id = ? GROUP BY ALL", [run_id]
                ).fetchall()
            )
            n_chunks = con.execute("SELECT count(*) FROM chunks").fetchall()[0][0]
            committed = con.execute(
                "SELECT count(*) FROM commits WHERE run_id = ?", [run_id]
            ).fetchall()[0][0]
        finally:
            con.close()
    watermark, referenced = 0, set()
    try:
        dt = DeltaTable(str(lake / "documents"))
        watermark = dt.transaction_version("lakecurate") or 0
        referenced = {os.path.normpath(u) for u in dt.file_uris()}
    except TableNotFoundError:
        pass
    documents = lake / "documents"
    on_disk = (
        {
            os.path.normpath(str(p))
            for p in documents.rglob("*.parquet")
            if "_delta_log" not in p.parts
        }
        if documents.exists()
        else set()
    )
    if intents:
        if max(s for (s,) in intents) <= watermark:
            return "after the Delta commit, before the state update"
        if on_disk - referenced:
            return "during the Delta write (data files written, no log entry yet)"
        return "after the commit intent, before the Delta write"
    staging = lake / "staging"
    if staging.exists() and any(
        ".tmp_" in p.name and p.stat().st_mtime >= started for p in staging.iterdir()
    ):
        return "a worker writing a staged file"
    if any(p.name.startswith(f"state.snapshot.duckdb.tmp_{pid}_") for p in lake.iterdir()):
        return "publishing the state snapshot"
    if statuses.get("RUNNING") or statuses.get("COMMITTING"):
        return "workers running (driver between commits)"
    if not committed and not statuses:
        return (
            "planning (no chunk recorded yet)"
            if not n_chunks
            else "reconcile / planning / first dispatch"
        )
    return "after the last commit (index save, run record)"


def compare(clean: list[tuple[Any, ...]], chaos: list[tuple[Any, ...]]) -> dict[str, int]:
    """Documents lost, duplicated and differing between two ``lake_rows`` lists."""
    by_line_clean = {(r[0], r[1]): r for r in clean}
    lines_chaos = collections.Counter((r[0], r[1]) for r in chaos)
    by_line_chaos = {(r[0], r[1]): r for r in chaos}
    kept_ids = collections.Counter(r[2] for r in chaos if r[4])
    identity = collections.Counter((r[2], r[3], r[4], r[5]) for r in clean)
    identity_chaos = collections.Counter((r[2], r[3], r[4], r[5]) for r in chaos)
    return {
        "documents_in_clean_run": len(clean),
        "documents_in_chaos_run": len(chaos),
        "documents_lost": sum(1 for k in by_line_clean if k not in by_line_chaos),
        "documents_extra": sum(1 for k in by_line_chaos if k not in by_line_clean),
        "documents_duplicated": (
            sum(n - 1 for n in lines_chaos.values()) + sum(n - 1 for n in kept_ids.values())
        ),
        "rows_differing": sum(
            1 for k, r in by_line_clean.items() if k in by_line_chaos and by_line_chaos[k] != r
        ),
        "identity_set_equal": int(identity == identity_chaos),
    }


def delta_version(lake: Path) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(lake / "documents")).version()


def campaign(
    work: Path,
    *,
    kills: int = 30,
    seed: int = 1,
    scale: float = 12.0,
    chunk_size: str = "16KiB",
    workers: int = 2,
    min_delay: float = 0.2,
    max_delay: float | None = None,
    near: bool = True,
    deciders: int = 0,
    log: Any = print,
) -> dict[str, Any]:
    """Run the whole campaign in ``work`` (created, left in place); returns the summary."""
    work.mkdir(parents=True, exist_ok=True)
    corpus, cfg = work / "corpus", work / "lakecurate.toml"
    if not corpus.exists():
        load_generator().generate(corpus, seed=7, scale=scale)
    text = CONFIG.format(chunk_size=chunk_size, deciders=deciders) + (NEAR if near else "")
    cfg.write_text(text, "utf-8")
    env = cli_env()

    clean_lake = work / "clean"
    shutil.rmtree(clean_lake, ignore_errors=True)
    t0 = time.perf_counter()
    done = subprocess.run(
        ingest_command(corpus, clean_lake, cfg, workers),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        start_new_session=True,
        check=False,
    )
    clean_seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"the clean run failed: {done.stdout}{done.stderr}")
    reference = lake_rows(clean_lake)
    clean_version = delta_version(clean_lake)
    chunks = len({r[0] for r in reference})
    log(
        f"clean run: {clean_seconds:.1f} s, {chunks} chunks, {len(reference)} rows, Delta "
        f"version {clean_version}"
    )
    if max_delay is None:  # kills spread over about a run's length, progress guaranteed
        max_delay = max(min_delay + 0.5, min(3.0, clean_seconds / 3))

    rng = random.Random(seed)
    lake = work / "chaos"
    shutil.rmtree(lake, ignore_errors=True)
    cmd = ingest_command(corpus, lake, cfg, workers)
    runs: list[dict[str, Any]] = []
    phases: collections.Counter[str] = collections.Counter()
    campaign_started = time.perf_counter()
    completed_early = False
    inspecting = 0.0  # time spent looking at the lake between runs: not the ingest's
    failures: list[str] = []
    for n in range(kills):
        delay = rng.uniform(min_delay, max_delay)
        started, wall_started = time.perf_counter(), time.time()
        err_path = work / "last-run.stderr"
        with open(err_path, "wb") as err_file:
            proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=err_file,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                kill_group(proc)
        if proc.returncode == -signal.SIGKILL:
            seconds = time.perf_counter() - started
            phase = kill_phase(lake, proc.pid, wall_started)
            inspecting += time.perf_counter() - started - seconds
            phases[phase] += 1
            runs.append(
                {
                    "run": n + 1,
                    "delay_s": round(delay, 3),
                    "killed": True,
                    "phase": phase,
                    "seconds": round(seconds, 3),
                }
            )
            continue
        err = err_path.read_text(encoding="utf-8", errors="replace")
        runs.append(
            {
                "run": n + 1,
                "delay_s": round(delay, 3),
                "killed": False,
                "returncode": proc.returncode,
                "stderr": err[-2000:],
                "seconds": round(time.perf_counter() - started, 3),
            }
        )
        if proc.returncode != 0:  # a finding: a resumed run must never fail by itself
            failures.append(f"run {n + 1} failed (rc {proc.returncode}): {err[-1000:]}")
            break
        completed_early = True
        log(f"run {n + 1} completed before its kill at {delay:.2f} s; campaign ends early")
        break
    killed = sum(1 for r in runs if r["killed"])
    final_start = time.perf_counter()
    final = subprocess.run(
        cmd, env=env, cwd=REPO, capture_output=True, text=True, start_new_session=True, check=False
    )
    final_seconds = time.perf_counter() - final_start
    chaos_seconds = time.perf_counter() - campaign_started - inspecting
    log(f"{killed} kills, then a run to the end ({final_seconds:.1f} s): rc {final.returncode}")
    again = subprocess.run(
        cmd, env=env, cwd=REPO, capture_output=True, text=True, start_new_session=True, check=False
    )

    from lakecurate import Lake

    problems = failures + (
        lake_problems(lake, reference)
        if final.returncode == 0
        else [f"the final run failed: {final.stdout[-2000:]}{final.stderr[-2000:]}"]
    )
    rows = lake_rows(lake) if final.returncode == 0 else []
    diff = compare(reference, rows)
    verify_problems = Lake.open(lake).verify().problems if final.returncode == 0 else []
    outcomes = (
        collections.Counter(r[0] for r in Lake.open(lake).sql("SELECT outcome FROM runs").rows)
        if final.returncode == 0
        else {}
    )
    extra_versions = delta_version(lake) - clean_version if final.returncode == 0 else None
    summary = {
        "ok": False,
        "kills_requested": kills,
        "kills_survived": killed if final.returncode == 0 else 0,
        "completed_before_all_kills": completed_early,
        **diff,
        "extra_delta_versions": extra_versions,
        "clean_run_seconds": round(clean_seconds, 3),
        "campaign_seconds": round(chaos_seconds, 3),
        "time_lost_per_kill_s": round((chaos_seconds - clean_seconds) / killed, 3)
        if killed
        else None,
        "final_run_seconds": round(final_seconds, 3),
        "rerun_says_nothing_to_do": "nothing to do" in again.stdout,
        "kill_phases": dict(phases.most_common()),
        "run_outcomes": dict(outcomes),
        "problems": problems,
        "verify_problems": verify_problems,
        "corpus": {
            "generator": "examples/generate_corpus.py",
            "seed": 7,
            "scale": scale,
            "files": len(list(corpus.iterdir())),
            "bytes": sum(p.stat().st_size for p in corpus.iterdir()),
            "chunks": chunks,
            "rows": len(reference),
        },
        "settings": {
            "seed": seed,
            "chunk_size": chunk_size,
            "near_dedup": near,
            "deciders": deciders,
            "workers": workers,
            "min_delay_s": min_delay,
            "max_delay_s": round(max_delay, 3),
        },
        "command": " ".join(["lakecurate", *cmd[3:]]),
        "runs": runs,
    }
    summary["ok"] = bool(
        final.returncode == 0
        and not problems
        and not verify_problems
        and summary["rerun_says_nothing_to_do"]
        and diff["documents_lost"] == 0
        and diff["documents_duplicated"] == 0
        and diff["rows_differing"] == 0
        and diff["documents_extra"] == 0
        and diff["identity_set_equal"]
        and killed == kills
    )
    return summary


def write_summary(summary: dict[str, Any], out: Path) -> None:
    """Write a campaign's JSON summary atomically (a killed run leaves the previous one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp_{os.getpid()}")
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)


def environment() -> dict[str, Any]:
    import deltalake
    import duckdb
    import pyarrow

    import lakecurate

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(REPO), *args],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = [
        d[3:]
        for d in git("status", "--porcelain", "--", "lakecurate", "sql").split("\n")
        if d.strip()
    ]
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg": os.getloadavg(),
        "lakecurate": lakecurate.__version__,
        "duckdb": duckdb.__version__,
        "deltalake": deltalake.__version__,
        "pyarrow": pyarrow.__version__,
        "git": {
            "commit": git("rev-parse", "HEAD").strip() or None,
            "uncommitted_changes_in_lakecurate_or_sql": dirty,
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kills", type=int, default=30, help="SIGKILLs in a row (default 30)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the kill delays (default 1)")
    ap.add_argument(
        "--scale",
        type=float,
        default=12.0,
        help="generate_corpus.py --scale (default 12: ~20 MB, ~1,000 chunks)",
    )
    ap.add_argument("--chunk-size", default="16KiB", help="[ingest].chunk_size (default 16KiB)")
    ap.add_argument("--workers", type=int, default=2, help="--workers (default 2)")
    ap.add_argument("--min-delay", type=float, default=0.2, help="seconds (default 0.2)")
    ap.add_argument(
        "--max-delay",
        type=float,
        default=None,
        help="seconds (default: a third of the clean run, within 0.7..3)",
    )
    ap.add_argument(
        "--no-near",
        action="store_true",
        help="near dedup off: chunks are then decided many at a time (a batch per query)",
    )
    ap.add_argument(
        "--deciders",
        type=int,
        default=0,
        help="[ingest] deciders: the band index and tier 2's keys in K processes (default 0)",
    )
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.kills < 1:
        ap.error("--kills must be at least 1")
    work = args.work or Path(tempfile.mkdtemp(prefix="lakecurate-chaos-"))
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    try:
        summary = campaign(
            work,
            kills=args.kills,
            seed=args.seed,
            scale=args.scale,
            chunk_size=args.chunk_size,
            workers=args.workers,
            min_delay=args.min_delay,
            max_delay=args.max_delay,
            near=not args.no_near,
            deciders=args.deciders,
            log=lambda m: print(m, file=sys.stderr, flush=True),
        )
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    summary["started"] = started
    summary["benchmark_command"] = "python benchmarks/chaos.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    summary["environment"] = environment()
    brief = {k: v for k, v in summary.items() if k not in ("runs", "environment")}
    print(json.dumps(brief, indent=2))
    write_summary(summary, args.out)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
