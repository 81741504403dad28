"""A chunk's rows as the table's data files: Parquet files with their Delta statistics.

Writing the files apart from the commit is what lets one commit carry files written anywhere
(by the workers: ``ingest.worker.finalise_chunk``) and keeps the commit itself small: delta-rs's
``write_deltalake`` on a kept handle re-reads the active-file list, so its cost grew with the
table (10 ms per commit at 100 files, 104 ms at 2,000), while committing ready files with
``create_write_transaction`` stays near 20-30 ms (benchmarks/bench_commits.py).

Files follow the layout delta-rs writes: one folder per partition value (``kept=true``,
``kept=false``), the partition column left out of the file, snappy Parquet. Statistics give
the min/max of the short columns readers prune on (``id``, ``chunk_key``, ...), never of
``text`` or ``raw``; a string longer than ``STATS_CHARS`` leaves its column without min/max
(missing statistics only mean no pruning, a truncated max would be wrong).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate.lake import atomic
from lakecurate.lake.storage import Location
from lakecurate.types import DataFile

STATS_CHARS = 64
NO_MIN_MAX = frozenset({"text", "raw", "meta"})


def write_data_files(
    table: Location, rows: pa.Table, partition_by: str, prefix: str
) -> list[DataFile]:
    """Write ``rows`` as one file per value of ``partition_by`` (a boolean column).

    Written under the final name, as delta-rs does: no reader sees a data file until a commit
    names it, and one that a failure or a kill left unnamed is removed by the next writer
    (``DeltaStore.remove_unreferenced``, which lists ``*.parquet``), so a temp name would only
    hide it from that clean-up. On local disk each file is fsynced before any commit can name
    it; on object storage it exists once its upload completes.

    The names are ``<prefix>-c000.snappy.parquet``: ``prefix`` must be unique to the write
    (``part-<commit seq>-<random>``), so a retried write replaces what a failed attempt left
    instead of adding a second copy."""
    files = []
    for value in (True, False):
        part = rows.filter(pc.equal(rows[partition_by], value)).drop_columns([partition_by])
        if part.num_rows == 0:
            continue
        folder = f"{partition_by}={str(value).lower()}"
        rel = f"{folder}/{prefix}-c000.snappy.parquet"
        dest = table / rel
        if dest.is_local:
            dest.local.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, dest.fs_path, filesystem=dest.fs, compression="snappy")
        if dest.is_local:
            atomic.fsync_path(dest.local)  # durable before a commit names it
        st = dest.stat()
        assert st is not None, f"{dest} vanished after its write"
        files.append(
            DataFile(
                path=rel,
                size=st.size,
                partition_values={partition_by: str(value).lower()},
                modification_time=st.mtime_ns // 1_000_000,
                stats=json.dumps(statistics(part), separators=(",", ":")),
                rows=part.num_rows,
            )
        )
    return files


def statistics(part: pa.Table) -> dict[str, Any]:
    """The Delta statistics of one file's rows: numRecords, nullCount, minValues, maxValues."""
    nulls: dict[str, int] = {}
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    for name in part.column_names:
        column = part[name]
        nulls[name] = column.null_count
        if name in NO_MIN_MAX or column.null_count == len(column):
            continue
        kind = column.type
        if not (
            pa.types.is_string(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)
        ):
            continue
        bounds = pc.min_max(column).as_py()
        lo, hi = bounds["min"], bounds["max"]
        if isinstance(lo, str) and max(len(lo), len(hi)) > STATS_CHARS:
            continue
        if isinstance(lo, float) and not (math.isfinite(lo) and math.isfinite(hi)):
            continue
        low[name], high[name] = lo, hi
    return {"numRecords": part.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}
