"""Filter throughput and datatrove agreement on ../shared/data/real/ (docs/filters.md).

Run: /work/venv/bin/python benchmarks/bench_filters.py [--data ../shared/data/real]
         [--workers 2] [--datatrove ../venv-datatrove/bin/python | --no-datatrove]

- Each step alone over every document, one DuckDB thread (so a step's speed does not depend on
  what earlier steps dropped); "stage" is the whole pipeline as the worker runs it (normalise,
  all steps, hash, within-chunk dedup), "stage (datatrove's steps)" only the steps datatrove has
  (Gopher quality, Gopher repetition, C4, FineWeb, PII), both in the worker's order.
- `--workers N` also runs the stage in N processes (spawned, one thread each, every N-th
  document: the chunks of N workers); wall time until the last one is done.
- Where a Python with datatrove is found (a separate virtual environment), it runs
  benchmarks/bench_filters_datatrove.py on the same normalised texts (JSONL in a temp dir) and
  compares keep/drop per document for GopherQualityFilter, GopherRepetitionFilter,
  C4QualityFilter and FineWebQualityFilter (datatrove defaults, ours our defaults = the same
  published values), and the speeds: its filters one by one in one process, and its chained
  stage on 1 and on N processes.

Writes benchmarks/results/bench_filters.json (speeds) and bench_filters_agreement.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakecurate import config, engine
from lakecurate.steps.filters import pipeline as filters

STEPS = ["utf8", "length", "gopher_quality", "gopher_repetition", "c4", "fineweb", "pii", "langid"]
DT_STEPS = ["gopher_quality", "gopher_repetition", "c4", "fineweb", "pii"]
COMPARED = ["gopher_quality", "gopher_repetition", "c4", "fineweb"]
ROOT = Path(__file__).resolve().parents[1]


def load(con: Any, data: Path, shard: tuple[int, int] = (0, 1)) -> pa.Table:
    k, n = shard
    return con.sql(
        "SELECT * FROM (SELECT row_number() OVER () AS source_line, 'doc' || source_line AS id,"
        " true AS id_given, text, NULL::VARCHAR AS meta, NULL::BLOB AS raw,"
        " NULL::VARCHAR AS kind, NULL::VARCHAR AS error, "
        " regexp_extract(filename, '([^/]+)\\.jsonl\\.gz$', 1) AS src"
        " FROM read_json($g, columns := {text: 'VARCHAR'}, filename := true))"
        " WHERE source_line % $n = $k ORDER BY source_line",
        params={"g": str(data / "*.jsonl.gz"), "n": n, "k": k},
    ).to_arrow_table()


def stage_query(
    steps: list[str], cfg: config.Config | None = None
) -> tuple[filters.Pipeline, str, dict[str, Any]]:
    """The worker's query for these steps (or for a whole config's filters)."""
    if cfg is None:
        cfg = config.from_dict({"filters": {"steps": steps}} if steps else {})
    p = filters.build(cfg.filters)
    q = (
        f"WITH normalised AS ({engine.q('worker.normalise')}), {p.sql} "
        f"SELECT * FROM ({engine.q('worker.decide')})"
    )
    params = {
        **p.params,
        "exact": True,
        "chunk_key": "k",
        "source_path": "p",
        "input_sha256": "s",
        "run_id": "r",
        "config_hash": "c",
    }
    return p, q, params


def _shard(data: str, k: int, n: int, steps: list[str], q: Any, go: Any) -> None:
    con = engine.connect(threads=1)
    filters.install(con)
    con.register("records", load(con, Path(data), (k, n)))
    _, sql, params = stage_query(steps)
    q.put("ready")
    go.wait()
    t0 = time.perf_counter()
    con.sql(sql, params=params).to_arrow_table()
    q.put(time.perf_counter() - t0)


def run_workers(data: Path, n: int, steps: list[str]) -> float:
    ctx = mp.get_context("spawn")
    q, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_shard, args=(str(data), k, n, steps, q, go)) for k in range(n)]
    for p in procs:
        p.start()
    for _ in procs:
        q.get()
    t0 = time.perf_counter()
    go.set()
    for _ in procs:
        q.get()
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    return wall


def agreement(
    ours: dict[str, list[bool]],
    dt: list[dict[str, str]],
    src: list[str],
    details: dict[str, list[str | None]],
    langs: list[str],
) -> dict[str, Any]:
    """Per filter: agreement over every document, and over those language id finds English
    (datatrove's defaults are FineWeb English's; other languages get their own rules here)."""
    out: dict[str, Any] = {}
    n = len(dt)
    english = [k for k in range(n) if langs[k] == "en"]
    for name in COMPARED:
        en_agree = sum(ours[name][k] == (dt[k][name] != "keep") for k in english)
        agree, buckets = 0, Counter()
        examples: dict[tuple[str, str, str], list[str]] = {}
        for k in range(n):
            o_drop, d = ours[name][k], dt[k][name]
            if o_drop == (d != "keep"):
                agree += 1
                continue
            metric = (details[name][k] or "").split("=")[0] if o_drop else "keep"
            key = (src[k], metric, d)
            buckets[key] += 1
            examples.setdefault(key, []).append(dt[k]["id"])
        out[name] = {
            "agreement_pct": 100 * agree / n,
            "english_docs": len(english),
            "english_agreement_pct": 100 * en_agree / max(1, len(english)),
            "differ": n - agree,
            "dropped_ours": sum(ours[name]),
            "dropped_datatrove": sum(d[name] != "keep" for d in dt),
            "only_ours_drop": sum(c for (_, m, _), c in buckets.items() if m != "keep"),
            "only_datatrove_drops": sum(c for (_, m, _), c in buckets.items() if m == "keep"),
            "top_differences": [
                {
                    "source": s,
                    "ours": m,
                    "datatrove": d,
                    "docs": c,
                    "examples": examples[(s, m, d)][:5],
                }
                for (s, m, d), c in buckets.most_common(12)
            ],
        }
        print(
            f"agreement {name:18s} {out[name]['agreement_pct']:7.3f}% "
            f"({n - agree} differ: {out[name]['only_ours_drop']} only we drop, "
            f"{out[name]['only_datatrove_drops']} only datatrove drops); English "
            f"{out[name]['english_agreement_pct']:7.3f}% of {len(english)}",
            flush=True,
        )
    return out


def keep_rates(con: Any, src: list[str], preset: str, version: int) -> dict[str, Any]:
    """Per language and per source: documents, those every filter kept, and the drops by step,
    for a preset under rule version ``version`` (2: the rules before per-language settings)."""
    cfg = config.from_dict({"preset": preset, "normalisation": version})
    _, q, params = stage_query([], cfg)
    out = con.sql(q, params=params).to_arrow_table()
    reasons = out["reason"].to_pylist()
    langs = out["lang"].to_pylist()
    table: dict[str, dict[str, dict[str, Any]]] = {"language": {}, "source": {}}
    for reason, lang, source in zip(reasons, langs, src, strict=True):
        kept = reason is None or reason == "exact_dup"
        for kind, key in (("language", lang or "(none)"), ("source", source)):
            row = table[kind].setdefault(key, {"docs": 0, "kept": 0, "dropped_by": Counter()})
            row["docs"] += 1
            row["kept"] += kept
            if not kept:
                row["dropped_by"][reason] += 1
    for rows in table.values():
        for row in rows.values():
            row["keep_pct"] = 100 * row["kept"] / row["docs"]
            row["dropped_by"] = dict(row["dropped_by"].most_common())
    return {
        **table,
        "decisions": [(lang, reason) for lang, reason in zip(langs, reasons, strict=True)],
    }


def stage_seconds(con: Any, preset: str, versions: list[int], repeat: int) -> dict[int, float]:
    """The median time of the preset's whole stage per rule version, the versions run in turn
    (v2, v3, v2, v3, ...) so that a busy machine slows both alike."""
    queries = {}
    for v in versions:
        _, q, params = stage_query([], config.from_dict({"preset": preset, "normalisation": v}))
        queries[v] = (q, params)
    times: dict[int, list[float]] = {v: [] for v in versions}
    for _ in range(repeat):
        for v, (q, params) in queries.items():
            t0 = time.perf_counter()
            con.sql(q, params=params).to_arrow_table()
            times[v].append(time.perf_counter() - t0)
    return {v: statistics.median(t) for v, t in times.items()}


def print_keep_rates(before: dict[str, Any], after: dict[str, Any], min_docs: int) -> None:
    """Before/after keep rates, languages with at least ``min_docs`` documents, and each one's
    share of English's keep rate (the bar of issue 17: 30%)."""
    changed = Counter(
        b[0] for b, a in zip(before["decisions"], after["decisions"], strict=True) if b[1] != a[1]
    )
    print(
        "documents whose decision changed, by language: "
        + ", ".join(f"{k} {v}" for k, v in changed.most_common()),
        flush=True,
    )
    for kind in ("language", "source"):
        en_b = before["language"].get("en", {}).get("keep_pct") or 1.0
        en_a = after["language"].get("en", {}).get("keep_pct") or 1.0
        print(f"\nkeep rate per {kind}: before -> after (of English's rate), top drops after")
        for key, a in sorted(after[kind].items(), key=lambda kv: -kv[1]["docs"]):
            b = before[kind].get(key, {"kept": 0, "keep_pct": 0.0})
            if a["docs"] < min_docs:
                continue
            share = (
                f" ({100 * b['keep_pct'] / en_b:4.0f}% -> {100 * a['keep_pct'] / en_a:4.0f}%)"
                if kind == "language"
                else ""
            )
            drops = ", ".join(
                f"{r.removeprefix('filter:')} {c}" for r, c in list(a["dropped_by"].items())[:3]
            )
            print(
                f"  {key:38s} {a['docs']:6d} docs  kept {b['kept']:6d} ({b['keep_pct']:5.1f}%) "
                f"-> {a['kept']:6d} ({a['keep_pct']:5.1f}%){share}  {drops}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "real")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="stage on N processes (0: skip)")
    ap.add_argument(
        "--datatrove",
        type=Path,
        default=ROOT.parent / "venv-datatrove" / "bin" / "python",
        help="a Python that has datatrove",
    )
    ap.add_argument("--no-datatrove", action="store_true")
    ap.add_argument(
        "--keep-rates",
        action="store_true",
        help="only the keep rate per language and source, multilingual preset, rules before "
        "(version 2) and after (the current version)",
    )
    ap.add_argument("--min-docs", type=int, default=20, help="smallest language/source shown")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per rule version (median)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    if not args.data.is_dir():
        print(f"skipped: {args.data} not found")
        return
    con = engine.connect(threads=args.threads)
    filters.install(con)
    records = load(con, args.data)
    con.register("records", records)
    n = records.num_rows
    mb = sum(len(t.encode()) for t in records["text"].to_pylist()) / 1e6
    src = records["src"].to_pylist()
    if args.keep_rates:
        rates: dict[str, Any] = {
            "before": keep_rates(con, src, "multilingual", 2),
            "after": keep_rates(con, src, "multilingual", config.NORMALISATION_VERSION),
        }
        print_keep_rates(rates["before"], rates["after"], args.min_docs)
        for r in rates.values():
            del r["decisions"]
        secs = stage_seconds(con, "multilingual", [2, config.NORMALISATION_VERSION], args.repeat)
        rates["stage_seconds_median"] = secs
        print(f"stage seconds, median of {args.repeat}, by rule version: {secs}")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_filters_languages.json").write_text(json.dumps(rates, indent=2))
        return
    results: dict[str, dict[str, float]] = {}
    dropped_by: dict[str, list[bool]] = {}
    details: dict[str, list[str | None]] = {}

    def run(name: str, steps: list[str]) -> None:
        p, q, params = stage_query(steps)
        t0 = time.perf_counter()
        out = con.sql(q, params=params).to_arrow_table()
        secs = time.perf_counter() - t0
        dropped = sum(d for _, _, d in filters.funnel(p, out))
        results[name] = {
            "seconds": secs,
            "docs_per_s": n / secs,
            "mb_per_s": mb / secs,
            "dropped": dropped,
        }
        if len(steps) == 1:  # a dropped document: by this step, or empty (datatrove drops both)
            reasons = out["reason"].to_pylist()
            dropped_by[name] = [r in (f"filter:{name}", "filter:empty") for r in reasons]
            details[name] = out["detail"].to_pylist()
        print(
            f"{name:28s} {secs:7.2f} s {n / secs:10,.0f} docs/s {mb / secs:7.2f} MB/s "
            f"dropped {dropped:6d}",
            flush=True,
        )

    run("baseline (no filter)", [])
    for step in STEPS:
        run(step, [step])
    run("stage (all steps)", STEPS)
    run("stage (datatrove's steps)", DT_STEPS)
    for name, steps in (("stage (all steps)", STEPS), ("stage (datatrove's steps)", DT_STEPS)):
        if args.workers:
            secs = run_workers(args.data, args.workers, steps)
            key = f"{name}, {args.workers} workers"
            results[key] = {"seconds": secs, "docs_per_s": n / secs, "mb_per_s": mb / secs}
            print(
                f"{key:28s} {secs:7.2f} s {n / secs:10,.0f} docs/s {mb / secs:7.2f} MB/s",
                flush=True,
            )
    report: dict[str, Any] = {
        "docs": n,
        "mb": mb,
        "threads": args.threads,
        "workers": args.workers,
        "results": results,
    }
    if not args.no_datatrove and args.datatrove.exists():
        report["datatrove"], agree = compare(con, args, dropped_by, details, src, results, n)
        (args.out / "bench_filters_agreement.json").write_text(json.dumps(agree, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_filters.json").write_text(json.dumps(report, indent=2))
    print(f"{n} documents, {mb:.1f} MB, threads={args.threads}")


def compare(
    con: Any,
    args: argparse.Namespace,
    dropped_by: dict[str, list[bool]],
    details: dict[str, list[str | None]],
    src: list[str],
    results: dict[str, dict[str, float]],
    n: int,
) -> tuple[dict[str, Any], Any]:
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs.jsonl"
        rows = con.sql(
            f"SELECT id, norm FROM ({engine.q('worker.normalise')}) ORDER BY source_line",
            params={"normalisation": config.NORMALISATION_VERSION},
        ).fetchall()
        with docs.open("w", encoding="utf-8") as f:
            for doc_id, text in rows:
                f.write(json.dumps({"id": doc_id, "text": text}) + "\n")
        script = str(Path(__file__).with_name("bench_filters_datatrove.py"))
        stage = {}
        subprocess.run(
            [str(args.datatrove), script, str(docs), tmp, "--processes", "1"], check=True
        )
        timings = json.loads((Path(tmp) / "timings.json").read_text())
        stage["1"] = timings.pop("stage")
        if args.workers > 1:
            subprocess.run(
                [
                    str(args.datatrove),
                    script,
                    str(docs),
                    tmp,
                    "--processes",
                    str(args.workers),
                    "--skip-per-filter",
                ],
                check=True,
            )
            stage[str(args.workers)] = json.loads((Path(tmp) / "timings.json").read_text())["stage"]
        with (Path(tmp) / "decisions.jsonl").open(encoding="utf-8") as f:
            dt = [json.loads(line) for line in f]
    timings["stage"] = stage
    speed = {
        name: {
            "datatrove_docs_per_s": timings["filters"][name]["docs_per_s"],
            "ours_docs_per_s": results[name]["docs_per_s"],
            "ratio": results[name]["docs_per_s"] / timings["filters"][name]["docs_per_s"],
        }
        for name in COMPARED
    }
    one = stage["1"]["docs_per_s"]
    speed["stage, 1 process"] = {
        "datatrove_docs_per_s": one,
        "ours_all_steps_docs_per_s": results["stage (all steps)"]["docs_per_s"],
        "ours_datatrove_steps_docs_per_s": results["stage (datatrove's steps)"]["docs_per_s"],
        "ratio_all_steps": results["stage (all steps)"]["docs_per_s"] / one,
        "ratio_datatrove_steps": results["stage (datatrove's steps)"]["docs_per_s"] / one,
    }
    if str(args.workers) in stage and args.workers > 1:
        w = args.workers
        dts = stage[str(w)]["docs_per_s"]
        a = results[f"stage (all steps), {w} workers"]["docs_per_s"]
        b = results[f"stage (datatrove's steps), {w} workers"]["docs_per_s"]
        speed[f"stage, {w} processes"] = {
            "datatrove_docs_per_s": dts,
            "ours_all_steps_docs_per_s": a,
            "ours_datatrove_steps_docs_per_s": b,
            "ratio_all_steps": a / dts,
            "ratio_datatrove_steps": b / dts,
        }
    for name, s in speed.items():
        print(f"speed {name:18s} " + " ".join(f"{k}={v:,.2f}" for k, v in s.items()))
    langs = [
        lang
        for (lang,) in con.sql(
            "SELECT lc_lang_code(lc_langid(left(norm, 2000)).lang, $normalisation) FROM "
            f"({engine.q('worker.normalise')}) ORDER BY source_line",
            params={"normalisation": config.NORMALISATION_VERSION},
        ).fetchall()
    ]
    agree = agreement(dropped_by, dt, src, details, langs)
    return {"timings": timings, "speed": speed}, {"docs": n, "filters": agree}


if __name__ == "__main__":
    sys.exit(main())
