#!/usr/bin/env python
"""Benchmark ``lakecurate ingest``: throughput, memory, Delta commit cost, and the resume path.

What it measures (each figure is a median over repeats; the raw values are kept in the JSON):

1. **Fresh ingest** of a corpus (default ``../shared/data/real``) into a new temporary lake, with
   ``--workers`` and ``--chunk-size``: documents/s, MB/s of input bytes (bytes on disk, i.e.
   compressed for ``.jsonl.gz``; the uncompressed figure is reported too), wall seconds, peak
   RSS of the driver and of the worker processes, number of chunks, time per Delta commit.
   Every fresh ingest runs in its own child process (this script with ``--_child``), so that
   ``ru_maxrss`` is the peak of that one ingest and not of everything this process did before.
2. **Re-run on unchanged input**: seconds for the whole "nothing to do" run (in-process API call
   and the real CLI as a subprocess), with checks: no new Delta version, no new commit intent,
   ``report.files_read == 0``.
3. **Skip decision for >= 1,000 finished chunks**, on two lakes built for it: 1,000 small JSONL
   files (one chunk each: stresses per-file stat work) and one JSONL file cut into 1,000 chunks
   by a tiny chunk size (stresses per-chunk work). Timed both as the whole ``Lake.ingest`` call
   and, in-process on an opened ``StateStore``, as just ``make_plan(...)`` + ``state.todo(...)``
   (the two calls ``runner._ingest`` makes to decide what to do). Target (issue 2): under 0.2 s
   for the skip decision, with no input bytes re-read.

Run from the repository root::

    python benchmarks/bench_ingest.py                       # everything, on ../shared/data/real
    python benchmarks/bench_ingest.py --corpus DIR --workers 4 --repeat 5 --repeat-ingest 3
    python benchmarks/bench_ingest.py --no-skip-bench       # only the fresh ingest and re-run
    python benchmarks/bench_ingest.py --profile             # also write pyinstrument profiles
    python benchmarks/bench_ingest.py --delta-growth 600    # deltalake alone: append cost vs files

Results are printed and written to ``benchmarks/results/bench_ingest.json`` (temp file + rename).
This module must stay cheap and side-effect free at import time: worker processes are started
with ``spawn``, which re-imports the main module in every worker.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
DEFAULT_CORPUS = HERE.parents[2] / "shared" / "data" / "real"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "bench_ingest.json"
READABLE_SUFFIXES = (".jsonl.gz", ".jsonl.zst", ".jsonl", ".parquet")  # lakecurate.ingest.cutting
SKIP_TARGET_SECONDS = 0.2


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------
def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summary(xs: list[float]) -> dict[str, Any]:
    """median / min / max / p95 / sum / n of a list of seconds (all values rounded)."""
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
    return {
        "n": len(s),
        "median": round(statistics.median(s), 6),
        "min": round(s[0], 6),
        "p95": round(p95, 6),
        "max": round(s[-1], 6),
        "sum": round(sum(s), 6),
    }


def mib_from_kib(kib: int) -> float:
    return round(kib / 1024, 1)  # ru_maxrss is in KiB on Linux


def readable_format(path: str) -> str | None:
    try:
        from lakecurate.ingest.chunking import detect_format
    except ImportError:  # keep working if the module moves
        low = path.lower()
        return next((s[1:] for s in READABLE_SUFFIXES if low.endswith(s)), None)
    fmt = detect_format(path)
    return None if fmt is None else fmt.value


def scan_corpus(root: Path) -> tuple[list[str], list[str]]:
    """(files lakecurate reads, files it would ignore) under ``root``, sorted, like ``discover``."""
    readable, skipped = [], []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if not os.path.isfile(full):
                continue
            (readable if readable_format(full) else skipped).append(full)
    return sorted(readable), sorted(skipped)


def iter_lines(path: str):
    """The raw lines of a JSONL-family file (gz, zst if ``zstandard`` is installed, plain)."""
    low = path.lower()
    if low.endswith(".jsonl.gz"):
        with gzip.open(path, "rb") as f:
            yield from f
    elif low.endswith(".jsonl.zst"):
        try:
            import zstandard
        except ImportError:
            return
        with open(path, "rb") as raw:
            import io

            yield from io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw))
    elif low.endswith(".jsonl"):
        with open(path, "rb") as f:
            yield from f


def uncompressed_bytes(files: list[str]) -> int | None:
    """Total decompressed size of the JSONL-family inputs (None if any cannot be measured)."""
    total = 0
    for p in files:
        low = p.lower()
        if low.endswith(".jsonl"):
            total += os.path.getsize(p)
        elif low.endswith(".jsonl.gz") or low.endswith(".jsonl.zst"):
            n = sum(len(line) for line in iter_lines(p))
            if n == 0 and low.endswith(".zst"):
                return None
            total += n
        else:  # parquet: no meaningful "uncompressed input bytes"
            return None
    return total


def git_info() -> dict[str, Any]:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "lakecurate", "sql"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.split("\n")
        return {
            "commit": head or None,
            "uncommitted_changes_in_lakecurate_or_sql": [d[3:] for d in dirty if d.strip()],
        }
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}


def environment() -> dict[str, Any]:
    import deltalake
    import duckdb
    import pyarrow

    import lakecurate

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": cpus,
        "mem_total_mib": mem,
        "lakecurate": lakecurate.__version__,
        "duckdb": duckdb.__version__,
        "deltalake": deltalake.__version__,
        "pyarrow": pyarrow.__version__,
        "git": git_info(),
    }


def delta_version(lake: Path) -> int:
    from lakecurate.lake.delta import DeltaStore

    return DeltaStore(lake / "documents").version()


def commit_count(lake: Path) -> int:
    from lakecurate.api import Lake

    return int(Lake.open(lake).sql("select count(*) from commits").rows[0][0])


def make_config(chunk_size: int):
    from lakecurate.config import Config, IngestConfig

    return Config(ingest=IngestConfig(chunk_size=chunk_size))


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp_{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# RSS of the whole process tree, sampled from /proc (no psutil)
# ---------------------------------------------------------------------------------------------
class TreeRSSSampler(threading.Thread):
    """Polls /proc every ``interval`` s: peak of (this process + all descendants) RSS.

    ``ru_maxrss`` of RUSAGE_CHILDREN is the peak of the *largest single* reaped child, not the
    sum of concurrently running workers; this sampler gives the sum (to within one interval).
    """

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak_kib = 0
        self.peak_workers_kib = 0
        self.max_procs = 0
        self._halt = threading.Event()

    @staticmethod
    def _rss_and_ppid() -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            # fields[1] = ppid, fields[21] = rss in pages (stat(5): fields 4 and 24)
            out[int(name)] = (int(fields[1]), int(fields[21]) * PAGE_KIB)
        return out

    def sample(self) -> None:
        procs = self._rss_and_ppid()
        me = os.getpid()
        tree, frontier = {me}, [me]
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            for c in children.get(frontier.pop(), []):
                if c not in tree:
                    tree.add(c)
                    frontier.append(c)
        total = sum(procs[p][1] for p in tree if p in procs)
        workers = total - procs.get(me, (0, 0))[1]
        self.peak_kib = max(self.peak_kib, total)
        self.peak_workers_kib = max(self.peak_workers_kib, workers)
        self.max_procs = max(self.max_procs, len(tree))

    def run(self) -> None:
        while not self._halt.is_set():
            with contextlib.suppress(Exception):  # a racing /proc read must not stop us
                self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024 if hasattr(os, "sysconf") else 4


# ---------------------------------------------------------------------------------------------
# child: one fresh ingest, instrumented
# ---------------------------------------------------------------------------------------------
def child_fresh(spec: dict[str, Any]) -> dict[str, Any]:
    """One fresh ingest in this (child) process; returns its measurements.

    How commit time is measured (the honest way): we wrap, in this driver process, the methods
    the runner calls for each chunk, with ``time.perf_counter`` around them:

    * ``DeltaStore.commit_files``: exactly one Delta commit (the ``_delta_log`` JSON commit
      naming a group's data files, with its app transaction): "time per Delta commit";
    * ``Committer.stage`` + ``Committer.commit_group``: the whole serial, driver-side cost of the
      chunks (read the staged Parquet, lake-wide dedup against the DuckDB index, intent and
      index transactions, data files, the group's Delta commit and SUCCESS transaction, unlink
      of the staged files); its sum over the run is how much of the wall time the
      single-threaded driver is busy committing;
    * ``StateStore.finish_chunks``: the DuckDB SUCCESS transaction of a group (funnels, events).

    Timing from the state tables instead would be dishonest: gaps between SUCCESS events in
    ``chunk_events`` measure worker throughput whenever workers are the bottleneck, and
    ``commits.finished_at`` is DuckDB's ``now()``, the *start* of the transaction that writes it.
    Wrapping adds two perf_counter calls per chunk, i.e. nothing measurable.
    """
    from lakecurate.api import Lake
    from lakecurate.ingest.commit import Committer
    from lakecurate.lake.delta import DeltaStore
    from lakecurate.store.state import StateStore
    from lakecurate.types import ChunkResult

    timings: dict[str, list[float]] = {
        "delta_append": [],
        "committer_commit": [],
        "finish_append": [],
        "worker_seconds": [],
        "driver_rss_mib_after_commit": [],
    }
    missing: list[str] = []

    def timed(cls: type, name: str, bucket: str, on_call: Any = None, after: Any = None) -> None:
        orig = getattr(cls, name, None)
        if orig is None:  # the code moved: report it rather than crash
            missing.append(f"{cls.__name__}.{name}")
            return

        def wrapper(self: Any, *a: Any, **k: Any) -> Any:
            if on_call is not None:
                on_call(*a)
            t0 = time.perf_counter()
            try:
                return orig(self, *a, **k)
            finally:
                timings[bucket].append(time.perf_counter() - t0)
                if after is not None:
                    after()

        setattr(cls, name, wrapper)

    def rss_now() -> None:  # current (not peak) RSS of the driver: shows growth per chunk
        with open("/proc/self/statm") as f:
            timings["driver_rss_mib_after_commit"].append(
                round(int(f.read().split()[1]) * PAGE_KIB / 1024, 1)
            )

    def worker_seconds(*args: Any) -> None:  # commit(result) or commit(spec, result)
        for a in args:
            if isinstance(a, ChunkResult):
                timings["worker_seconds"].append(float(a.seconds or 0.0))
                return

    timed(DeltaStore, "commit_files", "delta_append")  # one per group of chunks
    timed(
        Committer,
        "stage",
        "committer_commit",
        worker_seconds,
        rss_now if os.path.exists("/proc/self/statm") else None,
    )
    timed(Committer, "commit_group", "committer_commit")  # the driver's time: both add up
    timed(StateStore, "finish_chunks", "finish_append")

    profiler = None
    if spec.get("profile"):
        try:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.001)
        except ImportError:
            profiler = None

    lake = Path(spec["lake"])
    cfg = make_config(spec["chunk_size"])
    load_before = os.getloadavg()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sampler = TreeRSSSampler(spec["rss_sample_ms"] / 1000) if spec["rss_sample_ms"] else None
    if sampler:
        sampler.start()
    if profiler:
        profiler.start()
    t0 = time.perf_counter()
    report = Lake.open(lake).ingest(spec["inputs"], config=cfg, workers=spec["workers"])
    wall = time.perf_counter() - t0
    if profiler:
        profiler.stop()
    if sampler:
        sampler.stop()
    self_ru = resource.getrusage(resource.RUSAGE_SELF)
    child_ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out: dict[str, Any] = {
        "wall_seconds": wall,
        "report_seconds": report.seconds,
        "outcome": report.outcome,
        "files": report.files,
        "files_read": report.files_read,
        "chunks_planned": report.chunks_planned,
        "chunks_committed": report.chunks_committed,
        "rows_in": report.rows_in,
        "rows_kept": report.rows_kept,
        "dead": [list(d) for d in report.dead],
        "file_errors": report.file_errors,
        "delta_version": delta_version(lake),
        "driver_peak_rss_mib": mib_from_kib(self_ru.ru_maxrss),
        "driver_rss_before_ingest_mib": mib_from_kib(rss_before),
        "largest_child_peak_rss_mib": mib_from_kib(child_ru.ru_maxrss),
        "driver_cpu_seconds": self_ru.ru_utime + self_ru.ru_stime,
        "children_cpu_seconds": child_ru.ru_utime + child_ru.ru_stime,
        "timings": timings,
        "not_instrumented": missing,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    if sampler:
        out["tree_peak_rss_mib_sampled"] = mib_from_kib(sampler.peak_kib)
        out["workers_peak_rss_sum_mib_sampled"] = mib_from_kib(sampler.peak_workers_kib)
        out["max_processes_in_tree"] = sampler.max_procs
    if profiler:
        Path(spec["profile"]).write_text(
            profiler.output_text(unicode=False, color=False), encoding="utf-8"
        )
    return out


def run_child_fresh(
    inputs: list[str],
    lake: Path,
    args: argparse.Namespace,
    chunk_size: int,
    profile: Path | None = None,
) -> dict[str, Any]:
    spec = {
        "inputs": inputs,
        "lake": str(lake),
        "chunk_size": chunk_size,
        "workers": args.workers,
        "rss_sample_ms": args.rss_sample_ms,
        "profile": str(profile) if profile else None,
    }
    spec_file = lake.with_name(lake.name + ".spec.json")
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    out_file = lake.with_name(lake.name + ".out.json")
    proc = subprocess.run(
        [sys.executable, str(HERE), "--_child", str(spec_file), str(out_file)],
        check=False,
        cwd=str(REPO),
    )
    if proc.returncode != 0 or not out_file.exists():
        raise SystemExit(f"the benchmark child for {lake} failed (exit {proc.returncode})")
    return json.loads(out_file.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# the benchmarks
# ---------------------------------------------------------------------------------------------
def bench_fresh(
    inputs: list[str], in_bytes: int, raw_bytes: int | None, work: Path, args: argparse.Namespace
) -> tuple[dict[str, Any], Path]:
    runs = []
    lake = work / "lake_fresh_0"
    for i in range(args.repeat_ingest):
        lake = work / f"lake_fresh_{i}"
        r = run_child_fresh(inputs, lake, args, args.chunk_size_bytes)
        if r["outcome"] != "OK" or r["chunks_committed"] != r["chunks_planned"]:
            raise SystemExit(
                f"fresh ingest {i} did not complete: {r['outcome']} {r['dead']} {r['file_errors']}"
            )
        runs.append(r)
        print(
            f"  fresh ingest {i + 1}/{args.repeat_ingest}: {r['wall_seconds']:.2f} s, "
            f"{r['rows_in'] / r['wall_seconds']:,.0f} docs/s, "
            f"{r['chunks_committed']} chunks, driver peak {r['driver_peak_rss_mib']} MiB",
            flush=True,
        )
        if i < args.repeat_ingest - 1 and not args.keep:
            shutil.rmtree(lake, ignore_errors=True)
    walls = [r["wall_seconds"] for r in runs]
    docs = runs[0]["rows_in"]
    all_append = [t for r in runs for t in r["timings"]["delta_append"]]
    all_commit = [t for r in runs for t in r["timings"]["committer_commit"]]
    all_finish = [t for r in runs for t in r["timings"]["finish_append"]]
    all_worker = [t for r in runs for t in r["timings"]["worker_seconds"]]
    med_wall = statistics.median(walls)
    res: dict[str, Any] = {
        "what": "fresh ingest into an empty temp lake (each run in its own child process)",
        "workers": args.workers,
        "chunk_size": args.chunk_size,
        "chunk_size_bytes": args.chunk_size_bytes,
        "repeats": len(runs),
        "files": runs[0]["files"],
        "chunks": runs[0]["chunks_committed"],
        "documents": docs,
        "documents_kept": runs[0]["rows_kept"],
        "input_bytes": in_bytes,
        "input_bytes_uncompressed": raw_bytes,
        "wall_seconds": summary(walls),
        "documents_per_second": round(docs / med_wall, 1),
        "input_mb_per_second": round(in_bytes / 1e6 / med_wall, 3),
        "uncompressed_mb_per_second": (round(raw_bytes / 1e6 / med_wall, 3) if raw_bytes else None),
        "delta_versions_after": runs[0]["delta_version"],
        "driver_peak_rss_mib": median([r["driver_peak_rss_mib"] for r in runs]),
        "driver_rss_before_ingest_mib": median([r["driver_rss_before_ingest_mib"] for r in runs]),
        "largest_worker_peak_rss_mib": median([r["largest_child_peak_rss_mib"] for r in runs]),
        "tree_peak_rss_mib_sampled": median([r.get("tree_peak_rss_mib_sampled", 0) for r in runs])
        or None,
        "workers_peak_rss_sum_mib_sampled": median(
            [r.get("workers_peak_rss_sum_mib_sampled", 0) for r in runs]
        )
        or None,
        "driver_cpu_seconds": summary([r["driver_cpu_seconds"] for r in runs]),
        "workers_cpu_seconds": summary([r["children_cpu_seconds"] for r in runs]),
        "delta_commit_seconds": summary(all_append),
        "driver_commit_per_chunk_seconds": summary(all_commit),
        "state_success_txn_seconds": summary(all_finish),
        "worker_seconds_per_chunk": summary(all_worker),
        "driver_commit_share_of_wall": round(
            median([sum(r["timings"]["committer_commit"]) / r["wall_seconds"] for r in runs]), 3
        ),
        "driver_rss_mib_after_each_commit_run0": runs[0]["timings"]["driver_rss_mib_after_commit"],
        "runs": [{k: v for k, v in r.items() if k != "timings"} for r in runs],
    }
    return res, lake


def bench_rerun(
    inputs: list[str], lake: Path, args: argparse.Namespace, cli_inputs: list[str]
) -> dict[str, Any]:
    from lakecurate.api import Lake

    cfg = make_config(args.chunk_size_bytes)
    v0, c0 = delta_version(lake), commit_count(lake)
    api, reports = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        r = Lake.open(lake).ingest(inputs, config=cfg, workers=args.workers)
        api.append(time.perf_counter() - t0)
        reports.append(r)
    cli = []
    cli_cmd = [
        sys.executable,
        "-m",
        "lakecurate",
        "ingest",
        *cli_inputs,
        "--lake",
        str(lake),
        "--workers",
        str(args.workers),
    ]
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        p = subprocess.run(cli_cmd, check=False, capture_output=True, text=True, cwd=str(REPO))
        cli.append(time.perf_counter() - t0)
        if p.returncode != 0 or "nothing to do" not in p.stdout:
            raise SystemExit(f"CLI re-run failed ({p.returncode}): {p.stdout}{p.stderr}")
    imp = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import lakecurate.cli"], check=True, cwd=str(REPO))
        imp.append(time.perf_counter() - t0)
    v1, c1 = delta_version(lake), commit_count(lake)
    return {
        "what": "re-run of the same ingest on unchanged input ('nothing to do')",
        "api_call_seconds": summary(api),
        "api_first_call_seconds": round(api[0], 6),
        "report_seconds": summary([r.seconds for r in reports]),
        "cli_subprocess_seconds": summary(cli),
        "python_import_lakecurate_cli_seconds": summary(imp),
        "cli_command": " ".join(cli_cmd),
        "outcomes": sorted({r.outcome for r in reports}),
        "files_read": max(r.files_read for r in reports),
        "chunks_todo": max(r.chunks_todo for r in reports),
        "chunks_planned": reports[0].chunks_planned,
        "delta_version_before": v0,
        "delta_version_after": v1,
        "new_delta_versions": v1 - v0,
        "new_commit_intents": c1 - c0,
        "ok": (
            v1 == v0
            and c1 == c0
            and all(
                r.files_read == 0 and r.chunks_todo == 0 and r.outcome == "NOTHING_TO_DO"
                for r in reports
            )
        ),
    }


def skip_decision(lake: Path, inputs: list[str], chunk_size: int, repeat: int) -> dict[str, Any]:
    """Time just the plan + skip decision, in-process, on an opened StateStore.

    Mirrors ``runner._ingest``: ``make_plan(inputs, chunk_size, state, verify=False)`` then
    ``state.todo(keys of the plan)``. ``plan_file`` (the only code path that reads input bytes)
    is wrapped with a counter to prove no input is re-read.
    """
    import lakecurate.ingest.plan as plan_mod
    from lakecurate.ingest.chunking import find_inputs
    from lakecurate.store.state import StateStore

    reads = {"plan_file_calls": 0}
    orig_plan_file = plan_mod.plan_file

    def counting_plan_file(*a: Any, **k: Any) -> Any:
        reads["plan_file_calls"] += 1
        return orig_plan_file(*a, **k)

    plan_mod.plan_file = counting_plan_file
    opens, plans, todos, both = [], [], [], []
    n_specs = n_todo = files_read = bytes_read = files = 0
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            state = StateStore.open(lake / "state.duckdb")
            t1 = time.perf_counter()
            try:
                found = find_inputs([str(i) for i in inputs], lake)
                plan = plan_mod.make_plan(found, chunk_size, state, False)
                t2 = time.perf_counter()
                todo = state.todo([s.chunk_key for s in plan.specs])
                t3 = time.perf_counter()
            finally:
                state.close()
            opens.append(t1 - t0)
            plans.append(t2 - t1)
            todos.append(t3 - t2)
            both.append(t3 - t1)
            n_specs, n_todo = len(plan.specs), len(todo)
            files, files_read = plan.files, max(files_read, plan.files_read)
            bytes_read = max(bytes_read, plan.bytes_read)
    finally:
        plan_mod.plan_file = orig_plan_file
    med = statistics.median(both)
    return {
        "state_open_seconds": summary(opens),
        "make_plan_seconds": summary(plans),
        "todo_seconds": summary(todos),
        "skip_decision_seconds": summary(both),
        "target_seconds": SKIP_TARGET_SECONDS,
        "meets_target": med < SKIP_TARGET_SECONDS and n_todo == 0 and files_read == 0,
        "files": files,
        "chunks_planned": n_specs,
        "chunks_todo": n_todo,
        "files_read": files_read,
        "bytes_read": bytes_read,
        "plan_file_calls": reads["plan_file_calls"],
    }


def whole_rerun(
    lake: Path, inputs: list[str], chunk_size: int, workers: int, repeat: int, profile: Path | None
) -> dict[str, Any]:
    from lakecurate.api import Lake

    cfg = make_config(chunk_size)
    v0, c0 = delta_version(lake), commit_count(lake)
    walls, reports = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = Lake.open(lake).ingest(inputs, config=cfg, workers=workers)
        walls.append(time.perf_counter() - t0)
        reports.append(r)
    if profile is not None:
        try:
            from pyinstrument import Profiler
        except ImportError:
            print("  (pyinstrument is not installed: no profile)", flush=True)
        else:
            prof = Profiler(interval=0.0005)
            prof.start()
            Lake.open(lake).ingest(inputs, config=cfg, workers=workers)
            prof.stop()
            profile.write_text(prof.output_text(unicode=False, color=False), encoding="utf-8")
    v1, c1 = delta_version(lake), commit_count(lake)
    return {
        "lake_ingest_seconds": summary(walls),
        "report_seconds": summary([r.seconds for r in reports]),
        "outcomes": sorted({r.outcome for r in reports}),
        "files_read": max(r.files_read for r in reports),
        "chunks_todo": max(r.chunks_todo for r in reports),
        "new_delta_versions": v1 - v0,
        "new_commit_intents": c1 - c0,
        "delta_version": v1,
    }


def _first_last(xs: list[float]) -> list[float] | None:
    return [xs[0], xs[-1]] if xs else None


def corpus_lines(files: list[str], need: int) -> list[bytes]:
    """Up to ``need`` real JSONL lines from the corpus (topped up with synthetic ones)."""
    lines: list[bytes] = []
    for p in files:
        for line in iter_lines(p):
            if line.strip():
                lines.append(line if line.endswith(b"\n") else line + b"\n")
                if len(lines) >= need:
                    return lines
    i = 0
    while len(lines) < need:  # a corpus too small (or Parquet only): synthesise the rest
        words = " ".join(f"w{(i * 7919 + j) % 104729}" for j in range(60))
        lines.append(json.dumps({"id": f"synthetic-{i}", "text": words}).encode() + b"\n")
        i += 1
    return lines


def build_many_files(folder: Path, files: list[str], n: int, per_file: int) -> list[str]:
    folder.mkdir(parents=True)
    lines = corpus_lines(files, n * per_file)
    out = []
    for i in range(n):
        p = folder / f"part_{i:05d}.jsonl"
        p.write_bytes(b"".join(lines[i * per_file : (i + 1) * per_file]))
        out.append(str(p))
    return out


def build_one_file(path: Path, files: list[str], n_chunks: int, chunk_size: int) -> int:
    """One JSONL file that lakecurate cuts into exactly ``n_chunks`` chunks of ``chunk_size``.

    lakecurate ends a chunk at the first newline at or after ``chunk_size`` bytes from its start
    (``cutting._plan_jsonl``); we count chunks with the same rule while writing.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    need = n_chunks * chunk_size
    pool = corpus_lines(files, max(2000, need // 200))
    written, acc, chunks, i = 0, 0, 0, 0
    with open(path, "wb") as f:
        while chunks < n_chunks:
            line = pool[i % len(pool)]
            if i >= len(pool):  # reusing the pool: make every line unique (distinct chunk keys)
                obj = json.loads(line)
                obj["id"] = f"{obj.get('id', 'x')}#rep{i // len(pool)}"
                line = json.dumps(obj, ensure_ascii=False).encode() + b"\n"
            f.write(line)
            written += len(line)
            acc += len(line)
            if acc >= chunk_size:
                chunks += 1
                acc = 0
            i += 1
    return written


def bench_skip(files: list[str], work: Path, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "what": (
            "re-run over a lake with >= N SUCCESS chunks: the whole Lake.ingest call, and "
            "just make_plan + state.todo on an opened StateStore (median of --repeat)"
        ),
        "target_seconds": SKIP_TARGET_SECONDS,
        "cases": {},
    }
    n = args.skip_chunks
    cases = []
    if "files" in args.skip_cases:
        folder = work / "many_files"
        t0 = time.perf_counter()
        paths = build_many_files(folder, files, n, args.lines_per_file)
        cases.append(
            (
                "many_files",
                f"{n} JSONL files of {args.lines_per_file} lines, one chunk "
                "each (per-file stat work)",
                [str(folder)],
                paths,
                args.chunk_size_bytes,
                time.perf_counter() - t0,
            )
        )
    if "chunks" in args.skip_cases:
        big = work / "one_file" / "one_big.jsonl"
        t0 = time.perf_counter()
        size = build_one_file(big, files, n, args.skip_chunk_size_bytes)
        cases.append(
            (
                "one_file",
                f"one {size / 1e6:.1f} MB JSONL file cut into {n} chunks of "
                f"{args.skip_chunk_size} (per-chunk work)",
                [str(big)],
                [str(big)],
                args.skip_chunk_size_bytes,
                time.perf_counter() - t0,
            )
        )
    for name, desc, inputs, paths, chunk_size, gen_seconds in cases:
        print(f"  building {name}: {desc} ...", flush=True)
        lake = work / f"lake_{name}"
        build_profile = (
            (args.out.parent / f"profile_build_{name}_driver.txt")
            if args.profile and name == "one_file"
            else None
        )
        try:
            build = run_child_fresh(inputs, lake, args, chunk_size, profile=build_profile)
        except SystemExit as exc:  # lakecurate itself failed: keep the other case's figures
            print(f"  {exc}", flush=True)
            out["cases"][name] = {"description": desc, "error": str(exc)}
            continue
        if build["outcome"] != "OK" or build["chunks_committed"] < n:
            out["cases"][name] = {
                "description": desc,
                "error": (
                    f"build ended {build['outcome']} with {build['chunks_committed']} chunks"
                ),
            }
            continue
        appends = build["timings"]["delta_append"]
        in_bytes = sum(os.path.getsize(p) for p in paths)
        print(
            f"  built {name}: {build['chunks_committed']} chunks in "
            f"{build['wall_seconds']:.1f} s; timing the re-run ...",
            flush=True,
        )
        profile = (args.out.parent / f"profile_rerun_{name}.txt") if args.profile else None
        whole = whole_rerun(lake, inputs, chunk_size, args.workers, args.repeat, profile)
        decision = skip_decision(lake, inputs, chunk_size, args.repeat)
        out["cases"][name] = {
            "description": desc,
            "inputs": inputs,
            "chunk_size_bytes": chunk_size,
            "input_bytes": in_bytes,
            "generate_seconds": round(gen_seconds, 3),
            "build": {
                "wall_seconds": round(build["wall_seconds"], 3),
                "chunks": build["chunks_committed"],
                "documents": build["rows_in"],
                "documents_per_second": round(build["rows_in"] / build["wall_seconds"], 1),
                "input_mb_per_second": round(in_bytes / 1e6 / build["wall_seconds"], 3),
                "driver_peak_rss_mib": build["driver_peak_rss_mib"],
                "largest_worker_peak_rss_mib": build["largest_child_peak_rss_mib"],
                "delta_commit_seconds": summary(appends),
                "delta_commit_first_100_median": median(appends[:100]),
                "delta_commit_last_100_median": median(appends[-100:]),
                "delta_commit_median_per_100_commits": [
                    round(statistics.median(appends[i : i + 100]), 4)
                    for i in range(0, len(appends), 100)
                ],
                "driver_commit_per_chunk_seconds": summary(build["timings"]["committer_commit"]),
                "driver_commit_share_of_wall": round(
                    sum(build["timings"]["committer_commit"]) / build["wall_seconds"], 3
                ),
                "worker_seconds_per_chunk": summary(build["timings"]["worker_seconds"]),
                "driver_rss_mib_after_commit_first_last": _first_last(
                    build["timings"]["driver_rss_mib_after_commit"]
                ),
                "profiled": bool(build_profile),
            },
            "rerun_whole_lake_ingest": whole,
            "skip_decision_in_process": decision,
            "profile": str(profile) if profile else None,
        }
    return out


def bench_delta_growth(n: int, work: Path) -> dict[str, Any]:
    """deltalake alone: does the cost of an append grow with the table's versions or files?

    Appends ``n`` tiny 10-row commits (partitioned by ``kept``, with an app transaction, like
    ``DeltaStore.append``) to a fresh table, twice: plain, and with ``optimize.compact()`` +
    ``vacuum`` halfway. If the cost falls back after compaction, it scales with the number of
    active data files (lakecurate adds one per chunk), not with the number of versions.
    """
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    rows = pa.table(
        {
            "id": pa.array([f"x{i}" for i in range(10)]),
            "text": pa.array(["hello world"] * 10),
            "kept": pa.array([True] * 10),
        }
    )
    out: dict[str, Any] = {
        "what": bench_delta_growth.__doc__.split("\n\n")[0].strip(),
        "commits": n,
        "block": 100,
        "runs": {},
    }
    for mode in ("plain", "compact_halfway"):
        path = work / f"delta_{mode}"
        dt = None
        times: list[float] = []
        for i in range(n):
            if mode == "compact_halfway" and i == n // 2 and dt is not None:
                dt.optimize.compact()
                dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
            t0 = time.perf_counter()
            write_deltalake(
                dt if dt is not None else str(path),
                rows,
                mode="append",
                partition_by=["kept"],
                commit_properties=CommitProperties(app_transactions=[Transaction("bench", i + 1)]),
            )
            if dt is None:
                dt = DeltaTable(str(path))
            dt.version()
            times.append(time.perf_counter() - t0)
        assert dt is not None
        log = os.listdir(path / "_delta_log")
        out["runs"][mode] = {
            "median_ms_per_100_commits": [
                round(statistics.median(times[i : i + 100]) * 1e3, 2) for i in range(0, n, 100)
            ],
            "active_files_at_end": len(dt.file_uris()),
            "version_at_end": dt.version(),
            "checkpoints_in_log": sum(".checkpoint." in name for name in log),
        }
        print(
            f"  {mode:16s} median ms per 100 commits: "
            f"{out['runs'][mode]['median_ms_per_100_commits']}",
            flush=True,
        )
    return out


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--corpus",
        type=Path,
        default=DEFAULT_CORPUS,
        help=f"folder (or file) of inputs (default: {DEFAULT_CORPUS})",
    )
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--chunk-size", default="8MiB", help="target chunk size (default 8MiB)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="repeats of the re-run / skip-decision timings (default 5)",
    )
    ap.add_argument(
        "--repeat-ingest", type=int, default=3, help="repeats of the fresh ingest (default 3)"
    )
    ap.add_argument(
        "--skip-chunks",
        type=int,
        default=1000,
        help="finished chunks in the skip-decision lakes (default 1000)",
    )
    ap.add_argument(
        "--skip-cases",
        default="files,chunks",
        help="which skip lakes to build: 'files' (N files), 'chunks' (one file "
        "cut into N chunks), or both (default files,chunks)",
    )
    ap.add_argument(
        "--skip-chunk-size",
        default="8KiB",
        help="chunk size of the one-file skip lake (default 8KiB)",
    )
    ap.add_argument(
        "--lines-per-file",
        type=int,
        default=10,
        help="documents per file in the many-files skip lake (default 10)",
    )
    ap.add_argument("--no-skip-bench", action="store_true", help="skip the 1,000-chunk lakes")
    ap.add_argument(
        "--rss-sample-ms",
        type=float,
        default=50,
        help="poll /proc for the summed RSS of the process tree every N ms (0 = off; default 50)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also write pyinstrument profiles (fresh ingest driver, re-runs) to "
        "the results folder (pip install pyinstrument)",
    )
    ap.add_argument("--tmp", type=Path, default=None, help="where temp lakes go")
    ap.add_argument("--keep", action="store_true", help="keep the temp lakes (prints where)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
    ap.add_argument(
        "--delta-growth",
        type=int,
        default=0,
        metavar="N",
        help="run only the deltalake-alone experiment: N appends, plain and with a "
        "compaction halfway (writes bench_delta_growth.json next to --out)",
    )
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._child:
        spec = json.loads(Path(args._child[0]).read_text(encoding="utf-8"))
        out = child_fresh(spec)
        write_json_atomic(Path(args._child[1]), out)
        return 0

    if args.delta_growth:
        work = Path(tempfile.mkdtemp(prefix="lakecurate-bench-delta-", dir=args.tmp))
        try:
            print(
                f"deltalake alone: {args.delta_growth} appends, plain and compacted halfway",
                flush=True,
            )
            res = {
                "benchmark": "bench_ingest --delta-growth",
                "command": " ".join([sys.executable, *sys.argv]),
                "environment": environment(),
                "loadavg_start": [round(x, 2) for x in os.getloadavg()],
                "delta_growth": bench_delta_growth(args.delta_growth, work),
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            }
        finally:
            shutil.rmtree(work, ignore_errors=True)
        target = args.out.resolve().with_name("bench_delta_growth.json")
        write_json_atomic(target, res)
        print(f"results written to {target}")
        return 0

    from lakecurate.config import parse_size

    args.chunk_size_bytes = parse_size(args.chunk_size, "--chunk-size")
    args.skip_chunk_size_bytes = parse_size(args.skip_chunk_size, "--skip-chunk-size")
    args.skip_cases = {c.strip() for c in args.skip_cases.split(",") if c.strip()}
    args.out = args.out.resolve()
    if args.profile:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.workers < 1 or args.repeat < 1 or args.repeat_ingest < 1:
        raise SystemExit("--workers, --repeat and --repeat-ingest must be >= 1")

    corpus = args.corpus.resolve()
    if not corpus.exists():
        raise SystemExit(
            f"corpus {corpus} not found. Point --corpus at a folder of .jsonl/.jsonl.gz/"
            ".jsonl.zst/.parquet files, or generate one:\n"
            f"    python examples/generate_corpus.py DIR --scale 20\n"
            f"    python benchmarks/bench_ingest.py --corpus DIR"
        )
    if corpus.is_file():
        readable = readable_format(str(corpus)) is not None
        files, skipped = ([str(corpus)], []) if readable else ([], [str(corpus)])
    else:
        files, skipped = scan_corpus(corpus)
    if not files:
        raise SystemExit(
            f"no file lakecurate reads under {corpus} (.jsonl, .jsonl.gz, "
            ".jsonl.zst, .parquet); skipped: {skipped}"
        )
    if skipped:
        print(
            f"skipping {len(skipped)} file(s) lakecurate does not read: "
            + ", ".join(os.path.relpath(s, corpus) for s in skipped),
            flush=True,
        )
    # Pass the folder when every file in it is readable (what a user types), else the list.
    inputs = [str(corpus)] if not skipped else files
    in_bytes = sum(os.path.getsize(p) for p in files)
    raw_bytes = uncompressed_bytes(files)

    results: dict[str, Any] = {
        "benchmark": "bench_ingest",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([sys.executable, *sys.argv]),
        "environment": environment(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "corpus": {
            "path": str(corpus),
            "files": len(files),
            "skipped_files": skipped,
            "formats": sorted({readable_format(f) or "?" for f in files}),
            "input_bytes": in_bytes,
            "input_bytes_uncompressed": raw_bytes,
        },
    }
    print(
        f"corpus {corpus}: {len(files)} files, {in_bytes / 1e6:.1f} MB on disk"
        + (f", {raw_bytes / 1e6:.1f} MB uncompressed" if raw_bytes else ""),
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="lakecurate-bench-", dir=args.tmp))
    try:
        print(
            f"[1/3] fresh ingest x{args.repeat_ingest} (workers={args.workers}, "
            f"chunk size {args.chunk_size}) in {work}",
            flush=True,
        )
        results["complete"] = False
        results["fresh_ingest"], lake = bench_fresh(inputs, in_bytes, raw_bytes, work, args)
        write_json_atomic(args.out, results)  # partial results survive a later failure
        if args.profile:
            prof = args.out.parent / "profile_fresh_ingest_driver.txt"
            run_child_fresh(
                inputs, work / "lake_fresh_profiled", args, args.chunk_size_bytes, profile=prof
            )
            results["fresh_ingest"]["profile"] = str(prof)
        print(f"[2/3] re-run on unchanged input x{args.repeat}", flush=True)
        rerun = bench_rerun(inputs, lake, args, inputs)
        rerun["skip_decision_in_process"] = skip_decision(
            lake, inputs, args.chunk_size_bytes, args.repeat
        )
        results["rerun_unchanged"] = rerun
        if not rerun["ok"]:
            print("  WARNING: the re-run was not a clean 'nothing to do'", flush=True)
        write_json_atomic(args.out, results)
        if not args.no_skip_bench:
            print(f"[3/3] skip decision for {args.skip_chunks} finished chunks", flush=True)
            results["skip_decision_1000"] = bench_skip(files, work, args)
    finally:
        if args.keep:
            print(f"temp lakes kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    results["complete"] = True
    results["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json_atomic(args.out, results)
    print_summary(results)
    print(f"results written to {args.out}")
    return 0


def print_summary(res: dict[str, Any]) -> None:
    f = res["fresh_ingest"]
    r = res["rerun_unchanged"]
    sd = r["skip_decision_in_process"]
    lines = [
        "",
        f"== fresh ingest ({f['files']} files, {f['chunks']} chunks, {f['documents']:,} docs, "
        f"workers={f['workers']}, chunk size {f['chunk_size']}, median of {f['repeats']})",
        f"  wall                {f['wall_seconds']['median']:.2f} s "
        f"(min {f['wall_seconds']['min']:.2f}, max {f['wall_seconds']['max']:.2f})",
        f"  documents/s         {f['documents_per_second']:,.0f}",
        f"  MB/s (on disk)      {f['input_mb_per_second']:.2f}"
        + (
            f"   (uncompressed: {f['uncompressed_mb_per_second']:.2f})"
            if f["uncompressed_mb_per_second"]
            else ""
        ),
        f"  peak RSS            driver {f['driver_peak_rss_mib']} MiB, largest worker "
        f"{f['largest_worker_peak_rss_mib']} MiB, whole tree (sampled) "
        f"{f['tree_peak_rss_mib_sampled']} MiB",
        f"  Delta commit        median {f['delta_commit_seconds']['median'] * 1e3:.1f} ms, "
        f"p95 {f['delta_commit_seconds']['p95'] * 1e3:.1f} ms "
        f"(whole driver commit per chunk: "
        f"{f['driver_commit_per_chunk_seconds']['median'] * 1e3:.1f} ms)",
        "",
        "== re-run on unchanged input",
        f"  Lake.ingest         {r['api_call_seconds']['median'] * 1e3:.1f} ms "
        f"(first call {r['api_first_call_seconds'] * 1e3:.1f} ms); CLI subprocess "
        f"{r['cli_subprocess_seconds']['median']:.2f} s (of which python + import "
        f"{r['python_import_lakecurate_cli_seconds']['median']:.2f} s)",
        f"  skip decision       {sd['skip_decision_seconds']['median'] * 1e3:.1f} ms "
        f"(make_plan + todo, {sd['chunks_planned']} chunks)",
        f"  new Delta versions  {r['new_delta_versions']}, files read {r['files_read']}, "
        f"ok={r['ok']}",
    ]
    s = res.get("skip_decision_1000")
    if s:
        for name, c in s["cases"].items():
            if "error" in c:
                lines += ["", f"== skip decision: {name}: FAILED: {c['error']}"]
                continue
            d, w, b = c["skip_decision_in_process"], c["rerun_whole_lake_ingest"], c["build"]
            lines += [
                "",
                f"== skip decision: {name}: {c['description']}",
                f"  build               {b['wall_seconds']:.1f} s, {b['chunks']} chunks, "
                f"Delta commit median {b['delta_commit_seconds']['median'] * 1e3:.1f} ms "
                f"(first 100: {b['delta_commit_first_100_median'] * 1e3:.1f} ms, last 100: "
                f"{b['delta_commit_last_100_median'] * 1e3:.1f} ms)",
                f"  make_plan + todo    {d['skip_decision_seconds']['median'] * 1e3:.1f} ms "
                f"(plan {d['make_plan_seconds']['median'] * 1e3:.1f}, todo "
                f"{d['todo_seconds']['median'] * 1e3:.1f}; target < "
                f"{d['target_seconds'] * 1e3:.0f} ms: {'MET' if d['meets_target'] else 'MISSED'})"
                f"; files read {d['files_read']}, plan_file calls {d['plan_file_calls']}",
                f"  whole Lake.ingest   {w['lake_ingest_seconds']['median'] * 1e3:.1f} ms; "
                f"new Delta versions {w['new_delta_versions']}, files read {w['files_read']}",
            ]
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
