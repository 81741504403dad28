"""Time travel by measurement (issue 3): how long opening a version takes as the table grows to
thousands of commits, and which reader to put under DuckDB.

Run: /work/venv/bin/python benchmarks/bench_versions.py [--commits 10,100,1000,2000]
     [--reader-rows 2000000] [--repeat 5]
Writes benchmarks/results/bench_versions.json (``--out`` to change) and prints it.

Part 1, open time: one table is grown commit by commit through ``DeltaStore.append`` (the
lakecurate commit path: app transaction + commitInfo, 20 rows each), and at each size in
``--commits`` we time, in a fresh ``DeltaStore`` each time: opening the latest version as the
Arrow dataset DuckDB reads (``query.dataset_at``), opening version 5 and the version halfway,
and ``SELECT count(*)`` through DuckDB on top. A control table with delta-rs's automatic
checkpoints switched off (``delta.checkpointInterval`` = 10^9) shows what checkpoints buy.

Part 2, the reader: a table of ``--reader-rows`` rows in 40 commits; at version 20 (an old one)
``SELECT count(*) FROM docs WHERE lang = 'fr'`` and a full-text scan, read (a) through
delta-rs -> Arrow dataset -> DuckDB, and (b) as ``read_parquet(dt.file_uris())`` in DuckDB;
(c) ``INSTALL delta`` is tried and its error recorded (DuckDB 2.x has no loadable delta
extension offline).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakecurate.lake.delta import DeltaStore
from lakecurate.read import query
from lakecurate.schema import DOCUMENT_SCHEMA

RESULTS = Path(__file__).resolve().parent / "results" / "bench_versions.json"
LANGS = np.array(["en", "fr", "es", "de", "zh"])


def rows(n: int, start: int, text_chars: int = 40, seed: int = 0) -> pa.Table:
    """``n`` documents shaped like the real table."""
    rng = np.random.default_rng(seed + start)
    ids = [f"doc-{start + i}" for i in range(n)]
    words = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit"]
    text = [" ".join(rng.choice(words, max(text_chars // 6, 1))) for _ in range(n)]
    kept = rng.random(n) < 0.8
    cols: dict[str, Any] = {f.name: pa.nulls(n, f.type) for f in DOCUMENT_SCHEMA}
    cols |= {
        "id": pa.array(ids),
        "id_given": pa.array([True] * n),
        "text": pa.array(text),
        "kept": pa.array(kept),
        "lang": pa.array(LANGS[rng.integers(0, 5, n)]),
        "content_hash": pa.array([f"{start + i:032x}" for i in range(n)]),
        "chunk_key": pa.array([f"bench_{start:08d}_00000000"] * n),
        "source_path": pa.array(["/bench"] * n),
        "source_line": pa.array(np.arange(start, start + n)),
        "input_sha256": pa.array(["0" * 64] * n),
        "run_id": pa.array(["bench"] * n),
        "config_hash": pa.array(["bench"] * n),
    }
    return pa.table(cols).cast(DOCUMENT_SCHEMA)


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``repeat`` calls (after one warm-up call)."""
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def open_and_count(path: Path, version: int | None) -> int:
    ds = query.dataset_at(path, version)
    con = duckdb.connect()
    con.register("documents", ds)
    n = int(con.execute("SELECT count(*) FROM documents").fetchone()[0])  # type: ignore[index]
    con.close()
    return n


def measure(path: Path, latest: int, repeat: int) -> dict[str, Any]:
    """Open times of one table: the log alone (DeltaTable), the Arrow dataset DuckDB reads
    (one fragment per live file), and a count through DuckDB, at three versions."""
    row: dict[str, Any] = {
        "checkpoints": len(list((path / "_delta_log").glob("*.checkpoint.parquet"))),
        "live_files": len(DeltaTable(str(path)).file_uris()),
    }
    for name, version in (("latest", None), ("version_5", 5), ("halfway", latest // 2)):
        row[f"deltatable_{name}_ms"] = round(
            timed(lambda v=version: DeltaTable(str(path), version=v), repeat) * 1000, 1
        )
        row[f"dataset_{name}_ms"] = round(
            timed(lambda v=version: query.dataset_at(path, v), repeat) * 1000, 1
        )
        row[f"count_{name}_ms"] = round(
            timed(lambda v=version: open_and_count(path, v), repeat) * 1000, 1
        )
    return row


def part_open_time(sizes: list[int], repeat: int, root: Path) -> list[dict[str, Any]]:
    results = []
    for label, config in (
        ("checkpoints every 100 (delta-rs default)", None),
        ("no checkpoints", {"delta.checkpointInterval": "1000000000"}),
    ):
        path = root / label.split()[0]
        store = DeltaStore(path)
        made = 0
        if config is not None:  # the first commit sets the table property
            write_deltalake(
                str(path), rows(20, 0), mode="append", partition_by=["kept"], configuration=config
            )
            made = 1
        for size in sizes:
            started = time.perf_counter()
            while made < size:
                store.append(rows(20, made * 20), made + 1, {"lakecurate.chunk_key": str(made)})
                made += 1
            build = time.perf_counter() - started
            latest = size - 1
            row = {"table": label, "commits": size, "build_seconds": round(build, 2)}
            row |= measure(path, latest, repeat)
            results.append(row)
            print(json.dumps(row), flush=True)
        if config is None:  # the same table after `compact`: few files, one more version
            store.compact(None, {"lakecurate.maintenance": "compact"})
            row = {"table": label + ", then compact", "commits": made + 1, "build_seconds": 0}
            row |= measure(path, made - 1, repeat)
            results.append(row)
            print(json.dumps(row), flush=True)
    return results


def part_reader(total_rows: int, repeat: int, root: Path) -> dict[str, Any]:
    path = root / "reader"
    commits = 40
    per = total_rows // commits
    for i in range(commits):
        write_deltalake(
            str(path), rows(per, i * per, text_chars=400), mode="append", partition_by=["kept"]
        )
    old = 20
    dt = DeltaTable(str(path), version=old)
    expected = open_and_count(path, old)
    out: dict[str, Any] = {
        "rows_latest": total_rows,
        "version": old,
        "rows_at_version": expected,
        "files_at_version": len(dt.file_uris()),
    }
    queries = {
        "count_fr": "SELECT count(*) FROM docs WHERE lang = 'fr'",
        "full_text_scan": "SELECT sum(length(text)) FROM docs",
    }

    def via_dataset(sql: str) -> Any:
        con = duckdb.connect()
        con.register("documents_dataset", query.dataset_at(path, old))
        con.execute("CREATE VIEW docs AS SELECT * FROM documents_dataset WHERE kept")
        value = con.execute(sql).fetchone()
        con.close()
        return value

    def via_read_parquet(sql: str) -> Any:
        con = duckdb.connect()
        files = DeltaTable(str(path), version=old).file_uris()
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        con.execute(
            f"CREATE VIEW docs AS SELECT * FROM read_parquet([{listed}], "
            "hive_partitioning = true) WHERE kept"
        )
        value = con.execute(sql).fetchone()
        con.close()
        return value

    for name, sql in queries.items():
        a, b = via_dataset(sql), via_read_parquet(sql)
        assert a == b, (name, a, b)
        out[name] = {
            "answer": a[0],
            "deltars_arrow_dataset_ms": round(
                timed(lambda s=sql: via_dataset(s), repeat) * 1000, 1
            ),
            "duckdb_read_parquet_ms": round(
                timed(lambda s=sql: via_read_parquet(s), repeat) * 1000, 1
            ),
        }
        print(json.dumps({name: out[name]}), flush=True)
    con = duckdb.connect()
    try:
        con.execute("INSTALL delta")
        con.execute("LOAD delta")
        out["duckdb_delta_extension"] = "loaded"
    except duckdb.Error as exc:
        out["duckdb_delta_extension"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    con.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", default="10,100,1000,2000")
    ap.add_argument("--reader-rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    sizes = sorted(int(x) for x in args.commits.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        result = {
            "benchmark": "bench_versions",
            "machine": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": len(__import__("os").sched_getaffinity(0)),
            },
            "versions": {p: metadata.version(p) for p in ("duckdb", "deltalake", "pyarrow")}
            | {"python-dateutil": _maybe_version("python-dateutil")},
            "open_time": part_open_time(sizes, args.repeat, Path(tmp)),
            "reader": part_reader(args.reader_rows, args.repeat, Path(tmp)),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


def _maybe_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
