"""How much of an ingest passes through the driver: its bytes read and written, its CPU (issue 14).

Run: /work/venv/bin/python benchmarks/bench_driver.py [--mb 500] [--workers 2] [--chunk-mb 32]
     [--deciders 0] [--saturate] [--preset NAME] [--out benchmarks/results/bench_driver.json]
To measure another checkout of lakecurate on the same input (e.g. the code before the workers
wrote the data files), put it first on the path: ``PYTHONPATH=/path/to/checkout python ...``.

A seeded JSONL corpus of ``--mb`` MB (documents of ten random paragraphs, 5% exact copies) is
ingested once, in this process (the driver), with exact and near dedup and no filters (the
setting of the issue's profile; ``--preset multilingual`` adds the filters a new lake runs by
default, whose CPU is the workers'), by ``--workers`` worker processes. Reported from
``/proc/self/io`` and ``getrusage``: the driver's bytes read and written (``rchar``/``wchar``,
which count every read and write call, page cache or not), split into planning (listing and
stat-ing inputs: the workers hash and cut them) and the rest (deciding and committing); the
driver's and the workers' CPU seconds per GB of input and their ratio; the seconds from the
start to the first chunk handed to a worker; the driver's peak RSS (``ru_maxrss``: the process
that also wrote the input, a few MiB); wall time and the load average.

Linux adds a reaped child's I/O to its parent's ``/proc/<pid>/io``, so the worker processes'
bytes land in the driver's counters when the pool shuts down: the driver's own bytes are taken
as (counters when the executor starts closing - at the start) + (at the end - when it closed).
With ``--deciders K`` the band index's rows live in K decider processes (``[ingest] deciders``):
their CPU and peak RSS are reported apart (not counted as the workers'), and their bytes, reaped
when they stop, are taken out of the driver's like the workers'.
With ``--saturate`` the commit frontier is held until every chunk is staged, and the driver's
CPU from then on (deciding and committing every chunk, all ready at once, as on a cluster whose
workers outrun it) is reported apart: ``driver_cpu_seconds_deciding`` and its ratio to the
workers' CPU. Two workers hand the driver one chunk at a time, so without it every chunk's
decision pays its statements' fixed cost alone.
Targets: the driver's non-planning bytes <= 10% of the input; driver CPU <= 1% of the workers'.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import loadavg, save

RESULTS = Path(__file__).resolve().parent / "results" / "bench_driver.json"
VOCABULARY = " ".join(
    [
        "the of and to in is was for on that with by as at from his her they river stone light",
        "market winter garden letter signal engine harbour valley morning silver forest paper",
        "window bridge island season number history music school village language table",
    ]
).split()


def io_counters() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def cpu_seconds(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def write_input(path: Path, mb: int, seed: int = 0) -> tuple[int, int]:
    """Documents of ten paragraphs drawn from a seeded pool, 5% of them exact copies of an
    earlier one; returns (bytes, documents)."""
    rng = np.random.default_rng(seed)
    words = np.array(VOCABULARY)
    pool = [" ".join(words[rng.integers(0, len(words), 40)]) + "." for _ in range(5000)]
    target, size, n = mb * 1_000_000, 0, 0
    texts: list[str] = []
    with path.open("w", encoding="utf-8") as f:
        while size < target:
            if texts and rng.random() < 0.05:
                text = texts[int(rng.integers(0, len(texts)))]
            else:
                picks = rng.integers(0, len(pool), 10)
                text = f"Document {n}. " + "\n".join(pool[i] for i in picks)
                if len(texts) < 10_000:
                    texts.append(text)
            line = json.dumps({"id": f"d{n}", "text": text}) + "\n"
            f.write(line)
            size += len(line.encode())
            n += 1
    return path.stat().st_size, n


def saturate(scheduler_cls: Any) -> dict[str, float]:
    """Hold the commit frontier until every chunk is staged, then let the driver decide and
    commit them all: what it does when workers finish chunks faster than it decides them (a
    cluster), where two workers hand it one chunk at a time and each decision pays its fixed
    costs alone. Returns, once released, the driver's CPU seconds at the release."""
    released: dict[str, float] = {}
    commit = scheduler_cls.commit

    def held(self: Any) -> None:
        if not released:
            busy = self.executor.inflight() or self.queue or self.retry_at
            if busy or self.planner.unplanned or self.planner.unsent:
                return
            released["cpu"] = cpu_seconds(resource.RUSAGE_SELF)
            released["at"] = time.perf_counter()
        commit(self)

    scheduler_cls.commit = held
    return released


def run(
    mb: int,
    workers: int,
    chunk_mb: int,
    work: Path,
    deciders: int = 0,
    full: bool = False,
    preset: str | None = None,
) -> dict[str, Any]:
    import lakecurate
    from lakecurate.api import Lake
    from lakecurate.ingest import runner, scheduler
    from lakecurate.store import band_shards

    data = work / "in.jsonl"
    size, docs = write_input(data, mb)
    cfg = work / "lakecurate.toml"
    cfg.write_text(
        (f'preset = "{preset}"\n\n' if preset else "")
        + f'[ingest]\nchunk_size = "{chunk_mb}MiB"\ndeciders = {deciders}\n\n'
        + "[dedup]\nexact = true\n\n"
        + "[near_dedup]\nenabled = true\n",
        encoding="utf-8",
    )
    planning: dict[str, int] = {}
    make_plan = runner.make_plan

    def measured_plan(*args: Any, **kw: Any) -> Any:
        before = io_counters()
        out = make_plan(*args, **kw)
        after = io_counters()
        planning.update({k: after[k] - before[k] for k in ("rchar", "wchar")})
        return out

    runner.make_plan = measured_plan  # type: ignore[assignment]
    reaped: dict[str, int] = {}  # the children's bytes, added when they are shut down
    shards: list[Any] = []  # the decider processes closed

    def reaping(close: Any, closed: list[Any] | None = None) -> Any:
        """``close`` (of the pool, of the deciders), the bytes it reaps counted apart."""

        def measured(self: Any) -> None:
            before = io_counters()
            close(self)
            after = io_counters()
            for k in ("rchar", "wchar"):
                reaped[k] = reaped.get(k, 0) + after[k] - before[k]
            if closed is not None:
                closed.append(self)

        return measured

    runner.LocalExecutor.close = reaping(runner.LocalExecutor.close)  # type: ignore[method-assign]
    band_shards.Shards.close = reaping(band_shards.Shards.close, shards)  # type: ignore[method-assign]
    first_chunk: list[float] = []
    submit = runner.LocalExecutor.submit

    def measured_submit(self: Any, *args: Any) -> None:
        if not first_chunk:
            first_chunk.append(time.perf_counter())
        submit(self, *args)

    runner.LocalExecutor.submit = measured_submit  # type: ignore[method-assign]
    released = saturate(scheduler.Scheduler) if full else {}
    load_before = loadavg()
    io_before = io_counters()
    cpu_before = cpu_seconds(resource.RUSAGE_SELF)
    children_before = cpu_seconds(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    report = Lake.open(work / "lake").ingest([data], config=cfg, workers=workers)
    wall = time.perf_counter() - started
    driver_cpu = cpu_seconds(resource.RUSAGE_SELF) - cpu_before
    children_cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - children_before  # reaped by now
    deciders_cpu = sum(s.cpu_seconds for s in {id(s): s for s in shards}.values())
    workers_cpu = children_cpu - deciders_cpu
    io_after = io_counters()
    assert report.ok, report.dead
    rchar = io_after["rchar"] - io_before["rchar"] - reaped.get("rchar", 0)
    wchar = io_after["wchar"] - io_before["wchar"] - reaped.get("wchar", 0)
    rest = rchar - planning.get("rchar", 0) + wchar - planning.get("wchar", 0)
    gb = size / 1e9
    return {
        "lakecurate": str(Path(lakecurate.__file__).parent.parent),
        "preset": preset,
        "input_bytes": size,
        "documents": docs,
        "chunks": report.chunks_committed,
        "rows_kept": report.rows_kept,
        "driver_rchar": rchar,
        "driver_wchar": wchar,
        "planning_rchar": planning.get("rchar"),
        "planning_wchar": planning.get("wchar"),
        "driver_bytes_outside_planning": rest,
        "driver_bytes_outside_planning_share_of_input": round(rest / size, 4),
        "driver_bytes_share_of_input": round((rchar + wchar) / size, 4),
        "driver_cpu_seconds": round(driver_cpu, 2),
        "workers_cpu_seconds": round(workers_cpu, 2),
        "driver_cpu_s_per_gb": round(driver_cpu / gb, 2),
        "workers_cpu_s_per_gb": round(workers_cpu / gb, 2),
        "driver_over_workers_cpu": round(driver_cpu / workers_cpu, 4) if workers_cpu else None,
        "deciders": deciders,
        "deciders_cpu_seconds": round(deciders_cpu, 2),
        "deciders_peak_rss_mib": round(max([0, *(s.peak_rss_kib for s in shards)]) / 1024),
        "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "wall_seconds": round(wall, 1),
        **(
            {
                "saturated": True,
                "driver_cpu_seconds_deciding": round(driver_cpu - released["cpu"] + cpu_before, 2),
                "driver_deciding_over_workers_cpu": round(
                    (driver_cpu - released["cpu"] + cpu_before) / workers_cpu, 4
                ),
                "seconds_deciding": round(started + wall - released["at"], 1),
            }
            if released
            else {}
        ),
        "seconds_to_first_chunk": round(first_chunk[0] - started, 2) if first_chunk else None,
        "docs_per_second": round(report.rows_in / wall),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk-mb", type=int, default=32)
    parser.add_argument("--deciders", type=int, default=0, help="[ingest] deciders")
    parser.add_argument(
        "--saturate",
        action="store_true",
        help="decide nothing until every chunk is staged, then report the driver's CPU deciding",
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="a shipped preset's filters too (e.g. multilingual, the default of a new lake)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-driver-") as tmp:
        result = run(
            args.mb,
            args.workers,
            args.chunk_mb,
            Path(tmp),
            args.deciders,
            args.saturate,
            args.preset,
        )
    save(result, args.out)


if __name__ == "__main__":
    main()
