"""The read-only SQL surface: the state tables plus ``documents`` / ``docs`` / ``rejects`` views
over one version of the Delta table.

Read only by construction: the state file is attached READ_ONLY, the documents are an Arrow
dataset, external access is switched off once the views exist, and only statements that read
are accepted at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.fs as pafs

from lakecurate import engine
from lakecurate.errors import LakeError, QueryError, ReadOnlyError
from lakecurate.lake.delta import DeltaStore
from lakecurate.state import SNAPSHOT_NAME
from lakecurate.types import DOCUMENT_SCHEMA

_READ_STATEMENTS = {"SELECT", "EXPLAIN", "PRAGMA"}


@dataclass
class QueryResult:
    """Columns and rows of one query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


def open_reader(state_path: Path, documents: Path,
                version: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the lake attached read-only and the views bound to ``version``."""
    if not state_path.exists():
        raise LakeError(f"no lake at {state_path.parent} (no state.duckdb): run "
                        "`lakecurate ingest` first, or pass --lake")
    con = engine.connect()
    try:
        con.execute("ATTACH ? AS lake (READ_ONLY)", [str(state_path)])
    except duckdb.Error as exc:
        # A running ingest holds the file (DuckDB allows no reader beside a writer process):
        # read the consistent snapshot of the state tables it publishes instead.
        snapshot = state_path.with_name(SNAPSHOT_NAME)
        if "lock" not in str(exc).lower():
            con.close()
            raise LakeError(f"cannot open {state_path}: {exc}") from exc
        try:
            con.execute("ATTACH ? AS lake (READ_ONLY)", [str(snapshot)])
        except duckdb.Error as exc2:
            con.close()
            raise LakeError(
                f"{state_path} is held by a running ingest and no state snapshot is readable "
                f"yet ({exc2}); try again in a few seconds") from exc
    con.execute("USE lake")
    try:
        ds = DeltaStore(documents).dataset(version)
    except Exception as exc:
        con.close()
        raise LakeError(f"cannot read version {version} of {documents}: {exc}") from exc
    con.register("documents_dataset", _native_local(ds, documents) if ds is not None else pa.table(
        {f.name: pa.array([], f.type) for f in DOCUMENT_SCHEMA}))
    con.execute(engine.q("views.create"))
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _native_local(ds: pds.Dataset, root: Path) -> pds.Dataset:
    """``ds`` with its Parquet files read through Arrow's own local filesystem.

    deltalake's dataset reads through a filesystem implemented in Python (a ``PyFileSystem``
    over its ``DeltaStorageHandler``). When DuckDB stops a scan early (``LIMIT``), Arrow's
    prefetching I/O threads are still calling into that Python object while the interpreter
    shuts down, and the process segfaults, aborts or hangs *after* printing the right answer
    (``lakecurate sql "SELECT * FROM docs LIMIT 3"`` exited 134/139 or hung most of the time).
    The native filesystem has no Python in the read path. Same fragments, schema and partition
    expressions (they carry the file statistics used for pruning); a dataset that is not plain
    local files is returned unchanged. (The natural home of this is ``DeltaStore.dataset``.)
    """
    if not isinstance(ds, pds.FileSystemDataset) or not isinstance(ds.filesystem,
                                                                   pafs.PyFileSystem):
        return ds
    fragments = list(ds.get_fragments())
    if any("://" in f.path for f in fragments):
        return ds
    fs = pafs.SubTreeFileSystem(str(root.resolve()), pafs.LocalFileSystem())
    fmt = ds.format
    return pds.FileSystemDataset(
        [fmt.make_fragment(f.path, filesystem=fs, partition_expression=f.partition_expression)
         for f in fragments], ds.schema, fmt, fs)


def run(con: duckdb.DuckDBPyConnection, query: str,
        params: dict[str, Any] | None = None) -> QueryResult:
    """Run one read-only query; anything that would write is refused with a clear message."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"SQL error: {exc}") from exc
    if not statements:
        raise QueryError("empty query")
    for st in statements:
        kind = str(st.type).rsplit(".", 1)[-1]
        if kind not in _READ_STATEMENTS:
            raise ReadOnlyError(
                f"`lakecurate sql` is read-only: {kind} statements are refused. The lake changes "
                "only through lakecurate commands (ingest, retry, ...)")
    try:
        rel = con.execute(query, params or {})
        columns = [d[0] for d in rel.description or []]
        return QueryResult(columns, rel.fetchall())
    except duckdb.Error as exc:
        raise QueryError(f"SQL error: {exc}") from exc
