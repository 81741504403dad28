"""A large compressed shard as many chunks: worker memory, what a kill inside it costs (issue 14).

Run: /work/venv/bin/python benchmarks/bench_compressed.py [--mb 2000] [--chunk-mb 256]
     [--workers 2] [--out benchmarks/results/bench_compressed.json]

The seeded corpus of ``bench_driver.py`` (``--mb`` MB of JSONL, 5% exact copies) is compressed
to ``.jsonl.zst`` and ``.jsonl.gz`` and each is ingested (exact and near dedup, no filters) by a
fresh ``lakecurate ingest`` process with ``--workers`` workers: wall time, chunks, the driver's
and the workers' peak RSS (``getrusage``; the driver reaps its workers, so its children's peak is
the largest worker's). Then the ``.zst`` ingest is SIGKILLed (a ``worker:kill`` fault, the whole
process group, as a power cut) when the worker starts the middle chunk, and resumed with the same
command: how many chunks were processed twice (``attempts > 1``), and whether the table equals
the clean run's. Targets: worker peak RSS <= 1 GiB; only the chunks in flight are redone.
A child inherits its parent's ``ru_maxrss`` across fork and exec: the ingests run before anything
here grows, and tables are compared by ``common.table_fingerprint``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zstandard
from bench_driver import write_input
from common import loadavg, save, table_fingerprint

RESULTS = Path(__file__).resolve().parent / "results" / "bench_compressed.json"

# The ingest, in a fresh process: its getrusage is this run's alone.
CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from lakecurate.api import Lake

if __name__ == "__main__":
    data, lake, cfg = (Path(a) for a in sys.argv[1:4])
    workers = int(sys.argv[4])
    started = time.perf_counter()
    report = Lake.open(lake).ingest([data], config=cfg, workers=workers)
    peak = lambda who: round(resource.getrusage(who).ru_maxrss / 1024)
    print(json.dumps({
        "ok": report.ok, "chunks": report.chunks_committed, "rows_in": report.rows_in,
        "rows_kept": report.rows_kept, "from_staging": report.chunks_from_staging,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "driver_peak_rss_mib": peak(resource.RUSAGE_SELF),
        "workers_peak_rss_mib": peak(resource.RUSAGE_CHILDREN),
    }))
"""


def compress(plain: Path, fmt: str) -> Path:
    out = plain.with_name(plain.name + "." + fmt)
    with plain.open("rb") as src, out.open("wb") as dst:
        if fmt == "gz":
            with gzip.GzipFile(fileobj=dst, mode="wb", compresslevel=1, mtime=0) as z:
                shutil.copyfileobj(src, z, 8 << 20)
        else:
            zstandard.ZstdCompressor(level=3).copy_stream(src, dst)
    return out


def ingest(data: Path, lake: Path, cfg: Path, workers: int, fault: str = "") -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "LAKECURATE_FAULT"}
    if fault:
        env["LAKECURATE_FAULT"] = fault
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(data), str(lake), str(cfg), str(workers)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        start_new_session=True,  # a kill fault takes its own process group, not ours
    )
    if fault:
        assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
        return {}
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=2000)
    parser.add_argument("--chunk-mb", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result: dict[str, Any] = {"loadavg_before": loadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-compressed-") as tmp:
        work = Path(tmp)
        plain = work / "shard.jsonl"
        size, docs = write_input(plain, args.mb)
        result.update(decompressed_bytes=size, documents=docs, chunk_mb=args.chunk_mb)
        cfg = work / "lakecurate.toml"
        cfg.write_text(
            f'preset = "minimal"\n\n[ingest]\nchunk_size = "{args.chunk_mb}MiB"\n\n'
            "[dedup]\nexact = true\n\n[near_dedup]\nenabled = true\n"
        )
        for fmt in ("gz", "zst"):  # the kill last: the parent's RSS grows comparing tables
            t = time.perf_counter()
            data = compress(plain, fmt)
            run = {"compressed_bytes": data.stat().st_size, "compress_s": 0.0}
            run["compress_s"] = round(time.perf_counter() - t, 1)
            run.update(ingest(data, work / f"lake-{fmt}", cfg, args.workers))
            result[fmt] = run
            print(fmt, json.dumps(run), flush=True)
            if fmt == "zst":
                killed = work / "lake-killed"
                middle = run["chunks"] // 2
                ingest(data, killed, cfg, args.workers, f"worker:kill:shard_{middle:05d}_")
                resumed = ingest(data, killed, cfg, args.workers)
                from lakecurate.api import Lake

                attempts = (
                    Lake.open(killed)
                    .sql("SELECT chunk_key, attempts FROM chunks ORDER BY chunk_key")
                    .rows
                )
                result["kill"] = {
                    "killed_when_starting_chunk": middle,
                    "resumed": resumed,
                    "chunks_processed_twice": sorted(k for k, n in attempts if n > 1),
                    "equals_clean_run": table_fingerprint(killed)
                    == table_fingerprint(work / "lake-zst"),
                }
                print("kill", json.dumps(result["kill"]), flush=True)
                shutil.rmtree(killed)
            data.unlink()
    result["loadavg_after"] = loadavg()
    save(result, args.out)


if __name__ == "__main__":
    main()
