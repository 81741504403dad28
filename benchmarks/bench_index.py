"""Tier 1 of the membership index by measurement: inserts/s, lookups/s, memory and measured
false-positive rate of ``lakecurate.bloom`` beside rbloom and DuckDB alone, in one run (issue 4).

Run: /work/venv/bin/python benchmarks/bench_index.py [--n 10000000] [--p 0.001] [--repeat 3]
Writes benchmarks/results/bench_index.json (``--out`` to change) and prints it, then one line with
the lookup ratio lakecurate / rbloom (issue target: at least 2x).

The workload: insert ``n`` ids ``doc-{i}``, then look up ``n`` keys of which every other one was
inserted and the rest never were (``doc-{n+i}``), so the measured rate is over ``n/2`` absent keys.
Rows:

- ``lakecurate.bloom (str keys)``: ``BloomFilter.add`` / ``might_contain`` on Python strings, one
  mmh3 call per key then numpy; hashing included.
- ``lakecurate.bloom (precomputed hashes)``: ``add_hashes`` / ``contains_hashes`` on the same keys
  hashed beforehand (a caller that already holds 128-bit hashes): the cost of the filter alone.
- ``lakecurate.bloom (DuckDB md5_number keys)``: what ``lakecurate.index`` does: DuckDB turns an
  Arrow column of ids into two UBIGINT halves of ``md5_number(id)``, the filter tests them.
- ``rbloom (stable mmh3 hash)``: ``rbloom.Bloom(n, p, hash_func)`` with a 128-bit mmh3 hash (the
  default ``hash`` is salted per process, useless for a filter kept on disk); bulk ``update`` for
  inserts, ``map(bloom.__contains__, keys)`` for lookups, its fastest lookup path. Skipped with a
  note when rbloom is not installed (``pip install rbloom``).
- ``duckdb only``: a table of ``md5_number(id)`` UHUGEINTs and batched ANTI JOIN lookups, the
  authoritative tier alone; exact, so its measured rate is 0.

Each number is the median of ``--repeat`` runs (``best_*``: the fastest run, the least disturbed
on a shared machine); the engines take turns inside each run so that background load hits them
alike, and wall and CPU time are both recorded. The garbage collector is off while timing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import duckdb
import mmh3
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakecurate.store.bloom import BloomFilter, hash_keys, load

RESULTS = Path(__file__).resolve().parent / "results" / "bench_index.json"
Row = dict[str, Any]


@dataclass(frozen=True)
class Timing:
    """Wall-clock and CPU seconds of one timed call (CPU time of this process, all threads):
    on a shared machine the CPU figure is the steadier of the two."""

    wall: float
    cpu: float

    def fields(self, prefix: str) -> Row:
        return {f"{prefix}_s": self.wall, f"{prefix}_cpu_s": self.cpu}


def _timed(fn: Callable[[], Any]) -> tuple[Timing, Any]:
    gc.collect()
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        return Timing(time.perf_counter() - wall, time.process_time() - cpu), result
    finally:
        gc.enable()


def _rates(hits: np.ndarray, present: np.ndarray) -> tuple[float, int]:
    """(measured false-positive rate over the absent keys, false negatives)."""
    return float(hits[~present].mean()), int((~hits[present]).sum())


def run_lakecurate(ids: list[str], queries: list[str], present: np.ndarray, p: float) -> Row:
    f = BloomFilter(len(ids), p)
    insert, _ = _timed(lambda: f.add(ids))
    lookup, hits = _timed(lambda: f.might_contain(queries))
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / "ids.bloom"
        save, _ = _timed(lambda: f.save(path, watermark=1))
        load_s, mapped_s = _load_and_query(path, queries, hits)
    fp, fn = _rates(hits, present)
    return {
        **insert.fields("insert"),
        **lookup.fields("lookup"),
        "memory_bytes": f.memory_bytes,
        "measured_p": fp,
        "false_negatives": fn,
        "m": f.m,
        "k": f.k,
        "estimated_p": f.estimated_fp_rate,
        "fill_ratio": f.fill_ratio,
        "save_s": save.wall,
        "load_verify_s": load_s,
        "lookup_mapped_s": mapped_s,
    }


def _load_and_query(path: Path, queries: list[str], expected: np.ndarray) -> tuple[float, float]:
    """Seconds to load (with checksum verification) and to query the memory-mapped copy."""
    opened, (loaded, _) = _timed(lambda: load(path))
    query, hits = _timed(lambda: loaded.might_contain(queries))
    assert (hits == expected).all()
    return opened.wall, query.wall


def run_precomputed(ids: list[str], queries: list[str], present: np.ndarray, p: float) -> Row:
    id_hashes, query_hashes = hash_keys(ids), hash_keys(queries)
    f = BloomFilter(len(ids), p)
    insert, _ = _timed(lambda: f.add_hashes(id_hashes))
    lookup, hits = _timed(lambda: f.contains_hashes(query_hashes))
    fp, fn = _rates(hits, present)
    return {
        **insert.fields("insert"),
        **lookup.fields("lookup"),
        "memory_bytes": f.memory_bytes,
        "measured_p": fp,
        "false_negatives": fn,
        "note": "hashing excluded: keys arrive as (N, 2) uint64 hashes",
    }


_HALVES = (
    "SELECT (k >> 64)::UBIGINT AS hi, (k & 18446744073709551615::UHUGEINT)::UBIGINT AS lo "
    "FROM (SELECT md5_number(id) AS k FROM candidates)"
)


def _duckdb_halves(con: duckdb.DuckDBPyConnection, keys: pa.Array) -> np.ndarray:
    con.register("candidates", pa.table({"id": keys}))
    try:
        t = con.sql(_HALVES).to_arrow_table()
    finally:
        con.unregister("candidates")
    return np.stack([t["hi"].to_numpy(), t["lo"].to_numpy()], axis=1)


def run_duckdb_keys(
    ids: pa.Array, queries: pa.Array, present: np.ndarray, p: float, threads: int
) -> Row:
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    f = BloomFilter(len(ids), p)
    insert, _ = _timed(lambda: f.add_hashes(_duckdb_halves(con, ids)))
    lookup, hits = _timed(lambda: f.contains_hashes(_duckdb_halves(con, queries)))
    fp, fn = _rates(hits, present)
    con.close()
    return {
        **insert.fields("insert"),
        **lookup.fields("lookup"),
        "memory_bytes": f.memory_bytes,
        "measured_p": fp,
        "false_negatives": fn,
        "note": f"hashing by DuckDB md5_number with {threads} thread(s), as lakecurate.index",
    }


def run_rbloom(ids: list[str], queries: list[str], present: np.ndarray, p: float) -> Row:
    import rbloom

    def stable_hash(key: str) -> int:
        return mmh3.hash128(key, 0, True, True)  # signed 128-bit, the range rbloom requires

    b = rbloom.Bloom(len(ids), p, stable_hash)
    insert, _ = _timed(lambda: b.update(ids))
    lookup, found = _timed(lambda: list(map(b.__contains__, queries)))
    fp, fn = _rates(np.array(found, dtype=np.bool_), present)
    return {
        **insert.fields("insert"),
        **lookup.fields("lookup"),
        "memory_bytes": b.size_in_bits // 8,
        "measured_p": fp,
        "false_negatives": fn,
        "note": "hash_func = mmh3.hash128(key, 0, True, True); update() and map(__contains__)",
    }


def run_duckdb(
    ids: pa.Array, queries: pa.Array, present: np.ndarray, threads: int, batch: int
) -> Row:
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.register("new_ids", pa.table({"id": ids}))
    insert, _ = _timed(
        lambda: con.execute("CREATE TABLE doc_ids AS SELECT md5_number(id) AS hash FROM new_ids")
    )
    con.unregister("new_ids")
    memory = con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchall()[0]

    def lookups() -> np.ndarray:
        hits = np.ones(len(queries), dtype=np.bool_)
        for start in range(0, len(queries), batch):
            part = pa.table(
                {
                    "pos": pa.array(np.arange(start, min(start + batch, len(queries)))),
                    "id": queries[start : start + batch],
                }
            )
            con.register("candidates", part)
            new = con.sql(
                "SELECT c.pos FROM candidates c ANTI JOIN doc_ids d ON d.hash = md5_number(c.id)"
            ).to_arrow_table()
            con.unregister("candidates")
            hits[new["pos"].to_numpy()] = False
        return hits

    lookup, hits = _timed(lookups)
    fp, fn = _rates(hits, present)
    con.close()
    queries_issued = -(-len(queries) // batch)
    return {
        **insert.fields("insert"),
        **lookup.fields("lookup"),
        "memory_bytes": int(memory[0]) if memory and memory[0] else None,
        "measured_p": fp,
        "false_negatives": fn,
        "seconds_per_query": lookup.wall / queries_issued,
        "note": f"{threads} thread(s); {queries_issued} ANTI JOIN queries of {batch} keys",
    }


def _median_rows(runs: list[Row], n: int) -> Row:
    out: Row = {}
    for key, value in runs[0].items():
        values = [r[key] for r in runs]
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        out[key] = statistics.median(values) if is_number and None not in values else value
    for verb, noun in (("inserts", "insert"), ("lookups", "lookup")):
        out[f"{verb}_per_s"] = n / out[f"{noun}_s"]
        out[f"{verb}_per_cpu_s"] = n / out[f"{noun}_cpu_s"]
        out[f"best_{verb}_per_s"] = n / min(r[f"{noun}_s"] for r in runs)  # least disturbed run
    out["runs_lookup_s"] = [r["lookup_s"] for r in runs]
    out["runs_insert_s"] = [r["insert_s"] for r in runs]
    return out


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="ids inserted and looked up")
    parser.add_argument("--p", type=float, default=0.001, help="target false-positive rate")
    parser.add_argument("--repeat", type=int, default=3, help="runs; medians are reported")
    parser.add_argument(
        "--duckdb-threads",
        type=int,
        default=1,
        help="DuckDB threads (1 = the single core rbloom and numpy use)",
    )
    parser.add_argument(
        "--duckdb-batch", type=int, default=1_000_000, help="keys per DuckDB-only lookup query"
    )
    parser.add_argument("--skip-duckdb", action="store_true", help="leave the DuckDB rows out")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)

    n = args.n
    ids = [f"doc-{i}" for i in range(n)]
    queries = [ids[i] if i % 2 == 0 else f"doc-{n + i}" for i in range(n)]
    present = np.arange(n) % 2 == 0
    ids_arrow, queries_arrow = pa.array(ids), pa.array(queries)
    try:
        import rbloom  # noqa: F401

        have_rbloom = True
    except ImportError:
        have_rbloom = False

    engines: dict[str, Callable[[], Row]] = {
        "lakecurate.bloom (str keys)": lambda: run_lakecurate(ids, queries, present, args.p),
        "lakecurate.bloom (precomputed hashes)": lambda: run_precomputed(
            ids, queries, present, args.p
        ),
    }
    if have_rbloom:
        engines["rbloom (stable mmh3 hash)"] = lambda: run_rbloom(ids, queries, present, args.p)
    if not args.skip_duckdb:
        engines["lakecurate.bloom (DuckDB md5_number keys)"] = lambda: run_duckdb_keys(
            ids_arrow, queries_arrow, present, args.p, args.duckdb_threads
        )
        engines["duckdb only"] = lambda: run_duckdb(
            ids_arrow, queries_arrow, present, args.duckdb_threads, args.duckdb_batch
        )

    load_before = os.getloadavg()
    runs: dict[str, list[Row]] = {name: [] for name in engines}
    for _ in range(args.repeat):
        for name, engine in engines.items():  # take turns: shared load hits every engine
            runs[name].append(engine())
    rows = [{"name": name, **_median_rows(r, n)} for name, r in runs.items()]
    if not have_rbloom:
        rows.append(
            {
                "name": "rbloom (stable mmh3 hash)",
                "note": "skipped: rbloom is not installed (pip install rbloom)",
            }
        )

    by_name = {r["name"]: r for r in rows}
    ratios: dict[str, float] = {}
    if have_rbloom:
        rb = by_name["rbloom (stable mmh3 hash)"]
        for name in (
            "lakecurate.bloom (str keys)",
            "lakecurate.bloom (precomputed hashes)",
            "lakecurate.bloom (DuckDB md5_number keys)",
        ):
            if name not in by_name:
                continue
            for metric in (
                "lookups_per_s",
                "lookups_per_cpu_s",
                "best_lookups_per_s",
                "inserts_per_s",
                "inserts_per_cpu_s",
                "best_inserts_per_s",
            ):
                ratios[f"{metric} {name} / rbloom"] = by_name[name][metric] / rb[metric]
    result = {
        "benchmark": "bench_index",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "n": n,
        "p": args.p,
        "repeat": args.repeat,
        "duckdb_threads": args.duckdb_threads,
        "duckdb_batch": args.duckdb_batch,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "versions": {d: _version(d) for d in ("numpy", "mmh3", "duckdb", "pyarrow", "rbloom")},
        "rows": rows,
        "ratios": ratios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    if ratios:
        wall = ratios["lookups_per_s lakecurate.bloom (str keys) / rbloom"]
        cpu = ratios["lookups_per_cpu_s lakecurate.bloom (str keys) / rbloom"]
        hashed = ratios["lookups_per_s lakecurate.bloom (precomputed hashes) / rbloom"]
        best = ratios["best_lookups_per_s lakecurate.bloom (str keys) / rbloom"]
        verdict = "meets" if min(wall, cpu) >= 2 else "misses"
        print(
            f"lookups lakecurate/rbloom on str keys: {wall:.2f}x wall, {cpu:.2f}x CPU, "
            f"{best:.2f}x best run ({verdict} the 2x target on medians); on precomputed "
            f"hashes {hashed:.2f}x wall"
        )
    return result


if __name__ == "__main__":
    main()
