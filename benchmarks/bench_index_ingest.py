"""What share of a 1,000-chunk ingest the membership index costs (issue 4's target: under 5%).

Generates a corpus with the project's seeded generator, ingests it with chunks small enough to
give about --chunks chunks, and reports the time spent in the index (Bloom lookups, the batched
DuckDB joins for "maybe" keys, and index writes, as counted by ``MembershipIndex.stats``) against
the whole ingest, split into lookups and writes, with the index's milliseconds per committed
chunk. Median of --repeat runs. Writes benchmarks/results/bench_index_ingest.json with the git
commit, uncommitted files under lakecurate/ and sql/, and the load average around every run.

    python benchmarks/bench_index_ingest.py [--chunks 1000] [--scale 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from lakecurate import Lake

ROOT = Path(__file__).resolve().parents[1]


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen", ROOT / "examples" / "generate_corpus.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _git() -> dict[str, object]:
    def run(*cmd: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *cmd], check=False, capture_output=True, text=True
        ).stdout

    dirty = run("status", "--porcelain", "--", "lakecurate", "sql").splitlines()
    return {
        "commit": run("rev-parse", "HEAD").strip(),
        "uncommitted_changes_in_lakecurate_or_sql": [d[3:] for d in dirty if d.strip()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1000, help="about how many chunks")
    ap.add_argument("--scale", type=float, default=3.0, help="generator scale")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "bench_index_ingest.json"
    )
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        _generator().generate(corpus, seed=7, scale=args.scale)
        plain = sum(p.stat().st_size for p in corpus.glob("*.jsonl"))
        chunk_size = max(4096, plain // args.chunks)
        cfg = Path(tmp) / "lakecurate.toml"
        cfg.write_text(f"[ingest]\nchunk_size = {chunk_size}\nretry_backoff = 0.1\n")
        for i in range(args.repeat):
            lake = Lake.open(Path(tmp) / f"lake{i}")
            load_before = os.getloadavg()
            started = time.perf_counter()
            report = lake.ingest([corpus], config=cfg, workers=args.workers)
            wall = time.perf_counter() - started
            idx = report.index
            chunks = max(1, report.chunks_committed)
            runs.append(
                {
                    "chunks": report.chunks_committed,
                    "documents": report.rows_in,
                    "wall_seconds": round(wall, 3),
                    "index_seconds": round(idx["seconds"], 4),
                    "index_share": round(idx["seconds"] / wall, 4),
                    "index_ms_per_chunk": round(1000 * idx["seconds"] / chunks, 3),
                    "lookup_ms_per_chunk": round(1000 * idx.get("lookup_seconds", 0) / chunks, 3),
                    "write_ms_per_chunk": round(1000 * idx.get("write_seconds", 0) / chunks, 3),
                    "wall_ms_per_chunk": round(1000 * wall / chunks, 1),
                    "lookups": idx["lookups"],
                    "maybe": idx["maybe"],
                    "tier2_queries": idx["tier2_queries"],
                    "tier2_hits": idx["tier2_hits"],
                    "loadavg_before": [round(x, 2) for x in load_before],
                    "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                }
            )
            print(json.dumps(runs[-1]), flush=True)
    result = {
        "benchmark": "bench_index_ingest",
        "command": " ".join(["python", *os.sys.argv]),
        "chunk_size": chunk_size,
        "runs": runs,
        "median_index_share": statistics.median(r["index_share"] for r in runs),
        "median_wall_seconds": statistics.median(r["wall_seconds"] for r in runs),
        "median_index_ms_per_chunk": statistics.median(r["index_ms_per_chunk"] for r in runs),
        "cpus": os.cpu_count(),
        "git": _git(),
        "target": "index share under 0.05",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_name(args.out.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp_out, args.out)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
