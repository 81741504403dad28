"""The cost of one chunk commit as the table grows (issue 14, flat commit cost).

Run: /work/venv/bin/python benchmarks/bench_commits.py [--commits 2000] [--rows 50]
Writes benchmarks/results/bench_commits.json (``--out`` to change) and prints it.

Two tables are grown commit by commit with the same rows (``bench_versions.rows``), each commit
carrying an app transaction and commitInfo like a lakecurate commit:
- ``write_deltalake``: the commit path before issue 14 (``write_deltalake`` on a kept handle);
- ``DeltaStore.append``: the commit path now (data files written by ``lake.files``, then
  ``create_write_transaction`` naming them, the handle brought forward incrementally).
For each: the median commit time of the first and the last tenth of the commits, their ratio,
the whole build time, and the process RSS before and after (each path runs in its own
process, so one's memory does not count against the other).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import each_in_own_process, rss_mib, tenths

RESULTS = Path(__file__).resolve().parent / "results" / "bench_commits.json"


def grow(path_name: str, commits: int, n_rows: int, table: Path) -> dict[str, Any]:
    """Grow one table by ``commits`` commits on ``path_name``; the per-commit figures."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    from benchmarks.bench_versions import rows
    from lakecurate.lake.delta import DeltaStore

    store = DeltaStore(table)
    before = rss_mib()
    times: list[float] = []
    dt: DeltaTable | None = None
    for i in range(commits):
        batch = rows(n_rows, i * n_rows)
        meta = {"lakecurate.chunk_key": f"c{i:08d}"}
        started = time.perf_counter()
        if path_name == "DeltaStore.append":
            store.append(batch, i + 1, meta)
        else:
            props = CommitProperties(
                app_transactions=[Transaction("lakecurate", i + 1)], custom_metadata=meta
            )
            target: Any = dt if dt is not None else str(table)
            write_deltalake(
                target, batch, mode="append", partition_by=["kept"], commit_properties=props
            )
            if dt is None:
                dt = DeltaTable(str(table))
        times.append(time.perf_counter() - started)
    first, last = tenths(times)
    return {
        "path": path_name,
        "commits": commits,
        "rows_per_commit": n_rows,
        "first_tenth_median_ms": round(first * 1000, 1),
        "last_tenth_median_ms": round(last * 1000, 1),
        "last_over_first": round(last / first, 2),
        "build_seconds": round(sum(times), 1),
        "rss_before_mib": round(before, 0),
        "rss_after_mib": round(rss_mib(), 0),
        "live_files": len(DeltaTable(str(table)).file_uris()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one path, print JSON
    parser.add_argument("--table", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(grow(args.one, args.commits, args.rows, args.table)))
        return
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = each_in_own_process(
            __file__,
            ("write_deltalake", "DeltaStore.append"),
            ["--commits", str(args.commits), "--rows", str(args.rows)],
            Path(tmp),
        )
    report = {
        "benchmark": "bench_commits",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "results": results,
        "speedup_last_tenth": round(
            results[0]["last_tenth_median_ms"] / results[1]["last_tenth_median_ms"], 2
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
