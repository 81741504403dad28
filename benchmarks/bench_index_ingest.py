"""What share of a 1,000-chunk ingest the membership index costs (issue 4's target: under 5%).

Generates a corpus with the project's seeded generator, ingests it with chunks small enough to
give about --chunks chunks, and reports the time spent in the index (Bloom lookups, the batched
DuckDB joins for "maybe" keys, and index writes, as counted by ``MembershipIndex.stats``) against
the whole ingest. Median of --repeat runs. Writes benchmarks/results/bench_index_ingest.json.

    python benchmarks/bench_index_ingest.py [--chunks 1000] [--scale 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1000, help="about how many chunks")
    ap.add_argument("--scale", type=float, default=3.0, help="generator scale")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                    "bench_index_ingest.json")
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
            started = time.perf_counter()
            report = lake.ingest([corpus], config=cfg, workers=args.workers)
            wall = time.perf_counter() - started
            runs.append({"chunks": report.chunks_committed, "documents": report.rows_in,
                         "wall_seconds": round(wall, 3),
                         "index_seconds": round(report.index["seconds"], 4),
                         "index_share": round(report.index["seconds"] / wall, 4),
                         "lookups": report.index["lookups"], "maybe": report.index["maybe"],
                         "tier2_queries": report.index["tier2_queries"]})
            print(json.dumps(runs[-1]), flush=True)
    result = {"benchmark": "bench_index_ingest", "command": " ".join(["python", *os.sys.argv]),
              "chunk_size": chunk_size, "runs": runs,
              "median_index_share": statistics.median(r["index_share"] for r in runs),
              "median_wall_seconds": statistics.median(r["wall_seconds"] for r in runs),
              "target": "index share under 0.05"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_name(args.out.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp_out, args.out)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
