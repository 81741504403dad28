"""Re-derive the lake state from the Delta table: after ``restore`` and by ``verify --repair``.

The Delta log is the linearisation point, and every chunk commit carries its spec, counts and
funnel in commitInfo, so chunk statuses, the funnel and the membership index can all be rebuilt
from the table and its log. What cannot be rebuilt is only a cache: the stat cache is cleared
(the next ingest re-hashes its inputs once) and Bloom files are rebuilt from tier 2 on open.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import engine
from lakecurate.lake.delta import DeltaStore, read_history
from lakecurate.lake.record import RESTORE, CommitRecord
from lakecurate.store.key_files import SPACES, KeyFiles
from lakecurate.store.state import StateStore

_SPEC_FIELDS = (
    "source_path",
    "source_sha256",
    "format",
    "chunk_index",
    "byte_start",
    "byte_end",
    "row_group_start",
    "row_group_end",
    "first_line",
    "input_sha256",
    "input_bytes",
)


@dataclass
class ResyncReport:
    """What a resync changed."""

    chunks_in_table: int
    requeued: list[str]
    restored: list[str]
    commits_added: int


def _log_commits(delta: DeltaStore) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every lakecurate commit in the log (oldest first), and per chunk the record of the
    commit that wrote the rows it has now.

    A chunk can be committed more than once (decided again after a supersede, or back after its
    bytes returned), and a restore to version V brings back the records as they were at V.
    """
    dt = delta.table()
    if dt is None:
        return [], {}
    commits: list[dict[str, Any]] = []
    history: list[tuple[int, str, dict[str, Any]]] = []  # (version, chunk key, record)
    restores: dict[int, int] = {}  # version of a restore commit -> the version it restored
    for entry in sorted(read_history(dt), key=lambda e: int(e["version"])):
        record = CommitRecord.parse(entry)
        if record.seq is None:
            continue  # not a lakecurate commit (compact, vacuum, another writer)
        version = int(entry["version"])
        kind = record.kind or str(entry.get("operation", "OTHER"))
        # One intent per chunk of a group commit (each chunk has its own seq), one per other
        # commit, as the state recorded them.
        for seq, keys in [(c.seq or record.seq, [c.chunk_key]) for c in record.chunks] or [
            (record.seq, record.chunk_keys)
        ]:
            commits.append(
                {
                    "seq": seq,
                    "kind": kind,
                    "chunk_keys": keys,
                    "run_id": record.run_id,
                    "delta_version": version,
                }
            )
        for chunk in record.chunks:
            if chunk.result is not None:
                history.append(
                    (
                        version,
                        chunk.chunk_key,
                        dict(chunk.result)
                        | {
                            "seq": chunk.seq or record.seq,
                            "delta_version": version,
                            "run_id": record.run_id,
                        },
                    )
                )
        if kind == RESTORE and record.restored is not None:
            restores[version] = record.restored
    return commits, _records_at(history, restores, None)


def _records_at(
    history: list[tuple[int, str, dict[str, Any]]], restores: dict[int, int], upto: int | None
) -> dict[str, dict[str, Any]]:
    """The newest record per chunk as of version ``upto`` (None: the latest), following
    restores: after a restore to V the records are those as of V, then later ones on top."""
    latest: dict[str, dict[str, Any]] = {}
    events = sorted(
        [(v, 1, None) for v in restores] + [(v, 0, i) for i, (v, _, _) in enumerate(history)]
    )
    for version, is_restore, i in events:
        if upto is not None and version > upto:
            break
        if is_restore:
            latest = _records_at(history, restores, restores[version])
        else:
            assert i is not None
            _, key, record = history[i]
            latest[key] = record
    return latest


INDEX_COLUMNS = ["id", "id_given", "kept", "reason", "content_hash", "chunk_key", "dup_of"]
"""The table's columns the membership index is derived from."""


def resync(state: StateStore, delta: DeltaStore) -> ResyncReport:
    """Make chunk statuses, the funnel and the index agree with the table's current version."""
    ds = delta.dataset()
    commits, latest = _log_commits(delta)
    if ds is None:
        present = pa.table({"chunk_key": pa.array([], pa.string())})
        rows = None
    else:
        rows = ds.to_table(columns=INDEX_COLUMNS)
        present = pa.table({"chunk_key": pc.unique(rows["chunk_key"])})
    present_keys = set(present["chunk_key"].to_pylist())
    records = [
        {
            "chunk_key": k,
            **{f: r["spec"][f] for f in _SPEC_FIELDS},
            "rows_in": r["rows_in"],
            "rows_kept": r["rows_kept"],
            "rows_malformed": r["rows_malformed"],
            "worker": r.get("worker"),
            # as ``StateStore.finish_chunks`` stores them: '; '-joined, JSON, NULL when none
            "gate_violations": "; ".join(r.get("gate_violations") or []) or None,
            "redactions": json.dumps(r["redactions"]) if r.get("redactions") else None,
            "seq": r["seq"],
            "delta_version": r["delta_version"],
            "run_id": r["run_id"],
        }
        for k, r in sorted(latest.items())
        if k in present_keys
    ]
    con = state.con
    with state.transaction():
        con.register("present", present)
        con.register(
            "records",
            pa.Table.from_pylist(records)
            if records
            else pa.table(
                {"chunk_key": pa.array([], pa.string()), "seq": pa.array([], pa.int64())}
            ),
        )
        con.register(
            "log_commits",
            pa.Table.from_pylist(commits)
            if commits
            else pa.table(
                {
                    "seq": pa.array([], pa.int64()),
                    "kind": pa.array([], pa.string()),
                    "chunk_keys": pa.array([], pa.list_(pa.string())),
                    "run_id": pa.array([], pa.string()),
                    "delta_version": pa.array([], pa.int64()),
                }
            ),
        )
        try:
            absent = [
                r[0] for r in con.execute(engine.q("state.chunks_absent_from_table")).fetchall()
            ]
            back = [r[0] for r in con.execute(engine.q("state.chunks_back_in_table")).fetchall()]
            con.execute(engine.q("state.requeue_absent"), {"keys": absent})
            con.execute(engine.q("state.clear_funnel_of_absent"), {"keys": absent})
            if records:
                con.execute(engine.q("state.upsert_present"))
                con.execute(engine.q("state.clear_funnel_of_present"))
                for key, record in sorted(latest.items()):
                    if key in present_keys:
                        state.add_funnel(key, record.get("funnel", []))
            if rows is not None and records:
                con.register("table_rows", rows)
            _write_index(con, rows is not None and bool(records))
            if rows is not None and records:
                dangling = [r[0] for r in con.execute(engine.q("state.dangling_chunks")).fetchall()]
                con.execute(engine.q("state.queue_redecide"), {"keys": dangling})
                con.unregister("table_rows")
            if con.execute(engine.q("state.has_near_index")).fetchall()[0][0]:
                con.execute(engine.q("state.near_forget_absent_docs"))
            con.execute(engine.q("state.clear_stat_cache"))
            before = con.execute(engine.q("state.count_commits")).fetchall()[0]
            con.execute(engine.q("state.insert_missing_commits"))
            after = con.execute(engine.q("state.count_commits")).fetchall()[0]
        finally:
            for name in ("present", "records", "log_commits"):
                con.unregister(name)
    return ResyncReport(len(present_keys), absent, back, int(after[0]) - int(before[0]))


def _write_index(con: duckdb.DuckDBPyConnection, from_table: bool) -> None:
    """The membership index written again, in the caller's transaction: empty, or (``from_table``)
    from the registered ``table_rows`` (``INDEX_COLUMNS`` of the table) and ``records`` (each
    chunk's commit seq), as ``recovery.content_rows`` and ``index_writer`` index a chunk."""
    files = KeyFiles(con)
    for space in SPACES:
        files.clear(space)
        if from_table:
            files.write(space, con.sql(engine.q(f"state.{space}_from_table")).to_arrow_table())


def rewrite_index(state: StateStore, delta: DeltaStore) -> None:
    """Write the membership index again from the table and the chunks' seqs in the state: for
    a lake whose key files were lost (the index folder deleted), before anything reads them."""
    ds = delta.dataset()
    con = state.con
    with state.transaction():
        if ds is None:
            _write_index(con, False)
            return
        con.register("table_rows", ds.to_table(columns=INDEX_COLUMNS))
        con.register("records", con.sql(engine.q("state.committed_seqs")).to_arrow_table())
        try:
            _write_index(con, True)
        finally:
            con.unregister("table_rows")
            con.unregister("records")


def catch_up(state: StateStore, delta: DeltaStore) -> str | None:
    """Rebuild a state that is behind the Delta log (deleted, an old backup) before anything
    commits on top of it; returns a note when it did.

    Commit seqs are app-transaction versions: a state that does not know the log's newest one
    would number new commits below it, and delta-rs does not refuse that, so every chunk the
    stale state calls PENDING would be committed a second time (issue 12, D3).
    """
    watermark = delta.watermark()
    known = state.last_seq()
    if watermark <= known:  # an open intent above the watermark is reconcile's job
        return None
    state.con.execute(engine.q("verify.drop_intents"))
    out = resync(state, delta)
    if state.con.execute(engine.q("state.has_near_index")).fetchall()[0][0]:
        with state.transaction():  # rebuilt from the committed text by the next ingest
            state.con.execute(engine.q("dedup.clear_docs"))
    return (
        f"the state knew commits up to seq {known} but the table's log holds seq "
        f"{watermark} (a deleted or restored-from-backup state.duckdb?): re-derived it "
        f"from the log ({out.chunks_in_table} chunk(s) committed) before going on"
    )


def logged_config(delta: DeltaStore) -> tuple[str | None, str | None]:
    """(config TOML text, config hash) of the newest chunk commit in the log that names them:
    the decisions the lake's documents were made with, whatever happened to lakecurate.toml."""
    dt = delta.table()
    if dt is None:
        return None, None
    for entry in read_history(dt):  # newest first
        record = CommitRecord.parse(entry)
        if record.config_text or record.config_hash:
            return record.config_text, record.config_hash
    return None, None
