"""The same ingest on the local executor, on Ray, and into a lake on S3 (issue 15): wall time,
docs/s and the ratios.

Run: /work/venv/bin/python benchmarks/bench_cluster.py [--mb 200] [--chunk-mb 16] [--runs 3]
     [--out benchmarks/results/bench_cluster.json]

The seeded corpus of ``bench_driver.py`` (``--mb`` MB of JSONL in eight files, 5% exact copies)
is ingested (exact and near dedup, minimal preset) into a fresh lake by a fresh ``lakecurate
ingest`` process, ``--runs`` times each way:

- ``local``: the process pool, two workers;
- ``ray``: Ray tasks on a local cluster started here on loopback (a head with no CPUs and two
  one-CPU worker nodes, ``ray.cluster_utils.Cluster``), the driver joining it by address;
- ``s3``: the process pool, the lake on an S3-compatible server started here on loopback
  (moto's, tests/s3server.py): staged and data files uploaded by the workers, the Delta log by
  the driver's conditional puts;
- ``ray_s3``: both.

Reported: the median wall time and docs/s of each, each one's ratio to local (target for Ray:
<= 1.3 on this machine), whether the tables are identical, and the load average. What Ray's
overhead is made of is estimated by timing an empty Ray task round trip on the same cluster
(per task, times the tasks of a run: chunks, finalises and plannings).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_driver import write_input
from common import loadavg, save, table_fingerprint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from s3server import running_s3

RESULTS = Path(__file__).resolve().parent / "results" / "bench_cluster.json"
REPO = Path(__file__).resolve().parents[1]
QUIET = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def ingest(data: Path, lake: Path | str, cfg: Path, extra: list[str]) -> float:
    env = {**os.environ, **QUIET, "PYTHONPATH": str(REPO)}
    env.pop("LAKECURATE_FAULT", None)
    cmd = [sys.executable, "-m", "lakecurate", "ingest", str(data), "--lake", str(lake)]
    started = time.perf_counter()
    done = subprocess.run(
        [*cmd, "--config", str(cfg), *extra], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return time.perf_counter() - started


def task_round_trip(address: str, n: int = 200) -> float:
    """Seconds per empty Ray task, submitted and collected one at a time."""
    code = (
        "import ray, time, sys\n"
        "ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)\n"
        "f = ray.remote(lambda: None)\n"
        "ray.get(f.remote())\n"
        "t = time.perf_counter()\n"
        f"for _ in range({n}): ray.get(f.remote())\n"
        f"print((time.perf_counter() - t) / {n})\n"
    )
    env = {**os.environ, **QUIET}
    out = subprocess.run(
        [sys.executable, "-c", code, address], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--chunk-mb", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    os.environ.update(QUIET)
    from ray.cluster_utils import Cluster

    result: dict[str, Any] = {"loadavg_before": loadavg(), "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, running_s3() as s3:
        work = Path(tmp)
        os.environ.update(s3.env, LAKECURATE_STATE_DIR=str(work / "state"))
        bucket = s3.bucket()
        data = work / "in"
        data.mkdir()
        docs = sum(write_input(data / f"part{i}.jsonl", args.mb // 8, seed=i)[1] for i in range(8))
        cfg = work / "lakecurate.toml"
        cfg.write_text(
            f'preset = "minimal"\n\n[ingest]\nchunk_size = "{args.chunk_mb}MiB"\n\n'
            "[dedup]\nexact = true\n\n[near_dedup]\nenabled = true\n"
        )
        os.environ["PYTHONPATH"] = str(REPO)  # for the cluster's worker processes
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for _ in range(2):
                cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            on_ray = ["--executor", "ray", "--address", cluster.address]
            ways = {"local": ["--workers", "2"], "ray": on_ray, "s3": ["--workers", "2"]}
            ways["ray_s3"] = on_ray
            walls: dict[str, list[float]] = {w: [] for w in ways}
            prints = {}
            for run in range(args.runs):
                for way, extra in ways.items():
                    where = f"lake-{way}-{run}"
                    lake = f"s3://{bucket}/{where}" if "s3" in way else work / where
                    walls[way].append(ingest(data, lake, cfg, extra))
                    prints[way] = table_fingerprint(lake)
            trip = task_round_trip(cluster.address)
        finally:
            cluster.shutdown()
    for way, w in walls.items():
        result[way] = {
            "wall_seconds": [round(x, 1) for x in w],
            "median_wall_seconds": round(statistics.median(w), 1),
            "docs_per_second": round(docs / statistics.median(w)),
        }
    result.update(
        documents=docs,
        input_mb=args.mb,
        chunk_mb=args.chunk_mb,
        **{
            f"{way}_over_local": round(
                result[way]["median_wall_seconds"] / result["local"]["median_wall_seconds"], 2
            )
            for way in walls
            if way != "local"
        },
        tables_identical=len(set(prints.values())) == 1,
        ray_empty_task_round_trip_ms=round(trip * 1000, 2),
        loadavg_after=loadavg(),
    )
    print(json.dumps(result, indent=2))
    save(result, args.out)


if __name__ == "__main__":
    main()
