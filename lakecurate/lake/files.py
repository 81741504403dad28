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

import contextlib
import json
import math
from collections.abc import Iterable
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
    table: Location, rows: pa.Table | Iterable[pa.Table], partition_by: str, prefix: str
) -> list[DataFile]:
    """Write ``rows`` (a table, or its pieces one after the other, so that a chunk is never
    held whole: a worker's finalise streams its staged file) as one file per value of
    ``partition_by`` (a boolean column).

    Written under the final name, as delta-rs does: no reader sees a data file until a commit
    names it, and one that a failure or a kill left unnamed is removed by the next writer
    (``DeltaStore.remove_unreferenced``, which lists ``*.parquet``), so a temp name would only
    hide it from that clean-up. On local disk each file is fsynced before any commit can name
    it; on object storage it exists once its upload completes.

    The names are ``<prefix>-c000.snappy.parquet``: ``prefix`` must be unique to the write
    (``part-<commit seq>-<random>``), so a retried write replaces what a failed attempt left
    instead of adding a second copy."""
    parts: dict[bool, _Part] = {}
    with contextlib.ExitStack() as closing:
        for piece in [rows] if isinstance(rows, pa.Table) else rows:
            for value in (True, False):
                rows_of = piece.filter(pc.equal(piece[partition_by], value))
                if rows_of.num_rows == 0:
                    continue
                rows_of = rows_of.drop_columns([partition_by])
                if value not in parts:
                    parts[value] = _Part(table, partition_by, value, prefix, rows_of.schema)
                    closing.callback(parts[value].writer.close)
                parts[value].write(rows_of)
    return [parts[value].data_file() for value in (True, False) if value in parts]


class _Part:
    """One partition's data file while it is written, and its statistics."""

    def __init__(
        self, table: Location, partition_by: str, value: bool, prefix: str, schema: pa.Schema
    ) -> None:
        self.partition_by, self.value = partition_by, str(value).lower()
        self.rel = f"{partition_by}={self.value}/{prefix}-c000.snappy.parquet"
        self.dest = table / self.rel
        if self.dest.is_local:
            self.dest.local.parent.mkdir(parents=True, exist_ok=True)
        self.writer = pq.ParquetWriter(
            self.dest.fs_path, schema, filesystem=self.dest.fs, compression="snappy"
        )
        self.stats = Statistics()

    def write(self, rows: pa.Table) -> None:
        self.writer.write_table(rows)
        self.stats.add(rows)

    def data_file(self) -> DataFile:
        """The written (closed) file's add action."""
        if self.dest.is_local:
            atomic.fsync_path(self.dest.local)  # durable before a commit names it
        st = self.dest.stat()
        assert st is not None, f"{self.dest} vanished after its write"
        return DataFile(
            path=self.rel,
            size=st.size,
            partition_values={self.partition_by: self.value},
            modification_time=st.mtime_ns // 1_000_000,
            stats=json.dumps(self.stats.delta(), separators=(",", ":")),
            rows=self.stats.rows,
        )


class Statistics:
    """The Delta statistics of one file's rows (numRecords, nullCount, minValues, maxValues),
    added piece by piece: the bounds of the whole are the bounds of the pieces' bounds."""

    def __init__(self) -> None:
        self.rows = 0
        self.nulls: dict[str, int] = {}
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.unbounded: set[str] = set(NO_MIN_MAX)

    def add(self, rows: pa.Table) -> None:
        self.rows += rows.num_rows
        for name in rows.column_names:
            column = rows[name]
            self.nulls[name] = self.nulls.get(name, 0) + column.null_count
            if name in self.unbounded or column.null_count == len(column):
                continue
            kind = column.type
            if not (
                pa.types.is_string(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)
            ):
                self.unbounded.add(name)
                continue
            bounds = pc.min_max(column).as_py()
            lo, hi = bounds["min"], bounds["max"]
            if isinstance(lo, float) and not (math.isfinite(lo) and math.isfinite(hi)):
                self.unbounded.add(name)  # as the whole column's bounds would be
                continue
            if name in self.low:
                lo, hi = min(lo, self.low[name]), max(hi, self.high[name])
            self.low[name], self.high[name] = lo, hi

    def delta(self) -> dict[str, Any]:
        """A string longer than ``STATS_CHARS`` leaves its column without bounds."""
        low: dict[str, Any] = {}
        high: dict[str, Any] = {}
        for name, lo in self.low.items():
            hi = self.high[name]
            if name in self.unbounded or (
                isinstance(lo, str) and max(len(lo), len(hi)) > STATS_CHARS
            ):
                continue
            low[name], high[name] = lo, hi
        return {
            "numRecords": self.rows,
            "minValues": low,
            "maxValues": high,
            "nullCount": self.nulls,
        }
