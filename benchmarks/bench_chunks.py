"""An ingest of many small chunks: does the driver's cost per commit stay flat (issue 14)?

Run: /work/venv/bin/python benchmarks/bench_chunks.py [--chunks 10000] [--workers 2]
     [--out benchmarks/results/bench_chunks.json]
To measure another checkout of lakecurate on the same input (e.g. the code before issue 14),
put it first on the path: ``PYTHONPATH=/path/to/checkout python benchmarks/bench_chunks.py``.

One plain JSONL file (seeded synthetic documents, ~2 KB each) is cut into ``--chunks`` chunks
by a small ``chunk_size`` and ingested once, in this process (the driver), with the default
pipeline (empty-text filter, exact dedup) and ``--workers`` worker processes. Every Delta
commit the driver makes is timed (``DeltaStore.commit_files`` since issue 14, one per group of
chunks; ``DeltaStore.append`` before it, one per chunk), with the driver's RSS after it. Reported:
the median commit time of the first and the last tenth of the commits and their ratio, the
commit time per chunk, the driver RSS when the 1,000th chunk was committed and at the end, the
whole ingest's wall time, the CPU time per chunk of the driver and of the workers (whose
processes have ended when the ingest returns), and the load average.

``--stop-after SECONDS`` stops the ingest at its first commit after that long (for code whose
commits grow with the table: the code before issue 14 needs hours for 10,000 chunks) and
reports what it committed by then, and the CPU spent by then.
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
from common import loadavg, rss_mib, save, tenths

RESULTS = Path(__file__).resolve().parent / "results" / "bench_chunks.json"
DOC_BYTES = 2000
VOCABULARY = "the of and to in is was for on that with by as at from his her they"
WORDS = np.array(VOCABULARY.split())


def write_input(path: Path, chunks: int, docs_per_chunk: int, seed: int = 0) -> int:
    """``chunks * docs_per_chunk`` distinct JSONL documents; returns the file's size."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(chunks * docs_per_chunk):
            words = " ".join(WORDS[rng.integers(0, len(WORDS), DOC_BYTES // 4)])
            f.write(json.dumps({"id": f"d{i}", "text": f"document {i} {words}"}) + "\n")
    return path.stat().st_size


class Stopped(BaseException):
    """Raised from inside a commit once ``--stop-after`` has passed (not an ``Exception``:
    nothing in the ingest may take it for a chunk's failure and go on)."""


def run(chunks: int, workers: int, work: Path, stop_after: float = 0.0) -> dict[str, Any]:
    import lakecurate
    from lakecurate.api import Lake
    from lakecurate.lake.delta import DeltaStore

    docs_per_chunk = 2
    data = work / "in.jsonl"
    size = write_input(data, chunks, docs_per_chunk)
    chunk_bytes = size // chunks
    cfg = work / "lakecurate.toml"
    cfg.write_text(f'[ingest]\nchunk_size = "{chunk_bytes}B"\n', encoding="utf-8")

    commits: list[tuple[float, float, int]] = []  # (seconds, rss after, chunks so far)
    committed = 0
    name = "commit_files" if hasattr(DeltaStore, "commit_files") else "append"
    orig = getattr(DeltaStore, name)

    def timed(self: Any, *args: Any, **kw: Any) -> Any:
        nonlocal committed
        started = time.perf_counter()
        out = orig(self, *args, **kw)
        seconds = time.perf_counter() - started
        if name == "commit_files":
            from lakecurate.lake.record import CommitRecord

            meta = args[2] if len(args) > 2 else kw["metadata"]
            committed += max(1, len(CommitRecord.parse(meta).chunks))
        else:
            committed += 1
        commits.append((seconds, rss_mib(), committed))
        if stop_after and time.perf_counter() - started_at > stop_after:
            raise Stopped
        return out

    setattr(DeltaStore, name, timed)
    load_before = loadavg()
    started = started_at = time.perf_counter()
    cpu = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        report = Lake.open(work / "lake").ingest([data], config=cfg, workers=workers)
        assert report.ok, report.dead
        stopped = False
    except Stopped:
        stopped = True
    wall = time.perf_counter() - started
    driver_cpu, workers_cpu = (
        sum(getattr(resource.getrusage(who), f) - getattr(was, f) for f in ("ru_utime", "ru_stime"))
        for who, was in zip((resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN), cpu, strict=True)
    )
    times = [c[0] for c in commits]
    first, last = tenths(times)
    at_1000 = next((c[1] for c in commits if c[2] >= 1000), None)
    return {
        "lakecurate": str(Path(lakecurate.__file__).parent.parent),
        "timed": f"DeltaStore.{name}",
        "input_bytes": size,
        "chunks_planned": chunks,
        "stopped_after_seconds": round(wall, 1) if stopped else None,
        "chunks_committed": committed,
        "delta_commits": len(commits),
        "first_tenth_median_commit_ms": round(first * 1000, 1),
        "last_tenth_median_commit_ms": round(last * 1000, 1),
        "last_over_first": round(last / first, 2),
        "commit_seconds_total": round(sum(times), 1),
        "commit_ms_per_chunk": round(1000 * sum(times) / committed, 2),
        "driver_rss_mib_at_chunk_1000": None if at_1000 is None else round(at_1000),
        "driver_rss_mib_end": round(rss_mib()),
        "wall_seconds": round(wall, 1),
        "driver_cpu_ms_per_chunk": round(1000 * driver_cpu / committed, 1),
        "workers_cpu_ms_per_chunk": round(1000 * workers_cpu / committed, 1),
        "docs_per_second": round(committed * docs_per_chunk / wall),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stop-after", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-chunks-") as tmp:
        result = run(args.chunks, args.workers, Path(tmp), args.stop_after)
    save(result, args.out)


if __name__ == "__main__":
    main()
