"""The cost of one group commit as the table's active files grow (issue 14, flat commit cost).

Run: /work/venv/bin/python benchmarks/bench_group_commits.py [--commits 130] [--files 128]
Writes benchmarks/results/bench_group_commits.json (``--out`` to change) and prints it.

A table is grown by ``--commits`` commits of ``--files`` add actions each (a group of 64 small
chunks names about 128 files), through ``DeltaStore.commit_files`` with an app transaction and
commitInfo like an ingest's, on two paths, each in its own process:
- ``delta-rs``: ``create_write_transaction`` on the kept handle, then ``update_incremental``
  (how every group commit was made before; forced here by refusing the log append);
- ``log append``: the commit file written by ``DeltaStore._append_log`` (a local table's
  group commits now).
The files are named, not written: a commit does not open them. Reported per path: the median
commit time of the first and the last tenth of the commits and their ratio, and the RSS.
Checkpoints (every 100 versions on both paths) are part of the commit that writes them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from common import each_in_own_process, loadavg, rss_mib, save, tenths

RESULTS = Path(__file__).resolve().parent / "results" / "bench_group_commits.json"
STATS = json.dumps({"numRecords": 2, "minValues": {"id": "a"}, "maxValues": {"id": "z"}})


def grow(path_name: str, commits: int, files: int, table: Path) -> dict[str, Any]:
    """Grow one table by ``commits`` group commits on ``path_name``; the per-commit figures."""
    from lakecurate.lake.delta import DeltaStore
    from lakecurate.types import DataFile

    store = DeltaStore(table)
    if path_name == "delta-rs":
        store._fast = False  # the path before: delta-rs makes every commit
    times: list[float] = []
    for seq in range(1, commits + 1):
        now_ms = time.time_ns() // 1_000_000
        group = [
            DataFile(
                f"kept=true/part-{seq:08d}-{i:04d}.parquet",
                1000,
                {"kept": "true"},
                now_ms,
                STATS,
                2,
            )
            for i in range(files)
        ]
        started = time.perf_counter()
        store.commit_files(group, seq, {"lakecurate.seq": str(seq)}, time.time_ns())
        times.append(time.perf_counter() - started)
    first, last = tenths(times)
    return {
        "path": path_name,
        "commits": commits,
        "files_per_commit": files,
        "first_tenth_median_ms": round(first * 1000, 1),
        "last_tenth_median_ms": round(last * 1000, 1),
        "last_over_first": round(last / first, 2),
        "slowest_ms": round(max(times) * 1000, 1),
        "rss_end_mib": round(rss_mib()),
        "version": store.version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=130)
    parser.add_argument("--files", type=int, default=128)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one path, print JSON
    parser.add_argument("--table", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(grow(args.one, args.commits, args.files, args.table)))
        return
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = each_in_own_process(
            __file__,
            ("delta-rs", "log append"),
            ["--commits", str(args.commits), "--files", str(args.files)],
            Path(tmp),
        )
    save(
        {
            "benchmark": "bench_group_commits",
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
            "results": results,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
