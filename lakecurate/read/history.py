"""What changed between versions: ``history`` (one row per Delta commit) and ``diff A B``.

History is read from the Delta log, which is the linearisation point: every lakecurate commit
carries its seq, chunk key(s), run id and config hash in commitInfo; maintenance commits
(OPTIMIZE, VACUUM) carry the run that made them. The state's ``runs`` table adds the command
and fills in the config hash for commits that do not carry one (a supersede, a restore).

A document's identity across versions is its place in the input, ``(chunk_key, source_line)``:
a chunk key is a content hash, so the same key and line are the same input record in every
version. ``diff`` is a full outer join on that key; what it counts adds up exactly:
``added.rows - removed.rows`` is the change of ``count(*) FROM documents`` and
``sum(kept_b) - sum(kept_a)`` over all kinds is the change of ``count(*) FROM docs``.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakecurate import engine
from lakecurate.errors import LakeError
from lakecurate.lake.delta import DeltaStore
from lakecurate.lake.record import APPEND, REDECIDE, SUPERSEDE, CommitRecord
from lakecurate.lake.storage import Location
from lakecurate.read import query
from lakecurate.store.state import SNAPSHOT_TABLES

_LOG_SCHEMA = pa.schema(
    [
        ("version", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("operation", pa.string()),
        ("seq", pa.int64()),
        ("chunk_keys", pa.list_(pa.string())),
        ("rows_added", pa.int64()),
        ("rows_removed", pa.int64()),
        ("files_added", pa.int64()),
        ("files_removed", pa.int64()),
        ("run_id", pa.string()),
        ("config_hash", pa.string()),
        ("detail", pa.string()),
    ]
)


def _int(metrics: dict[str, Any], *names: str) -> int | None:
    for name in names:
        if metrics.get(name) is not None:
            return int(metrics[name])
    return None


def _operation(entry: dict[str, Any], record: CommitRecord) -> str:
    """lakecurate's name for a commit: APPEND, REDECIDE, SUPERSEDE, RESTORE, COMPACT, ..."""
    if record.kind in (APPEND, REDECIDE, SUPERSEDE):
        return record.kind
    op = str(entry.get("operation", "UNKNOWN"))
    return {
        "OPTIMIZE": "COMPACT",
        "VACUUM START": "VACUUM",
        "VACUUM END": "VACUUM END",
        "WRITE": "APPEND",
    }.get(op, op)


def log_rows(delta: DeltaStore, entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per commit (``_LOG_SCHEMA``): what it did, in documents and in files.

    Rows added and removed come from the commit's own metrics (WRITE, DELETE). A RESTORE
    reports only file counts, so its rows come from the file statistics of the versions on
    either side of it (two log reads; restores are rare).
    """
    out = []
    for e in entries:
        version = int(e["version"])
        metrics = e.get("operationMetrics") or {}
        params = e.get("operationParameters") or {}
        record = CommitRecord.parse(e)
        op = _operation(e, record)
        keys = record.chunk_keys
        added = removed = 0
        files_added = _int(metrics, "num_added_files", "numFilesAdded", "numRestoredFile")
        files_removed = _int(metrics, "num_removed_files", "numFilesRemoved", "numRemovedFile")
        detail = ""
        if op == "APPEND":
            added = _int(metrics, "num_added_rows") or 0
        elif op == "REDECIDE":  # the chunk's rows swapped for newly decided ones, one for one
            added = removed = record.rows_in or 0
            detail = "decided again: documents it referred to left the lake"
        elif op == "SUPERSEDE" or e.get("operation") == "DELETE":
            removed = _int(metrics, "num_deleted_rows") or 0
        elif op == "RESTORE":
            before, after = delta.files_at(version - 1), delta.files_at(version)
            added = sum(n or 0 for p, n in after.items() if p not in before)
            removed = sum(n or 0 for p, n in before.items() if p not in after)
            restored = record.restored if record.restored is not None else params.get("version")
            detail = f"restored version {restored}"
        elif op == "COMPACT":
            detail = f"{files_removed} file(s) rewritten as {files_added}"
        elif op == "VACUUM":
            hours = int(params.get("specifiedRetentionMillis", 0) or 0) / 3_600_000
            detail = (
                f"retention {hours:g} h, {metrics.get('numFilesToDelete', 0)} file(s) to delete"
            )
            files_added = files_removed = None
        elif op == "VACUUM END":
            detail = f"{metrics.get('numDeletedFiles', 0)} file(s) deleted"
            files_added = files_removed = None
        out.append(
            {
                "version": version,
                "timestamp": datetime.datetime.fromtimestamp(
                    int(e["timestamp"]) / 1000, datetime.UTC
                ),
                "operation": op,
                "seq": record.seq,
                "chunk_keys": keys,
                "rows_added": added,
                "rows_removed": removed,
                "files_added": files_added,
                "files_removed": files_removed,
                "run_id": record.run_id,
                "config_hash": record.config_hash,
                "detail": detail or _result_detail(record),
            }
        )
    return out


def _result_detail(record: CommitRecord) -> str:
    """``240 in, 208 kept`` for a chunk commit (``3 chunks: ...`` for a group), from its
    recorded chunks."""
    if not record.chunks:
        return ""
    counts = f"{record.rows_in} in, {record.rows_kept} kept"
    n = len(record.chunks)
    return counts if n == 1 else f"{n} chunks: {counts}"


def history(state: Path, documents: Location, limit: int | None = None) -> query.QueryResult:
    """Every commit of the table, oldest first (only the newest ``limit`` when given)."""
    delta = DeltaStore(documents)
    entries = delta.log_entries()
    if limit is not None:
        entries = entries[-limit:] if limit > 0 else []
    log = pa.Table.from_pylist(log_rows(delta, entries), schema=_LOG_SCHEMA)
    con = query.open_reader(state, documents, tables=SNAPSHOT_TABLES)
    try:
        con.register("log_commits", log)
        return query.run(con, engine.q("history.history"))
    finally:
        con.close()


def diff(
    state: Path, documents: Location, a: int, b: int, rows: bool = False, limit: int | None = None
) -> query.QueryResult:
    """Documents added, removed and changed in decision from version ``a`` to ``b``.

    The summary has one row per kind (``added``, ``removed``, ``changed``) with the number of
    rows and how many of them were kept at ``a`` and at ``b``. With ``rows`` the documents
    themselves, one per line, in input order (the first ``limit`` when given).
    """
    if a == b:
        raise LakeError(f"diff {a} {b}: the two versions are the same; give two different ones")
    con = query.open_reader(state, documents, b, tables=())  # documents only
    try:
        query.register_documents(con, "documents_a", documents, query.resolve_version(documents, a))
        con.execute(engine.q("history.diff_pairs"))
        if rows:
            res = query.run(con, engine.q("history.diff_rows"), {"limit": limit})
        else:
            res = query.run(con, engine.q("history.diff_summary"))
    finally:
        con.close()
    return res
