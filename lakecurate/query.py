"""The read-only SQL surface: the state tables plus ``documents`` / ``docs`` / ``rejects`` views
over one version of the Delta table.

Read only by construction: the state file is attached READ_ONLY, the documents are an Arrow
dataset, external access is switched off once the views exist, and only statements that read
are accepted at all.
"""

from __future__ import annotations

import datetime
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


def parse_as_of(as_of: str | datetime.datetime) -> int:
    """A point in time as ms since the epoch; a time without a zone is UTC (commit times in
    the Delta log are UTC). Accepts ``2026-11-30``, ``2026-11-30 12:00``, ISO 8601."""
    if isinstance(as_of, str):
        try:
            as_of = datetime.datetime.fromisoformat(as_of.strip())
        except ValueError:
            raise LakeError(f"{as_of!r} is not a time: use e.g. '2026-11-30 12:00' (UTC) or "
                            "'2026-11-30T12:00:00+01:00'") from None
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=datetime.UTC)
    return int(as_of.timestamp() * 1000)


def resolve_version(documents: Path, version: int | None = None,
                    as_of: str | datetime.datetime | None = None) -> int | None:
    """The Delta version a reader binds to: ``version``, the one current at ``as_of``, or the
    latest (None before the first commit). A version or time that does not exist raises one
    ``LakeError`` naming the range that does."""
    if version is not None and as_of is not None:
        raise LakeError("give a version or a time (--version or --as-of), not both")
    store = DeltaStore(documents)
    if version is None and as_of is None:
        latest = store.version()
        return None if latest < 0 else latest
    return store.resolve(version, None if as_of is None else parse_as_of(as_of))


def open_reader(state_path: Path, documents: Path, version: int | None = None,
                as_of: str | datetime.datetime | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the lake attached read-only and the views bound to ``version``
    (or to the version current at ``as_of``; the latest when both are None)."""
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
        ds = _dataset(documents, version, as_of)
    except LakeError:
        con.close()
        raise
    except Exception as exc:
        con.close()
        raise LakeError(f"cannot read version {version} of {documents}: {exc}") from exc
    con.register("documents_dataset", _native_local(ds, documents) if ds is not None else pa.table(
        {f.name: pa.array([], f.type) for f in DOCUMENT_SCHEMA}))
    con.execute(engine.q("views.create"))
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def dataset_at(documents: Path, version: int | None = None,
               as_of: str | datetime.datetime | None = None) -> pds.Dataset:
    """The documents of one version as an Arrow dataset, ready to register in a reader
    (an empty table before the first commit)."""
    ds = _dataset(documents, version, as_of)
    if ds is None:
        return pds.dataset(pa.table({f.name: pa.array([], f.type) for f in DOCUMENT_SCHEMA}))
    return _native_local(ds, documents)


def _dataset(documents: Path, version: int | None,
             as_of: str | datetime.datetime | None) -> pds.Dataset | None:
    """The dataset of the version asked for; an old one is checked to still have its files."""
    store = DeltaStore(documents)
    bound = resolve_version(documents, version, as_of)
    if bound is None:
        return None  # no commit yet
    try:
        return store.open_version(bound)
    except LookupError as exc:
        raise store.unreadable(bound, exc) from exc


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
