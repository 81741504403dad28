"""Tier 2 of the membership index as the lake grows: the key cache against the DuckDB join it
replaced (issue 14).

Run: /work/venv/bin/python benchmarks/bench_tier2.py [--sizes 200000 2000000 20000000]
     [--repeat 5] [--out benchmarks/results/bench_tier2.json]

For each size N, a lake state whose content index holds N random 128-bit keys (with a document
id and a commit seq: 20,000 keys a commit, as chunks of 32 MiB add them) is asked about one
chunk's Bloom "maybe" keys: 1,000 content hashes, half of them in the index. Timed, with one
DuckDB thread (the driver's setting):

- ``join``: the tier-2 query before the cache, a join that scans every key of the DuckDB table
  ``content_hashes`` the index was before its key files (``store.key_files``);
- ``cache``: ``MembershipIndex.content_seen`` (tier 1 off, so every key is a maybe) answered by
  the key cache: ``first`` includes reading the key files into the cache, once per run;
  ``steady`` is every later lookup (the median of ``--repeat``), which includes the cache's
  check of the registry's key count and largest seq.

Both give the same rows (checked). Also reported: the cache's memory (numpy and Arrow bytes) and
the load average. A ratio ``join / steady`` per size; the join grows with N, the cache should not.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from common import loadavg, save

from lakecurate.store.index import MembershipIndex
from lakecurate.store.key_files import KeyFiles
from lakecurate.store.state import StateStore

RESULTS = Path(__file__).resolve().parent / "results" / "bench_tier2.json"
JOIN = """
SELECT m.content_hash, arg_min(h.doc_id, h.seq) AS doc_id
FROM (SELECT DISTINCT unnest($hashes::VARCHAR[]) AS content_hash) m
JOIN content_hashes h ON h.hash = ('0x' || m.content_hash)::UHUGEINT
GROUP BY m.content_hash ORDER BY 1
"""


def fill(state: StateStore, n: int) -> list[str]:
    """N random keys (ids ``d<i>``, 20,000 a commit seq) in the table of the layout before and
    in key files; returns 1,000 maybe keys, half present."""
    con = state.con
    con.execute(
        "CREATE TABLE content_hashes AS "
        "SELECT (random() * 1e18)::UBIGINT::UHUGEINT * 18446744073709551616::UHUGEINT "
        "+ (random() * 1e18)::UBIGINT AS hash, 'd' || i AS doc_id, i // 20000 AS seq "
        "FROM range($n) t(i)",
        {"n": n},
    )
    con.execute("CHECKPOINT")
    halves = con.sql(
        "SELECT (hash >> 64)::UBIGINT AS hi, (hash & 18446744073709551615::UHUGEINT)::UBIGINT "
        "AS lo, seq, doc_id FROM content_hashes"
    ).to_arrow_table()
    with state.transaction():
        KeyFiles(con).write("content", halves)
    present = con.execute(
        "SELECT printf('%032x', hash) FROM content_hashes USING SAMPLE 500 ROWS"
    ).fetchall()
    absent = [f"{(i * 2654435761) % 2**128:032x}" for i in range(500)]
    return sorted({h for (h,) in present} | set(absent))


def measure(n: int, repeat: int, work: Path) -> dict[str, Any]:
    (work / str(n)).mkdir()
    state = StateStore.open(work / str(n) / "state.duckdb")
    state.con.execute("SET threads = 1")
    keys = fill(state, n)
    joins = []
    for _ in range(repeat):
        started = time.perf_counter()
        want = state.con.execute(JOIN, {"hashes": keys}).fetchall()
        joins.append(time.perf_counter() - started)
    index = MembershipIndex(state.con)
    started = time.perf_counter()
    index.content_seen(pa.array(keys))
    first = time.perf_counter() - started
    steady = []
    for _ in range(repeat):
        started = time.perf_counter()
        got = index.content_seen(pa.array(keys)).sort_by("content_hash")
        steady.append(time.perf_counter() - started)
    assert list(zip(*got.to_pydict().values(), strict=True)) == want
    memory = index.tier2["content"].nbytes
    state.close()
    join_ms, steady_ms = statistics.median(joins) * 1000, statistics.median(steady) * 1000
    return {
        "keys_in_table": n,
        "maybe_keys": len(keys),
        "found": len(want),
        "join_ms": round(join_ms, 2),
        "cache_first_ms": round(first * 1000, 1),
        "cache_steady_ms": round(steady_ms, 3),
        "join_over_cache": round(join_ms / steady_ms, 1),
        "cache_mib": round(memory / 2**20, 1),
        "cache_bytes_per_key": round(memory / n, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 2_000_000, 20_000_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load = loadavg()
    with tempfile.TemporaryDirectory(prefix="bench-tier2-") as tmp:
        rows = [measure(n, args.repeat, Path(tmp)) for n in args.sizes]
    save(
        {
            "results": rows,
            "loadavg_before": load,
            "loadavg_after": loadavg(),
            "command": "python benchmarks/bench_tier2.py "
            + " ".join(["--sizes", *map(str, args.sizes), "--repeat", str(args.repeat)]),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
