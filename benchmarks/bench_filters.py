"""Filter throughput on ../shared/data/real/: documents/s and MB/s per step and for the stage.

Run: /work/venv/bin/python benchmarks/bench_filters.py [--data ../shared/data/real] [--threads 1]
Each step runs alone over every document (so its speed does not depend on what earlier steps
dropped); "stage" is the whole configured pipeline as the worker runs it (normalise, all steps,
hash, within-chunk dedup). Writes benchmarks/results/bench_filters.json. datatrove agreement is
not measured here yet (see docs/filters.md).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lakecurate import config, engine, filters

STEPS = ["utf8", "length", "gopher_quality", "gopher_repetition", "c4", "fineweb", "pii",
         "langid"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2]
                    / "shared" / "data" / "real")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results"
                    / "bench_filters.json")
    args = ap.parse_args()
    if not args.data.is_dir():
        print(f"skipped: {args.data} not found")
        return
    con = engine.connect(threads=args.threads)
    filters.install(con)
    records = con.sql(
        "SELECT row_number() OVER () AS source_line, 'doc' || source_line AS id, true AS id_given,"
        " text, NULL::VARCHAR AS meta, NULL::BLOB AS raw, NULL::VARCHAR AS kind,"
        " NULL::VARCHAR AS error FROM read_json($g, columns := {text: 'VARCHAR'})",
        params={"g": str(args.data / "*.jsonl.gz")}).to_arrow_table()
    con.register("records", records)
    n = records.num_rows
    mb = sum(len(t.encode()) for t in records["text"].to_pylist()) / 1e6
    results: dict[str, dict[str, float]] = {}

    def run(name: str, data: dict[str, object]) -> None:
        cfg = config.from_dict(data)
        p = filters.build(cfg.filters)
        q = (f"WITH normalised AS ({engine.q('worker.normalise')}), {p.sql} "
             f"SELECT * FROM ({engine.q('worker.decide')})")
        params = {**p.params, "exact": True, "chunk_key": "k", "source_path": "p",
                  "input_sha256": "s", "run_id": "r", "config_hash": "c"}
        t0 = time.perf_counter()
        out = con.sql(q, params=params).to_arrow_table()
        secs = time.perf_counter() - t0
        dropped = sum(d for _, _, d in filters.funnel(p, out))
        results[name] = {"seconds": secs, "docs_per_s": n / secs, "mb_per_s": mb / secs,
                         "dropped": dropped}
        print(f"{name:20s} {secs:7.2f} s {n / secs:10,.0f} docs/s {mb / secs:7.2f} MB/s "
              f"dropped {dropped:6d}", flush=True)

    run("baseline (no filter)", {})
    for step in STEPS:
        run(step, {"filters": {"steps": [step]}})
    run("stage (all steps)", {"filters": {"steps": STEPS}})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"docs": n, "mb": mb, "threads": args.threads,
                                    "results": results}, indent=2))
    print(f"{n} documents, {mb:.1f} MB, threads={args.threads}")


if __name__ == "__main__":
    main()
