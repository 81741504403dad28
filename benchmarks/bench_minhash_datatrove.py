"""datatrove's full MinHash dedup beside lakecurate's near-dedup: same documents, one core.

Issue 6's target: the whole near-dedup at least 10x faster than datatrove on the same documents and
cores. Run: /work/venv/bin/python benchmarks/bench_minhash_datatrove.py [--repeat 3]
Writes benchmarks/results/bench_minhash_datatrove.json (``--out`` to change) and prints it.

datatrove runs in its own virtualenv (``--dt-python``, default /work/venv-dt-minhash/bin/python),
made with::

    python3 -m venv /work/venv-dt-minhash
    /work/venv-dt-minhash/bin/pip install datatrove==0.10.1 tokenizers 'xxhash<4' regex spacy

(its dedup package imports ``tokenizers``, its text normalisation ``regex``, its English word
tokenizer is spaCy's, and its ``processing`` extra pins ``xxhash<4``: xxhash 4 no longer hashes a
``str``, which stage 1 passes). The benchmark exits 0 with a note when the data or that interpreter
is absent.

datatrove runs its four stages, as its ``examples/minhash_deduplication.py`` does, each with a
``LocalPipelineExecutor`` and ``workers=1`` (one core; the buckets stage has one task per bucket,
run one after the other):

1. ``MinhashDedupSignature`` (tasks=1): shingles, signatures, one sorted file per bucket;
2. ``MinhashDedupBuckets`` (tasks=num_buckets): duplicate pairs per bucket;
3. ``MinhashDedupCluster`` (tasks=1): union-find over the pairs, ``.remove`` files;
4. ``MinhashDedupFilter`` (tasks=1): drops the removed documents from the stream.

The documents are handed to stages 1 and 4 from memory (the same 35,424 texts, in file order), so
reading and parsing JSONL is in neither tool's time; datatrove's intermediate files go to a
temporary directory on the local disk (that I/O is part of its design and of its time).

Layouts: ``16x8`` (16 buckets x 8 hashes = 128 permutations, 5-grams: lakecurate's defaults) and
``14x8`` (datatrove's defaults: 112 permutations, 5-grams). datatrove has no verification of
candidates (a shared bucket is a duplicate pair) and clusters by connected components; the
document kept is the union-find root (union by size), not the first. Its word tokenizer is chosen
per pipeline by language; the corpus is mostly English with some French and Chinese, and the run
uses ``language="en"`` (its default) for all documents.

lakecurate is run in the same session, turn about with datatrove (the same child as
``bench_minhash.py``; the ``[near_dedup]`` defaults unless ``--num-perm``, ``--link``, ``--unit``
or ``--verify-on`` say otherwise; the old defaults: ``--link any --unit auto --verify-on
signature``), so the
ratio ``datatrove seconds / lakecurate seconds`` compares runs made under the same machine load.
Quality is scored exactly as in ``bench_minhash.py``. Times are medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "neardup"
RESULTS = ROOT / "benchmarks" / "results" / "bench_minhash_datatrove.json"
DT_PYTHON = Path("/work/venv-dt-minhash/bin/python")
LAYOUTS = {"16x8": (16, 8), "14x8": (14, 8)}


# -- the child, run by the datatrove interpreter (imports nothing from lakecurate) ---------------
def datatrove_child(data: Path, layout: str, out: Path, limit: int | None) -> None:
    import struct

    from datatrove.data import Document
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.utils.hashing import HashConfig
    from loguru import logger

    logger.remove()  # its progress logging to stderr is not what is measured
    os.environ.setdefault("TQDM_DISABLE", "1")
    texts = []
    with gzip.open(data / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for n, line in enumerate(f):
            if limit is not None and n >= limit:
                break
            texts.append(json.loads(line)["text"])

    def documents(_data: Any = None, rank: int = 0, world_size: int = 1) -> Any:
        for i, text in enumerate(texts):
            yield Document(text=text, id=str(i))

    kept: list[int] = []

    def collect(data: Any, rank: int = 0, world_size: int = 1) -> Any:
        for doc in data:
            kept.append(int(doc.id))
            yield doc

    buckets, rows = LAYOUTS[layout]
    config = MinhashConfig(
        n_grams=5,
        num_buckets=buckets,
        hashes_per_bucket=rows,
        seed=1,
        hash_config=HashConfig(precision=64),
    )
    tmp = Path(tempfile.mkdtemp(prefix="dt-minhash-"))
    try:

        def stage(pipeline: list[Any], tasks: int, name: str) -> float:
            t0 = time.perf_counter()
            LocalPipelineExecutor(
                pipeline=pipeline, tasks=tasks, workers=1, logging_dir=str(tmp / "logs" / name)
            ).run()
            return time.perf_counter() - t0

        times = {
            "seconds_signatures": stage(
                [
                    documents,
                    MinhashDedupSignature(
                        output_folder=str(tmp / "sigs"), config=config, language="en"
                    ),
                ],
                1,
                "sigs",
            ),
            "seconds_buckets": stage(
                [
                    MinhashDedupBuckets(
                        input_folder=str(tmp / "sigs"),
                        output_folder=str(tmp / "buckets"),
                        config=config,
                    )
                ],
                config.num_buckets,
                "buckets",
            ),
            "seconds_cluster": stage(
                [
                    MinhashDedupCluster(
                        input_folder=str(tmp / "buckets"),
                        output_folder=str(tmp / "remove"),
                        config=config,
                        save_cluster_id=True,
                    )
                ],
                1,
                "cluster",
            ),
            "seconds_filter": stage(
                [documents, MinhashDedupFilter(input_folder=str(tmp / "remove")), collect],
                1,
                "filter",
            ),
        }
        # Labels for scoring: doc index -> index of the kept member of its cluster.
        cluster_of: dict[int, int] = {}
        path = tmp / "remove" / "000000.clusters"
        if path.exists():
            raw = path.read_bytes()
            for doc, cid in struct.iter_unpack("<2I", raw):
                cluster_of[doc] = cid
        kept_set = set(kept)
        kept_of_cluster = {cid: doc for doc, cid in cluster_of.items() if doc in kept_set}
        labels = [
            kept_of_cluster[cluster_of[i]] if i in cluster_of else i for i in range(len(texts))
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    times["seconds_lsh"] = (
        times["seconds_buckets"] + times["seconds_cluster"] + times["seconds_filter"]
    )
    times["seconds_total"] = times["seconds_signatures"] + times["seconds_lsh"]
    out.write_text(
        json.dumps(
            {
                **times,
                "labels": labels,
                "kept": len(kept),
                "config": {
                    "n_grams": 5,
                    "num_buckets": buckets,
                    "hashes_per_bucket": rows,
                    "num_perm": buckets * rows,
                    "hash": "xxhash 64",
                    "language": "en",
                    "verify": False,
                },
            }
        ),
        encoding="utf-8",
    )


def run_datatrove(args: argparse.Namespace, layout: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [
            str(args.dt_python),
            __file__,
            "--_child",
            layout,
            str(out),
            "--data",
            str(args.data),
        ]
        if args.limit:
            cmd += ["--limit", str(args.limit)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"datatrove {layout} failed")
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        result["peak_rss_mib"] = usage.ru_maxrss / 1024
        return result


def dt_version(python: Path) -> str | None:
    out = subprocess.run(
        [
            str(python),
            "-c",
            "from importlib.metadata import version as v;print(v('datatrove'), v('spacy'))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or None


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--limit", type=int, default=None, help="only the first N documents")
    ap.add_argument("--layouts", default="16x8,14x8")
    ap.add_argument("--dt-python", type=Path, default=DT_PYTHON)
    ap.add_argument("--no-lakecurate", action="store_true", help="datatrove only")
    ap.add_argument("--num-perm", type=int, default=128, help="lakecurate's num_perm")
    sys.path.insert(0, str(ROOT))  # here, not at the top: the datatrove child runs this file too
    from lakecurate.config import NEAR_LINKS, NEAR_UNITS, NEAR_VERIFY_ON, NearDedupConfig

    defaults = NearDedupConfig()
    ap.add_argument(
        "--link",
        choices=NEAR_LINKS,
        default=defaults.link,
        help="lakecurate's clustering rule ([near_dedup].link)",
    )
    ap.add_argument("--unit", choices=NEAR_UNITS, default=defaults.unit, help="lakecurate's unit")
    ap.add_argument(
        "--verify-on",
        choices=NEAR_VERIFY_ON,
        default=defaults.verify_on,
        help="what lakecurate's verification compares ([near_dedup].verify_on)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--dump-labels",
        type=Path,
        default=None,
        help="write each tool's labels (index of the kept document) here, for analysis",
    )
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        datatrove_child(args.data, args._child[0], Path(args._child[1]), args.limit)
        return
    if not (args.data / "corpus.jsonl.gz").exists():
        print(
            f"bench_minhash_datatrove: {args.data} not found; nothing to measure (see SOURCES.md)"
        )
        return
    if not args.dt_python.exists():
        print(f"bench_minhash_datatrove: {args.dt_python} not found; see the module docstring")
        return
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_minhash as bm

    ids, texts = bm.load_corpus(args.data, args.limit)
    gold = bm.gold_pairs(args.data)
    lc_args = argparse.Namespace(
        threshold=0.8,
        num_perm=args.num_perm,
        link=args.link,
        unit=args.unit,
        verify_on=args.verify_on,
        data=args.data,
        limit=args.limit,
    )
    layouts = [x for x in args.layouts.split(",") if x]
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _ in range(args.repeat):  # turn about, so background load hits both alike
        if not args.no_lakecurate:
            runs["lakecurate"].append(bm.run_child("lakecurate", lc_args))
        for layout in layouts:
            runs[f"datatrove_{layout}"].append(run_datatrove(args, layout))
    rows: dict[str, Any] = {}
    for tool, results in runs.items():
        row = bm.summarise(results, ids, texts, gold, args.data, 0.8)
        row["seconds_total_runs"] = [round(r["seconds_total"], 3) for r in results]
        if args.dump_labels:
            args.dump_labels.mkdir(parents=True, exist_ok=True)
            (args.dump_labels / f"{tool}.json").write_text(
                json.dumps(results[0]["labels"]), encoding="utf-8"
            )
        row["version"] = "dev" if tool == "lakecurate" else dt_version(args.dt_python)
        rows[tool] = row
    bm.add_speedups(rows)
    if "lakecurate" in rows:
        base = rows["lakecurate"]
        for tool, row in rows.items():
            if tool != "lakecurate":
                # the same ratio within each turn (both runs under the same load), and its median
                turns = [
                    d / lc
                    for d, lc in zip(
                        row["seconds_total_runs"], base["seconds_total_runs"], strict=True
                    )
                ]
                row["lakecurate_speedup_total_per_turn"] = [round(x, 1) for x in turns]
                row["lakecurate_speedup_total_median_of_turns"] = round(statistics.median(turns), 1)
    report = {
        "benchmark": "bench_minhash_datatrove",
        "docs": len(texts),
        "repeat": args.repeat,
        "threads": 1,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "command": " ".join(["benchmarks/bench_minhash_datatrove.py", *sys.argv[1:]]),
        "tools": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
