"""The datatrove side of benchmarks/bench_filters.py: run datatrove's filters over the same texts.

Run with the Python of a separate virtual environment that has datatrove (and spaCy), not
lakecurate's: bench_filters.py starts it as a subprocess and exchanges files in a temp dir:

    /work/venv-datatrove/bin/python benchmarks/bench_filters_datatrove.py DOCS.jsonl OUT_DIR \
        [--processes 2]

DOCS.jsonl holds one {"id", "text"} object a line (the normalised text lakecurate's filters see).
Writes OUT_DIR/decisions.jsonl (per document, per filter: "keep" or datatrove's drop reason) and
OUT_DIR/timings.json:

- per filter: each of GopherQualityFilter, GopherRepetitionFilter, C4QualityFilter and
  FineWebQualityFilter alone over every document, in this one process, datatrove defaults
  (English word tokenizer = spaCy); its decisions are what the agreement is measured on;
- stage: the four filters and PIIFormatter chained with datatrove's own `PipelineStep.run`
  generators (each step sees what the previous kept), over `--processes` shards in as many
  processes, wall time from start to the last process done (no reader or writer in the timing).

Only this file imports datatrove; it needs nothing from lakecurate.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

FILTERS = ("gopher_quality", "gopher_repetition", "c4", "fineweb")


def make(name: str) -> Any:
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.formatters import PIIFormatter

    return {
        "gopher_quality": GopherQualityFilter,
        "gopher_repetition": GopherRepetitionFilter,
        "c4": C4QualityFilter,
        "fineweb": FineWebQualityFilter,
        "pii": PIIFormatter,
    }[name]()


def warm_up() -> None:
    """Load the spaCy tokenizer (once per process) outside the timed part."""
    from datatrove.utils.text import split_into_sentences, split_into_words

    split_into_words("Warm up the tokenizer. Twice.")
    split_into_sentences("Warm up the tokenizer. Twice.")


def read_docs(path: Path) -> list[tuple[str, str]]:
    with path.open(encoding="utf-8") as f:
        return [(d["id"], d["text"]) for d in map(json.loads, f)]


def decide(name: str, docs: list[tuple[str, str]]) -> tuple[list[str], float]:
    from datatrove.data import Document

    f = make(name)
    out = []
    t0 = time.perf_counter()
    for doc_id, text in docs:
        try:
            r = f.filter(Document(text=text, id=doc_id))
        except Exception as exc:  # ZeroDivisionError on degenerate texts: record, do not stop
            out.append(f"error:{type(exc).__name__}")
            continue
        keep, reason = r if isinstance(r, tuple) else (r, None)
        out.append("keep" if keep else (reason or "drop"))
    return out, time.perf_counter() - t0


def stage_shard(path: str, rank: int, world: int, q: Any, go: Any) -> None:
    from datatrove.data import Document

    warm_up()
    docs = [
        Document(text=t, id=i)
        for k, (i, t) in enumerate(read_docs(Path(path)))
        if k % world == rank
    ]
    steps = [make(n) for n in (*FILTERS, "pii")]
    q.put(("ready", rank))
    go.wait()  # every process starts its timed part at the same moment
    t0 = time.perf_counter()
    data: Any = iter(docs)
    for step in steps:
        data = step.run(data, rank, world)
    kept = sum(1 for _ in data)
    q.put(("done", rank, kept, time.perf_counter() - t0))


def run_stage(path: Path, processes: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q, go = ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=stage_shard, args=(str(path), r, processes, q, go))
        for r in range(processes)
    ]
    for p in procs:
        p.start()
    ready = 0
    while ready < processes:  # every process has loaded spaCy and its shard
        ready += q.get()[0] == "ready"
    t0 = time.perf_counter()
    go.set()
    done = [q.get() for _ in range(processes)]
    wall = time.perf_counter() - t0  # until the last process finished
    for p in procs:
        p.join()
    return {
        "processes": processes,
        "seconds": wall,
        "kept": sum(d[2] for d in done),
        "per_process_seconds": sorted(d[3] for d in done),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("docs", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument(
        "--processes",
        type=int,
        default=0,
        help="also time the chained stage on this many processes (0: skip)",
    )
    ap.add_argument("--skip-per-filter", action="store_true")
    args = ap.parse_args()
    from importlib.metadata import version

    docs = read_docs(args.docs)
    warm_up()
    timings: dict[str, Any] = {
        "datatrove": version("datatrove"),
        "docs": len(docs),
        "python": sys.version.split()[0],
        "filters": {},
    }
    if not args.skip_per_filter:
        decisions: dict[str, list[str]] = {}
        for name in FILTERS:
            decisions[name], secs = decide(name, docs)
            timings["filters"][name] = {"seconds": secs, "docs_per_s": len(docs) / secs}
            print(f"datatrove {name:18s} {secs:8.2f} s {len(docs) / secs:9,.0f} docs/s", flush=True)
        with (args.out / "decisions.jsonl").open("w", encoding="utf-8") as f:
            for k, (doc_id, _) in enumerate(docs):
                f.write(json.dumps({"id": doc_id, **{n: decisions[n][k] for n in FILTERS}}) + "\n")
    if args.processes:
        st = run_stage(args.docs, args.processes)
        timings["stage"] = {**st, "docs_per_s": len(docs) / st["seconds"]}
        print(
            f"datatrove stage ({args.processes} processes) {st['seconds']:8.2f} s "
            f"{len(docs) / st['seconds']:9,.0f} docs/s",
            flush=True,
        )
    (args.out / "timings.json").write_text(json.dumps(timings, indent=2))


if __name__ == "__main__":
    main()
