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

import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import engine
from lakecurate.lake.delta import DeltaStore
from lakecurate.state import StateStore

_SPEC_FIELDS = ("source_path", "source_sha256", "format", "chunk_index", "byte_start",
                "byte_end", "row_group_start", "row_group_end", "first_line", "input_sha256",
                "input_bytes")


@dataclass
class ResyncReport:
    """What a resync changed."""

    chunks_in_table: int
    requeued: list[str]
    restored: list[str]
    commits_added: int


def _log_commits(delta: DeltaStore) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every lakecurate commit in the log (oldest first), and the newest record per chunk."""
    dt = delta.table()
    if dt is None:
        return [], {}
    commits, latest = [], {}
    for entry in sorted(dt.history(), key=lambda e: int(e["version"])):
        if "lakecurate.seq" not in entry:
            continue
        key = entry.get("lakecurate.chunk_key")
        kind = "APPEND" if key else ("SUPERSEDE" if "lakecurate.superseded" in entry
                                     else str(entry.get("operation", "OTHER")))
        keys = [key] if key else [k for k in entry.get("lakecurate.superseded", "").split(",")
                                  if k]
        commits.append({"seq": int(entry["lakecurate.seq"]), "kind": kind, "chunk_keys": keys,
                        "run_id": entry.get("lakecurate.run_id"),
                        "delta_version": int(entry["version"])})
        if key and "lakecurate.result" in entry:
            latest[key] = json.loads(entry["lakecurate.result"]) | {
                "seq": int(entry["lakecurate.seq"]), "delta_version": int(entry["version"]),
                "run_id": entry.get("lakecurate.run_id")}
    return commits, latest


def resync(state: StateStore, delta: DeltaStore) -> ResyncReport:
    """Make chunk statuses, the funnel and the index agree with the table's current version."""
    ds = delta.dataset()
    commits, latest = _log_commits(delta)
    if ds is None:
        present = pa.table({"chunk_key": pa.array([], pa.string())})
        rows = None
    else:
        rows = ds.to_table(columns=["id", "id_given", "kept", "reason", "content_hash",
                                    "chunk_key"])
        present = pa.table({"chunk_key": pc.unique(rows["chunk_key"])})
    present_keys = set(present["chunk_key"].to_pylist())
    records = [
        {"chunk_key": k, **{f: r["spec"][f] for f in _SPEC_FIELDS},
         "rows_in": r["rows_in"], "rows_kept": r["rows_kept"],
         "rows_malformed": r["rows_malformed"], "worker": r.get("worker"), "seq": r["seq"],
         "delta_version": r["delta_version"], "run_id": r["run_id"]}
        for k, r in sorted(latest.items()) if k in present_keys]
    con = state.con
    with state.transaction():
        con.register("present", present)
        con.register("records", pa.Table.from_pylist(records) if records else pa.table(
            {"chunk_key": pa.array([], pa.string()), "seq": pa.array([], pa.int64())}))
        con.register("log_commits", pa.Table.from_pylist(commits) if commits else pa.table({
            "seq": pa.array([], pa.int64()), "kind": pa.array([], pa.string()),
            "chunk_keys": pa.array([], pa.list_(pa.string())),
            "run_id": pa.array([], pa.string()), "delta_version": pa.array([], pa.int64())}))
        try:
            absent = [r[0] for r in con.execute(
                engine.q("state.chunks_absent_from_table")).fetchall()]
            back = [r[0] for r in con.execute(engine.q("state.chunks_back_in_table")).fetchall()]
            con.execute(engine.q("state.requeue_absent"), {"keys": absent})
            if records:
                con.execute(engine.q("state.upsert_present"))
                con.execute(engine.q("state.clear_funnel_of_present"))
                for key, record in sorted(latest.items()):
                    if key in present_keys:
                        state.add_funnel(key, record.get("funnel", []))
            con.execute(engine.q("state.clear_index"))
            con.execute(engine.q("state.clear_ids"))
            if rows is not None and records:
                con.register("table_rows", rows)
                con.execute(engine.q("state.index_from_table"))
                con.execute(engine.q("state.ids_from_table"))
                con.unregister("table_rows")
            if con.execute(engine.q("state.has_near_index")).fetchall()[0][0]:
                con.execute(engine.q("state.near_forget_absent_bands"))
                con.execute(engine.q("state.near_forget_absent_docs"))
            con.execute(engine.q("state.clear_stat_cache"))
            before = con.execute(engine.q("state.count_commits")).fetchall()[0]
            con.execute(engine.q("state.insert_missing_commits"))
            after = con.execute(engine.q("state.count_commits")).fetchall()[0]
        finally:
            for name in ("present", "records", "log_commits"):
                con.unregister(name)
    return ResyncReport(len(present_keys), absent, back,
                        int(after[0]) - int(before[0]))  # type: ignore[index]
