"""Where a worker's memory goes while it processes one chunk: peak RSS per phase (issue 14).

Run: /work/venv/bin/python benchmarks/bench_worker_memory.py [--mb 256] [--preset minimal]
     [--out benchmarks/results/bench_worker_memory.json]

One chunk of ``--mb`` MB (the seeded corpus of ``bench_driver.py``) is processed by
``worker.process_chunk`` in this process, with the preset's filters, exact and near dedup. A
thread samples the resident memory every 20 ms and files each sample under the phase running:
reading (``read_chunk``), deciding in DuckDB (after the read), signing (``add_signatures``),
writing the sets file (``write_sets``; a checkout from before sets files has no such phase) and
writing the staged file. The peak of the whole chunk is what a worker needs per chunk size.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

from bench_driver import write_input
from common import loadavg, rss_mib, save

RESULTS = Path(__file__).resolve().parent / "results" / "bench_worker_memory.json"
PHASES = ("read_chunk", "add_signatures", "write_sets", "write_atomic_parquet")


def run(mb: int, preset: str, work: Path) -> dict[str, Any]:
    from lakecurate import config
    from lakecurate.ingest import cutting, worker
    from lakecurate.types import Format, WorkOrder

    data = work / "chunk.jsonl"
    size, docs = write_input(data, mb)
    (spec,) = cutting.plan_file(str(data), Format.JSONL, 1 << 40)[1]
    text = f'preset = "{preset}"\n\n[dedup]\nexact = true\n\n[near_dedup]\nenabled = true\n'
    cfg = config.from_dict(tomllib.loads(text))
    order = WorkOrder(str(work), "bench", "bench", decisions=config.to_toml(cfg))
    phase = ["start"]
    peaks: dict[str, float] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks[phase[0]] = max(peaks.get(phase[0], 0.0), rss_mib())
            time.sleep(0.02)

    for name in PHASES:
        real = getattr(worker, name, None)
        if real is None:
            continue

        def timed(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            phase[0] = _name
            out = _real(*a, **k)
            phase[0] = "after " + _name
            return out

        setattr(worker, name, timed)
    threading.Thread(target=sample, daemon=True).start()
    base = rss_mib()
    started = time.perf_counter()
    worker.process_chunk(spec, order)
    seconds = time.perf_counter() - started
    done.set()
    return {
        "chunk_bytes": size,
        "documents": docs,
        "preset": preset,
        "seconds": round(seconds, 1),
        "rss_before_mib": round(base),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "peak_by_phase_mib": {k: round(v) for k, v in peaks.items()},
        "loadavg": loadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--preset", default="minimal")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-worker-memory-") as tmp:
        save(run(args.mb, args.preset, Path(tmp)), args.out)


if __name__ == "__main__":
    main()
