"""Near-duplicate removal by measurement: quality, speed and memory of lakecurate's MinHash + LSH
beside datasketch and rensa on the same documents, one core each (issue 6).

Run: /work/venv/bin/python benchmarks/bench_minhash.py [--repeat 3] [--threshold 0.8]
Data: ../shared/data/neardup/ (35,424 documents with injected near duplicates and ground truth;
see ../shared/data/SOURCES.md), or ``--data DIR`` made by ``../shared/tools/make_neardups.py
build`` (docs/near-dedup.md has the commands of the sets measured); the benchmark exits 0 with a
note when it is absent. Writes benchmarks/results/bench_minhash.json (``--out`` to change) and
prints it. lakecurate runs with the ``[near_dedup]`` defaults unless ``--link``, ``--unit``,
``--verify-on`` or ``--num-perm`` say otherwise.

Every tool runs in its own child process (peak RSS is that child's ``ru_maxrss``), takes the
documents in file order and applies the same rule: a document joins the smallest cluster among the
earlier documents its LSH finds (first seen wins); with ``--link kept`` lakecurate alone uses its
stricter rule instead (join only a cluster whose kept document is itself near, see
docs/near-dedup.md). ``--num-perm`` applies to every tool. Rows:

- ``lakecurate``: signatures with ``bands.chunk_signatures`` (numpy, one thread), then
  ``NearDedupIndex.match_chunk``/``add_chunk`` over 8 chunks in DuckDB (threads=1), verified.
  Also timed, signatures only: the DuckDB Arrow UDF (``minhash_signature``), the Arrow UDF over
  DuckDB ``hash()`` token lists, and a row-at-a-time Python UDF calling the same numpy code.
- ``datasketch``: ``MinHash.update_batch`` on the shingles, ``MinHashLSH`` query then insert.
- ``rensa``: ``RMinHash.update`` on the shingles, ``RMinHashLSH`` query then insert.
  Peers get the same shingles: word 5-grams of lower-cased ``\\w+`` tokens (character 5-grams for
  CJK text), made in Python, which is included in their time as it is the cost of using them.

Quality, three ways:
- ``clusters``: the data set's ``make_neardups.py score`` on whole clusters (every pair in a true
  cluster, down to Jaccard 0.5) and with ``--threshold`` (only true pairs of measured J >= 0.8);
  the latter counts every predicted within-cluster pair, so even a perfect clustering of all
  J >= 0.8 pairs scores precision 0.92 on it (``oracle`` in the output): a cluster holds pairs of
  variants that are each close to their origin but not to each other;
- ``decisions``: what dedup actually does: precision = share of dropped documents whose exact
  Jaccard (the data set's own shingles) to the document they are a duplicate of is >= the
  threshold; recall = share of documents with an earlier true partner of J >= threshold that were
  dropped.
Each time is the median of ``--repeat`` runs (quality does not vary between runs).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lakecurate.config import (  # noqa: E402  (after the path: the tree's code, not an install)
    NEAR_LINKS,
    NEAR_UNITS,
    NEAR_VERIFY_ON,
    NearDedupConfig,
)

DATA = ROOT.parent / "shared" / "data" / "neardup"
TOOL = ROOT.parent / "shared" / "tools" / "make_neardups.py"
RESULTS = ROOT / "benchmarks" / "results" / "bench_minhash.json"
CHUNKS = 8
WORD = re.compile(r"\w+")


def open_data(data: Path, name: str) -> Any:
    """A file of a benchmark folder, gzipped (the shared set) or as ``make_neardups.py build``
    writes it."""
    if (data / f"{name}.gz").exists():
        return gzip.open(data / f"{name}.gz", "rt", encoding="utf-8")
    return (data / name).open(encoding="utf-8")


def load_corpus(data: Path, limit: int | None) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with open_data(data, "corpus.jsonl") as f:
        for line in itertools.islice(f, limit):
            rec = json.loads(line)
            ids.append(str(rec["id"]))
            texts.append(rec["text"])
    return ids, texts


def tool_module() -> Any:
    spec = importlib.util.spec_from_file_location("make_neardups", TOOL)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def python_shingles(texts: Sequence[str]) -> list[list[str]]:
    """The peers' input: the data set's own tokenisation, 5-grams joined by a space."""
    doc_unit = tool_module().doc_unit
    out = []
    for text in texts:
        unit = doc_unit(text, "auto")
        toks = (
            [c.lower() for c in text if not c.isspace()]
            if unit == "char"
            else WORD.findall(text.lower())
        )
        if len(toks) < 5:
            out.append([" ".join(toks)] if toks else [])
        else:
            out.append([" ".join(toks[i : i + 5]) for i in range(len(toks) - 4)])
    return out


def sequential_labels(n: int, query: Callable[[int], list[int]]) -> list[int | None]:
    """First seen wins, as lakecurate does it: the smallest label among earlier matches."""
    label: list[int | None] = []
    for i in range(n):
        found = [label[j] for j in query(i)]
        label.append(min([i, *(x for x in found if x is not None)]))
    return label


# -- the tools, each run in a child ---------------------------------------------------------------
def run_lakecurate(ids: list[str], texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa

    from lakecurate import engine
    from lakecurate.config import NearDedupConfig
    from lakecurate.steps.near import minhash as mh
    from lakecurate.steps.near import signatures
    from lakecurate.store import band_index

    cfg = NearDedupConfig(
        threshold=args.threshold,
        num_perm=args.num_perm,
        link=args.link,
        unit=args.unit,
        verify_on=args.verify_on,
    )
    mh._table()  # the per-process lookup table, built once (about 0.1 s): not per document
    t0 = time.perf_counter()
    sig, bands = signatures.chunk_signatures(texts, cfg)
    t_sig = time.perf_counter() - t0
    con = engine.connect(threads=1)
    idx = band_index.NearDedupIndex(con, cfg)
    idx.create_schema()
    t1 = time.perf_counter()
    parts = np.array_split(np.arange(len(texts)), CHUNKS)
    results = []
    for k, rows in enumerate(parts):
        table = band_index.chunk_table(
            band_index.make_doc_seq(k, np.arange(len(rows))),
            [ids[i] for i in rows],
            sig.take(rows),
            bands.take(rows),
        )
        matched = idx.match_chunk(table)
        idx.add_chunk(table, matched)
        results.append(matched)
    t_lsh = time.perf_counter() - t1
    res = pa.concat_tables(results)
    starts = np.concatenate(([0], np.cumsum([len(p) for p in parts])[:-1]))
    labels: list[int | None] = []
    for c in res["cluster_id"].to_pylist():
        if c is None:
            labels.append(None)
        else:
            ordinal, row = band_index.split_doc_seq(c)
            labels.append(int(starts[ordinal]) + row)
    out: dict[str, Any] = {
        "seconds_signatures": t_sig,
        "seconds_lsh": t_lsh,
        "seconds_total": t_sig + t_lsh,
        "labels": labels,
        "config": mh.describe(cfg),
    }
    con.close()
    return out


def run_datasketch(ids: list[str], texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    from datasketch import MinHash, MinHashLSH

    t0 = time.perf_counter()
    shingles = python_shingles(texts)
    sigs = []
    for sh in shingles:
        m = MinHash(num_perm=args.num_perm, seed=1)
        m.update_batch([s.encode("utf-8") for s in sh])
        sigs.append(m)
    t_sig = time.perf_counter() - t0
    t1 = time.perf_counter()
    index = MinHashLSH(threshold=args.threshold, num_perm=args.num_perm)
    empty = [not sh for sh in shingles]

    def query(i: int) -> list[int]:
        if empty[i]:
            return []
        found = [int(k) for k in index.query(sigs[i])]
        index.insert(str(i), sigs[i])
        return found

    labels = sequential_labels(len(texts), query)
    t_lsh = time.perf_counter() - t1
    return {
        "seconds_signatures": t_sig,
        "seconds_lsh": t_lsh,
        "seconds_total": t_sig + t_lsh,
        "labels": [None if e else x for x, e in zip(labels, empty, strict=True)],
    }


def run_rensa(ids: list[str], texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    from rensa import RMinHash, RMinHashLSH

    from lakecurate.steps.near import minhash as mh

    t0 = time.perf_counter()
    shingles = python_shingles(texts)
    sigs = []
    for sh in shingles:
        m = RMinHash(num_perm=args.num_perm, seed=1)
        m.update(sh)
        sigs.append(m)
    t_sig = time.perf_counter() - t0
    t1 = time.perf_counter()
    # rensa wants bands to divide num_perm: the best such layout under lakecurate's weighting.
    bands = min(
        (b for b in range(1, args.num_perm + 1) if args.num_perm % b == 0),
        key=lambda b: sum(
            w * a
            for w, a in zip(
                (0.2, 0.8), mh._areas(args.threshold, b, args.num_perm // b), strict=True
            )
        ),
    )
    index = RMinHashLSH(threshold=args.threshold, num_perm=args.num_perm, num_bands=bands)
    empty = [not sh for sh in shingles]

    def query(i: int) -> list[int]:
        if empty[i]:
            return []
        found = [
            int(k) for k in index.query(sigs[i]) if sigs[i].jaccard(sigs[int(k)]) >= args.threshold
        ]
        index.insert(i, sigs[i])
        return found

    labels = sequential_labels(len(texts), query)
    t_lsh = time.perf_counter() - t1
    return {
        "seconds_signatures": t_sig,
        "seconds_lsh": t_lsh,
        "seconds_total": t_sig + t_lsh,
        "labels": [None if e else x for x, e in zip(labels, empty, strict=True)],
    }


TOOLS: dict[str, Callable[[list[str], list[str], argparse.Namespace], dict[str, Any]]] = {
    "lakecurate": run_lakecurate,
    "datasketch": run_datasketch,
    "rensa": run_rensa,
}
DISTS = {"lakecurate": "duckdb", "datasketch": "datasketch", "rensa": "rensa"}


def child(tool: str, out: Path, args: argparse.Namespace) -> None:
    ids, texts = load_corpus(args.data, args.limit)
    result = TOOLS[tool](ids, texts, args)
    out.write_text(json.dumps(result), encoding="utf-8")


def run_child(tool: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [
            sys.executable,
            __file__,
            "--_child",
            tool,
            str(out),
            "--threshold",
            str(args.threshold),
            "--num-perm",
            str(args.num_perm),
            "--data",
            str(args.data),
            "--link",
            args.link,
            "--unit",
            args.unit,
            "--verify-on",
            args.verify_on,
        ]
        if args.limit:
            cmd += ["--limit", str(args.limit)]
        proc = subprocess.Popen(cmd)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{tool} failed with exit code {proc.returncode}")
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        result["peak_rss_mib"] = usage.ru_maxrss / 1024
        return result


# -- quality --------------------------------------------------------------------------------------
def score_clusters(
    ids: list[str], labels: list[int | None], data: Path, threshold: float | None
) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i, lab in enumerate(labels):
            f.write(
                json.dumps({"id": ids[i], "cluster_id": f"c{lab if lab is not None else i}"}) + "\n"
            )
        pred = f.name
    try:
        extra = ["--threshold", str(threshold)] if threshold is not None else []
        out = subprocess.run(
            [sys.executable, str(TOOL), "score", str(data), pred, *extra],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        os.unlink(pred)
    scored: dict[str, Any] = json.loads(out.stdout)
    return scored


def gold_pairs(data: Path) -> dict[tuple[str, str], float]:
    pairs = {}
    with open_data(data, "pairs.tsv") as f:
        next(f)
        for line in f:
            a, b, j = line.split("\t")[:3]
            pairs[(a, b) if a < b else (b, a)] = float(j)
    return pairs


def score_decisions(
    ids: list[str],
    texts: list[str],
    labels: list[int | None],
    gold: dict[tuple[str, str], float],
    threshold: float,
) -> dict[str, Any]:
    tool = tool_module()
    dropped = [i for i, lab in enumerate(labels) if lab is not None and lab != i]
    cache: dict[int, set[int]] = {}

    def sh(i: int) -> set[int]:
        if i not in cache:
            cache[i] = tool.shingles(texts[i], tool.doc_unit(texts[i], "auto"), 5)
        return cache[i]

    good = sum(1 for i in dropped if tool.jaccard(sh(i), sh(labels[i])) >= threshold)  # type: ignore[arg-type]
    pos = {d: i for i, d in enumerate(ids)}
    should = set()
    for (a, b), j in gold.items():
        if j >= threshold and a in pos and b in pos:
            should.add(max(pos[a], pos[b]))
    hit = sum(1 for i in should if labels[i] is not None and labels[i] != i)
    p = good / len(dropped) if dropped else 1.0
    r = hit / len(should) if should else 1.0
    # Chinese recall: the documents the data set itself shingles by character (CJK-heavy).
    cjk = [i for i in should if tool.doc_unit(texts[i], "auto") == "char"]
    cjk_hit = sum(1 for i in cjk if labels[i] is not None and labels[i] != i)
    return {
        "dropped": len(dropped),
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(2 * p * r / (p + r) if p + r else 0.0, 4),
        "should_drop": len(should),
        "wrong_drops": len(dropped) - good,
        "cjk_should_drop": len(cjk),
        "cjk_recall": round(cjk_hit / len(cjk), 4) if cjk else None,
    }


def oracle(
    ids: list[str], gold: dict[tuple[str, str], float], threshold: float
) -> dict[str, dict[str, float]]:
    """The pair score (``clusters_j``) of three clusterings made from the EXACT Jaccard of the
    ground truth (no estimation error, the data set's own shingles), documents in file order:

    - ``components``: connected components of the true J >= threshold pairs (transitive closure):
      recall 1 by construction, precision lost to pairs of variants that are each near the origin
      but not near each other;
    - ``star_first_kept``: a document joins the earliest kept document it is near (what dedup with
      link = "kept" does, with exact Jaccard): clusters are stars around their kept document;
    - ``clique_first_fit``: a document joins the earliest cluster it is near to EVERY member of
      (complete linkage): precision 1 by construction, recall lost where a variant is not near all.
    """
    pos = {d: i for i, d in enumerate(ids)}
    true = {k for k, j in gold.items() if j >= threshold and k[0] in pos and k[1] in pos}
    near: dict[int, set[int]] = defaultdict(set)
    for a, b in true:
        i, k = sorted((pos[a], pos[b]))
        near[k].add(i)

    def scored(label: list[int]) -> dict[str, float]:
        members = defaultdict(list)
        for i, lab in enumerate(label):
            members[lab].append(ids[i])
        pred = {
            p for m in members.values() if len(m) > 1 for p in itertools.combinations(sorted(m), 2)
        }
        tp = len(pred & true)
        p, r = tp / len(pred), tp / len(true)
        return {
            "precision": round(p, 4),
            "recall": round(r, 4),
            "f1": round(2 * p * r / (p + r), 4),
            "pred_pairs": len(pred),
        }

    parent = list(range(len(ids)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for k, earlier in near.items():
        for i in earlier:
            parent[find(k)] = find(i)
    components = [find(i) for i in range(len(ids))]
    star = list(range(len(ids)))
    clique = list(range(len(ids)))
    members: dict[int, list[int]] = defaultdict(list)
    for d in range(len(ids)):
        star[d] = min([d, *(star[e] for e in near[d] if star[e] == e)])
        for c in sorted({clique[e] for e in near[d]}):
            if all(m in near[d] for m in members[c]):
                clique[d] = c
                break
        members[clique[d]].append(d)
    return {
        "components": scored(components),
        "star_first_kept": scored(star),
        "clique_first_fit": scored(clique),
    }


def summarise(
    results: list[dict[str, Any]],
    ids: list[str],
    texts: list[str],
    gold: Any,
    data: Path,
    threshold: float,
) -> dict[str, Any]:
    """One tool's row: median timings, documents/s, peak RSS, and the quality of its labels."""
    timing_keys = [k for k in results[0] if k.startswith("seconds_")]
    row: dict[str, Any] = {
        k: round(statistics.median(r[k] for r in results), 3) for k in timing_keys
    }
    row["peak_rss_mib"] = round(statistics.median(r["peak_rss_mib"] for r in results), 1)
    row["docs_per_s_signatures"] = round(len(texts) / row["seconds_signatures"])
    row["docs_per_s_total"] = round(len(texts) / row["seconds_total"])
    labels = results[0]["labels"]
    row["quality"] = {
        "clusters_all": score_clusters(ids, labels, data, None),
        f"clusters_j{threshold}": score_clusters(ids, labels, data, threshold),
        f"decisions_j{threshold}": score_decisions(ids, texts, labels, gold, threshold),
    }
    if "config" in results[0]:
        row["config"] = results[0]["config"]
    return row


def add_speedups(rows: dict[str, Any]) -> None:
    """How many times longer each other tool took than lakecurate (median timings)."""
    base = rows.get("lakecurate")
    if base is None:
        return
    for tool, row in rows.items():
        if tool != "lakecurate":
            row["lakecurate_speedup_signatures"] = round(
                row["seconds_signatures"] / base["seconds_signatures"], 2
            )
            row["lakecurate_speedup_total"] = round(row["seconds_total"] / base["seconds_total"], 2)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--limit", type=int, default=None, help="only the first N documents")
    ap.add_argument("--tools", default="lakecurate,datasketch,rensa")
    defaults = NearDedupConfig()
    ap.add_argument(
        "--link",
        choices=NEAR_LINKS,
        default=defaults.link,
        help="lakecurate's clustering rule (NearDedupIndex link): 'any' joins the "
        "smallest cluster among earlier neighbours (chains), 'kept' only a "
        "cluster whose kept document is itself near",
    )
    ap.add_argument("--unit", choices=NEAR_UNITS, default=defaults.unit, help="lakecurate's unit")
    ap.add_argument(
        "--verify-on",
        choices=NEAR_VERIFY_ON,
        default=defaults.verify_on,
        help="what lakecurate's verification compares: the exact Jaccard of the shingle sets "
        "or the signatures' estimate",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        child(args._child[0], Path(args._child[1]), args)
        return
    if not any((args.data / n).exists() for n in ("corpus.jsonl.gz", "corpus.jsonl")):
        print(f"bench_minhash: {args.data} not found; nothing to measure (see SOURCES.md)")
        return
    ids, texts = load_corpus(args.data, args.limit)
    gold = gold_pairs(args.data)
    tools = [t for t in args.tools.split(",") if t]
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    failed: set[str] = set()
    for _ in range(args.repeat):
        for tool in tools:  # tools take turns, so background load hits them alike
            if tool in failed:
                continue
            try:
                runs[tool].append(run_child(tool, args))
            except SystemExit as exc:
                print(f"bench_minhash: {exc} (is it installed?)", file=sys.stderr)
                failed.add(tool)
    rows: dict[str, Any] = {}
    for tool, results in runs.items():
        if not results:
            continue
        row = summarise(results, ids, texts, gold, args.data, args.threshold)
        try:
            row["version"] = metadata.version(DISTS[tool]) if tool != "lakecurate" else "dev"
        except metadata.PackageNotFoundError:
            row["version"] = None
        rows[tool] = row
    add_speedups(rows)
    report = {
        "benchmark": "bench_minhash",
        "docs": len(texts),
        "repeat": args.repeat,
        "threshold": args.threshold,
        "num_perm": args.num_perm,
        "link": args.link,
        "unit": args.unit,
        "verify_on": args.verify_on,
        "data": str(args.data),
        "threads": 1,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "command": " ".join(["benchmarks/bench_minhash.py", *sys.argv[1:]]),
        "oracle_clusters": oracle(ids, gold, args.threshold),
        "tools": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
