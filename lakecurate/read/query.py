"""The read-only SQL surface: the state tables plus ``documents`` / ``docs`` / ``rejects`` views
over one version of the Delta table.

Read only by construction: the state tables are a private in-memory copy (the state file is
attached READ_ONLY only while they are copied, so readers never block a writer), the documents
are an Arrow dataset, external access is switched off once the views exist, and only plain
SELECTs (or EXPLAIN of one, or a few PRAGMAs that only describe) are accepted at all: DuckDB's
own parse tree decides, so a write wrapped in EXPLAIN ANALYZE or a CTE is refused too.

Arrow, Delta Lake and the state store are imported only inside the functions that use them, so
a reader of the state tables alone (``open_reader(..., views=False)``, what ``status`` needs)
loads none of them while no writer holds the lake.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from lakecurate import engine
from lakecurate.errors import (
    BusyError,
    LakeError,
    QueryError,
    ReadOnlyError,
    lock_conflict,
    one_line,
)
from lakecurate.lake.lock import reading
from lakecurate.lake.paths import LakePaths, key_folder
from lakecurate.lake.storage import Location

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pds

# Query nodes of a plain SELECT; DuckDB also has INSERT/UPDATE/DELETE/MERGE nodes, which a
# SELECT can hold in a CTE (`WITH d AS (DELETE ... RETURNING *) SELECT ...`).
_SELECT_NODES = {"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"}
# PRAGMAs that only describe (each is a SELECT from a table function).
_DESCRIBING_PRAGMAS = {
    "table_info",
    "show_tables",
    "show_tables_expanded",
    "show_databases",
    "database_list",
    "database_size",
    "storage_info",
    "version",
    "platform",
    "functions",
    "collations",
    "metadata_info",
    "show",
    "user_agent",
}


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
            raise LakeError(
                f"{as_of!r} is not a time: use e.g. '2026-11-30 12:00' (UTC) or "
                "'2026-11-30T12:00:00+01:00'"
            ) from None
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=datetime.UTC)
    return int(as_of.timestamp() * 1000)


def resolve_version(
    documents: Location, version: int | None = None, as_of: str | datetime.datetime | None = None
) -> int | None:
    """The Delta version a reader binds to: ``version``, the one current at ``as_of``, or the
    latest (None before the first commit). A version or time that does not exist raises one
    ``LakeError`` naming the range that does."""
    if version is not None and as_of is not None:
        raise LakeError("give a version or a time (--version or --as-of), not both")
    from lakecurate.lake.delta import DeltaStore

    store = DeltaStore(documents)
    if version is None and as_of is None:
        latest = store.version()
        return None if latest < 0 else latest
    return store.resolve(version, None if as_of is None else parse_as_of(as_of))


def open_reader(
    state_path: Path,
    documents: Location,
    version: int | None = None,
    as_of: str | datetime.datetime | None = None,
    *,
    tables: Collection[str] | None = None,
    views: bool = True,
    files: Sequence[str] = (),
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a private copy of the state tables (``tables``; all when
    None) as ``lake`` and the views bound to ``version`` (or to the version current at
    ``as_of``; when both are None, the version the copied state describes).

    With ``views=False`` only the state tables: no ``documents`` / ``docs`` / ``rejects``, so
    neither the Delta log nor Arrow is touched (``version`` and ``as_of`` must then be None);
    ``files`` (the live data files, what ``status`` passes) then become a ``documents`` view
    read by DuckDB's own Parquet reader, still without Arrow.

    The state file is open only while the tables are copied, so a reader never holds it
    while it runs and never stands in a writer's way (see ``_state_source``).
    """
    if not views and (version is not None or as_of is not None):
        raise ValueError("a reader without the documents views binds no version")
    for attempt in range(RETIRED_TRIES):
        try:
            return _open_reader(state_path, documents, version, as_of, tables, views, files)
        except _RetiredError:
            if attempt + 1 < RETIRED_TRIES:  # 0.25 s, 0.5 s, ...: 7 s before the last try
                time.sleep(RETIRED_WAIT_SECONDS * (attempt + 1))
    raise BusyError(
        f"the writer holding {state_path.parent} kept retiring the membership index's key files "
        "this reader's state snapshot names (a compact merging them, or commits forgotten); "
        "nothing is damaged: try again once it has finished"
    )


def _open_reader(
    state_path: Path,
    documents: Location,
    version: int | None,
    as_of: str | datetime.datetime | None,
    tables: Collection[str] | None,
    views: bool,
    files: Sequence[str],
) -> duckdb.DuckDBPyConnection:
    """``open_reader``, once."""
    con = engine.connect()
    try:
        con.execute(engine.q("views.attach_memory"))
        with _state_source(state_path) as (source, snapshot):
            done = _copy_state(con, source, tables, snapshot)
            # Bound while the source is held: no commit lands between the state and the
            # version read here. A snapshot names its own version (the ingest goes on).
            bound = (
                done
                if not views or (snapshot and version is None and as_of is None)
                else resolve_version(documents, version, as_of)
            )
        con.execute("USE lake")
        if views:
            register_documents(con, "documents_dataset", documents, bound)
            con.execute(engine.q("views.create"))
        elif files:
            files_view(con, documents, files, done)
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def files_view(
    con: duckdb.DuckDBPyConnection, documents: Location, files: Sequence[str], bound: int | None
) -> None:
    """A ``documents`` view over the given data files of the table (their ``kept`` partition
    from the path), and ``file_footers``, their column chunks: enough for what `status`
    shows, with no Arrow loaded. The view reads when queried, so the table's folder stays
    readable once external access is off. DuckDB reads local files only (its S3 support is an
    extension downloaded at run time): on object storage Arrow reads version ``bound``."""
    if not documents.is_local:
        register_documents(con, "documents_dataset", documents, bound)
        con.execute(engine.q("views.create"))
        con.register("file_footers", _footers(files))
        return
    con.execute(
        engine.q("report.allow_folder"), {"folders": [f"{documents.local.resolve()}{os.sep}"]}
    )
    rel = con.read_parquet(list(files), hive_partitioning=True, union_by_name=True)
    rel.create_view("documents_files")
    con.execute(engine.q("report.files_view"))
    con.execute(engine.q("report.footers_view"), {"files": list(files)})


def _footers(files: Sequence[str]) -> pa.Table:
    """What DuckDB's ``parquet_metadata`` gives ``file_footers``, read by Arrow: one row per
    column chunk of each file (name, column, values, compressed bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for name in files:
        loc = Location.of(name)
        meta = pq.read_metadata(loc.fs_path, filesystem=loc.fs)
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                col = meta.row_group(g).column(c)
                rows.append((name, col.path_in_schema, col.num_values, col.total_compressed_size))
    schema = pa.schema(
        [
            ("file_name", pa.string()),
            ("path_in_schema", pa.string()),
            ("num_values", pa.int64()),
            ("total_compressed_size", pa.int64()),
        ]
    )
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)


def shorten_paths(res: QueryResult, column: str) -> QueryResult:
    """``res`` with the folder every path in ``column`` shares cut off (a terminal is narrow)."""
    i = res.columns.index(column)
    paths = [str(r[i]) for r in res.rows]
    if len(paths) < 2:
        return res
    common = os.path.commonpath(paths)
    if not common or common == os.sep:
        return res
    cut = len(common.rstrip(os.sep)) + 1
    rows = [(*r[:i], str(r[i])[cut:], *r[i + 1 :]) for r in res.rows]
    return QueryResult(res.columns, rows)


def reader_version(
    state_path: Path,
    documents: Location,
    version: int | None = None,
    as_of: str | datetime.datetime | None = None,
) -> int | None:
    """The version ``open_reader`` would bind to now: ``version``, the one current at
    ``as_of``, the latest, or (while a writer runs) the one its published snapshot names."""
    if version is not None or as_of is not None:
        return resolve_version(documents, version, as_of)
    con = engine.connect()
    try:
        with _state_source(state_path) as (source, snapshot):
            if not snapshot:
                return resolve_version(documents)
            return _copy_state(con, source, ())
    finally:
        con.close()


def tables_for(text: str) -> tuple[str, ...]:
    """The state tables a query needs copied: the small ones always, a large one (index,
    near-dedup) only when the query names it."""
    from lakecurate.store.state import SNAPSHOT_TABLES

    con = engine.connect()
    try:
        named = con.get_table_names(text)
    except duckdb.Error:
        named = set()  # the query fails on its own, with its own message
    finally:
        con.close()
    return SNAPSHOT_TABLES + tuple(sorted(set(named) - set(SNAPSHOT_TABLES)))


def refuse_inside(path: Path, lake_root: Path, what: str) -> None:
    """Raise when ``path`` is inside the lake folder: read commands never write into the
    lake (an export or report there could overwrite its state or its data files)."""
    target, root = Path(path).resolve(), Path(lake_root).resolve()
    if target == root or root in target.parents:
        raise LakeError(
            f"{what} {path} is inside the lake {lake_root}: read commands never "
            "write into the lake; choose a path outside it"
        )


@contextmanager
def _state_source(state_path: Path) -> Iterator[tuple[Path, bool]]:
    """The state file to copy and whether it is the snapshot, held for the copy.

    With no writer, ``state.duckdb`` itself, under a shared lake lock (a writer that starts
    meanwhile waits for it, milliseconds); while a writer holds the lake, the snapshot it
    publishes (renamed into place, never written in place: reading it blocks nobody).
    """
    paths = LakePaths(state_path.parent)
    paths.require_state("read")
    with reading(paths.lock) as free:
        if free:
            yield state_path, False
            return
        snapshot = paths.snapshot
        if not snapshot.exists():
            raise LakeError(
                f"{state_path.parent} is held by a running writer that has not "
                "published a state snapshot yet; try again in a few seconds"
            )
        yield snapshot, True


def _copy_state(
    con: duckdb.DuckDBPyConnection,
    source: Path,
    tables: Collection[str] | None,
    snapshot: bool = False,
) -> int | None:
    """Copy ``tables`` of ``source`` into ``lake``; returns the newest DONE commit's Delta
    version in it (None before the first). ``snapshot``: ``source`` is a running writer's
    published snapshot (``_state_source``)."""
    try:
        con.execute(engine.q("views.attach_source"), {"path": str(source)})
    except duckdb.Error as exc:
        if holder := lock_conflict(exc):
            raise BusyError(
                f"{source} is open for writing by another process ({holder}): wait for it to "
                "finish, then try again"
            ) from exc
        raise LakeError(f"cannot read {source}: {exc}") from exc
    try:
        have = {name for (name,) in con.execute(engine.q("views.source_tables")).fetchall()}
        for name in sorted(have):
            if tables is None or name in tables:
                con.execute(engine.q("views.copy_table").format(table=engine.quote_ident(name)))
        from lakecurate.store.state import KEY_TABLES

        wanted = [s for s, n in KEY_TABLES.items() if tables is None or n in tables]
        if "index_files" in have and wanted:
            _copy_key_tables(con, source, wanted, snapshot)
        try:
            row = con.execute(engine.q("views.source_version")).fetchone()
        except duckdb.Error:
            row = None  # no commits table: nothing committed
        return None if row is None or row[0] is None else int(row[0])
    finally:
        con.execute(engine.q("views.detach_source"))


class _RetiredError(LakeError):
    """A key file a writer's snapshot names is gone: the writer retired it since (a compact
    merged it, or its commits were forgotten) and sweeps at its end; ``open_reader`` takes
    the state again."""


RETIRED_TRIES = 8  # attempts of a reader whose snapshot names retired key files
RETIRED_WAIT_SECONDS = 0.25  # times the attempt number: 7 s in all


def _copy_key_tables(
    con: duckdb.DuckDBPyConnection, source: Path, spaces: list[str], snapshot: bool = False
) -> None:
    """The membership index's keys (``store.key_files``) as the tables ``content_hashes`` and
    ``doc_ids`` they were, read by DuckDB from the key files the attached ``source`` registers
    (no Arrow: a state-only reader stays light). Copied from a running writer's ``snapshot``,
    a file named there may have been retired and swept since: that is no damage, and the
    reader takes the state again (``_RetiredError``)."""
    folder = key_folder(source)
    statements = {
        "content": ("views.copy_content_hashes", "views.empty_content_hashes"),
        "ids": ("views.copy_doc_ids", "views.empty_doc_ids"),
    }
    for space in spaces:
        copy, empty = statements[space]
        listed = con.execute(engine.q("views.key_files_of_source"), {"space": space}).fetchall()
        if not listed:
            con.execute(engine.q(empty))
            continue
        try:
            con.execute(engine.q(copy), {"files": [str(folder / f) for (f,) in listed]})
        except duckdb.Error as exc:
            if snapshot and any(not (folder / f).exists() for (f,) in listed):
                raise _RetiredError(f"key files of {source} retired") from exc
            raise LakeError(
                f"the membership index's key files in {folder} cannot be read "
                f"({one_line(exc)}): run `lakecurate verify --repair` to write the index "
                "again from the table"
            ) from exc


def _empty() -> pa.Table:
    import pyarrow as pa

    from lakecurate.schema import DOCUMENT_SCHEMA

    return pa.table({f.name: pa.array([], f.type) for f in DOCUMENT_SCHEMA})


def register_documents(
    con: duckdb.DuckDBPyConnection, name: str, documents: Location, version: int | None
) -> None:
    """Make ``name`` the documents of ``version`` in ``con`` (empty before the first commit).

    Files delta-rs rewrote (a delete or a predicate overwrite of a file that held other
    chunks, e.g. a changed input after `compact`) store their strings as string_view, and
    pyarrow cannot compare a string filter with their statistics ("no kernel matching (string,
    string_view)"): every filtered query failed. Those files are registered as a dataset of
    their own whose schema says string_view, and ``name`` is a view over both.
    """
    ds = _dataset(documents, version)
    if ds is None:
        con.register(name, _empty())
        return
    try:
        plain, views = _split_by_string_type(_native(ds, documents))
    except OSError as exc:  # a data file whose footer cannot be read
        raise damaged_table(exc) from exc
    if views is None:
        con.register(name, plain)
        return
    con.register(f"{name}_plain", plain)
    con.register(f"{name}_views", views)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {engine.quote_ident(name)} AS "
        f"SELECT * FROM {engine.quote_ident(name + '_plain')} UNION ALL BY NAME "
        f"SELECT * FROM {engine.quote_ident(name + '_views')}"
    )


# DuckDB's words when an Arrow dataset registered on the connection (the table's data files)
# fails while a query reads it.
_STREAM_FAILED = "reading the stream registered as"


def damaged_table(exc: BaseException) -> LakeError:
    """The error for a data file of the table that cannot be read: damage, not the query."""
    return LakeError(
        f"a data file of the table cannot be read ({one_line(exc)}): run `lakecurate verify "
        "--deep` to find it, then restore a version that does not need it"
    )


def _split_by_string_type(ds: pds.Dataset) -> tuple[pds.Dataset, pds.Dataset | None]:
    """(files whose strings are plain strings, files whose strings are string_view or None)."""
    import pyarrow as pa
    import pyarrow.dataset as pds

    if not isinstance(ds, pds.FileSystemDataset):
        return ds, None
    plain: list[Any] = []
    views: list[Any] = []
    for fragment in ds.get_fragments():
        is_view = any(pa.types.is_string_view(f.type) for f in fragment.physical_schema)
        (views if is_view else plain).append(fragment)
    if not views:
        return ds, None
    view_schema = pa.schema(
        [f.with_type(pa.string_view()) if pa.types.is_string(f.type) else f for f in ds.schema]
    )
    return (
        pds.FileSystemDataset(plain, ds.schema, ds.format, ds.filesystem),
        pds.FileSystemDataset(views, view_schema, ds.format, ds.filesystem),
    )


def _dataset(documents: Location, bound: int | None) -> pds.Dataset | None:
    """The dataset of one version; an old one is checked to still have its files."""
    if bound is None:
        return None  # no commit yet
    from lakecurate.lake.delta import DeltaStore

    store = DeltaStore(documents)
    try:
        return store.open_version(bound)
    except LookupError as exc:
        raise store.unreadable(bound, exc) from exc
    except LakeError:
        raise
    except Exception as exc:
        raise LakeError(f"cannot read version {bound} of {documents}: {exc}") from exc


def _native(ds: pds.Dataset, root: Location) -> pds.Dataset:
    """``ds`` with its Parquet files read through Arrow's own filesystem (local or S3).

    deltalake's dataset reads through a filesystem implemented in Python (a ``PyFileSystem``
    over its ``DeltaStorageHandler``). When DuckDB stops a scan early (``LIMIT``), Arrow's
    prefetching I/O threads are still calling into that Python object while the interpreter
    shuts down, and the process segfaults, aborts or hangs *after* printing the right answer
    (``lakecurate sql "SELECT * FROM docs LIMIT 3"`` exited 134/139 or hung most of the time).
    The native filesystem has no Python in the read path. Same fragments, schema and partition
    expressions (they carry the file statistics used for pruning); a dataset whose files are
    not named relative to the table is returned unchanged. (The natural home of this is
    ``DeltaStore.dataset``.)
    """
    import pyarrow.dataset as pds
    import pyarrow.fs as pafs

    if not isinstance(ds, pds.FileSystemDataset) or not isinstance(
        ds.filesystem, pafs.PyFileSystem
    ):
        return ds
    fragments = list(ds.get_fragments())
    if any("://" in f.path for f in fragments):
        return ds
    fs = pafs.SubTreeFileSystem(root.fs_path, root.fs)
    fmt = ds.format
    return pds.FileSystemDataset(
        [
            fmt.make_fragment(f.path, filesystem=fs, partition_expression=f.partition_expression)
            for f in fragments
        ],
        ds.schema,
        fmt,
        fs,
    )


def run(
    con: duckdb.DuckDBPyConnection, query: str, params: dict[str, Any] | None = None
) -> QueryResult:
    """Run one read-only query; anything that would write is refused with a clear message."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"SQL error: {exc}") from exc
    if not statements:
        raise QueryError("empty query")
    for st in statements:
        _check_reads(con, _kind(st), st.query)
    try:
        rel = con.execute(query, params or {})
        columns = [d[0] for d in rel.description or []]
        return QueryResult(columns, rel.fetchall())
    except duckdb.Error as exc:
        if _STREAM_FAILED in str(exc):  # Arrow could not read a data file: damage, not SQL
            raise damaged_table(exc) from exc
        raise QueryError(f"SQL error: {exc}") from exc


def _kind(statement: Any) -> str:
    return str(statement.type).rsplit(".", 1)[-1]


def _refused(what: str) -> ReadOnlyError:
    return ReadOnlyError(
        f"`lakecurate sql` is read-only: {what} refused. The lake changes only "
        "through lakecurate commands (ingest, retry, ...)"
    )


def _check_reads(con: duckdb.DuckDBPyConnection, kind: str, text: str) -> None:
    """Refuse ``text`` (one statement of type ``kind``) unless it only reads."""
    if kind == "SELECT":
        _check_select(con, text)
    elif kind == "EXPLAIN":  # EXPLAIN ANALYZE runs what it wraps: judge that
        inner = _explained(con, text)
        if len(inner) != 1 or _kind(inner[0]) != "SELECT":
            raise _refused(f"EXPLAIN of {', '.join(_kind(i) for i in inner) or 'nothing'} is")
        _check_select(con, inner[0].query)
    elif kind == "LOAD":  # DuckDB's type for INSTALL and FORCE INSTALL too
        words = [w.upper() for w in _words(text)[:2]]
        verb = " ".join(words) if words[:1] == ["FORCE"] else words[0]
        does = "downloads" if verb.endswith("INSTALL") else "loads"
        raise ReadOnlyError(
            f"`lakecurate sql` is read-only: {verb} refused (it {does} a DuckDB extension). It "
            "has the extensions it needs; to use another, run duckdb yourself over the lake's "
            "files (state.duckdb, and documents/ with delta_scan)"
        )
    elif kind == "PRAGMA":
        words = _words(text)
        name = words[1].lower() if len(words) > 1 else ""
        if name not in _DESCRIBING_PRAGMAS or "=" in words:
            raise _refused(f"PRAGMA {name} is")
    else:
        raise _refused(f"{kind} statements are")


def _check_select(con: duckdb.DuckDBPyConnection, text: str) -> None:
    """A SELECT whose parse tree holds only query nodes that read."""
    try:
        tree = json.loads(con.execute(engine.q("views.serialize"), {"sql": text}).fetchone()[0])  # type: ignore[index]
    except duckdb.Error as exc:
        raise QueryError(f"SQL error: {exc}") from exc
    if tree.get("error"):
        raise _refused("a statement that is not a plain SELECT is")
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str) and kind.endswith("_NODE") and kind not in _SELECT_NODES:
                raise _refused(f"a SELECT holding a {kind.removesuffix('_QUERY_NODE')} is")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _tokens(text: str) -> list[tuple[int, str]]:
    """(offset, text) of each token of ``text``, comments left out (DuckDB's tokenizer)."""
    tokens = duckdb.tokenize(text)
    ends = [pos for pos, _ in tokens[1:]] + [len(text)]
    return [
        (pos, text[pos:end].strip())
        for (pos, kind), end in zip(tokens, ends, strict=True)
        if kind != duckdb.token_type.comment
    ]


def _words(text: str) -> list[str]:
    return [word for _, word in _tokens(text)]


def _explained(con: duckdb.DuckDBPyConnection, text: str) -> list[Any]:
    """The statement(s) an EXPLAIN wraps: after ``EXPLAIN [ANALYZE]``, and after its
    ``(options)`` unless the parenthesis is the query itself (``EXPLAIN (SELECT 1)``)."""
    tokens = _tokens(text)[1:]  # the first is EXPLAIN
    while tokens and tokens[0][1].upper() in ("ANALYZE", "ANALYSE"):
        tokens = tokens[1:]
    if not tokens:
        return []
    try:
        return con.extract_statements(text[tokens[0][0] :])
    except duckdb.Error:
        pass  # "(FORMAT json) SELECT ...": options first
    depth = 0
    for pos, word in tokens:
        if depth == 0 and word != "(":
            try:
                return con.extract_statements(text[pos:])
            except duckdb.Error:
                return []
        depth += word.count("(") - word.count(")")
    return []
