"""The driver's side of a chunk: lake-wide decisions, the Delta commit, and the state after it.

The protocol (design section 6): record the intent (COMMITTING, seq) in DuckDB, commit to Delta
with app transaction ``seq``, then mark SUCCESS and index the kept hashes in one DuckDB
transaction. The Delta log is the linearisation point: on start, ``reconcile`` finalises intents
the log has (seq <= watermark) and abandons the others, deleting any data file their interrupted
write left behind, so nothing is committed twice and nothing half-written stays in the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate import engine, faults
from lakecurate.index import MembershipIndex
from lakecurate.lake.delta import DeltaStore
from lakecurate.near import NearDedup
from lakecurate.rebuild import resync
from lakecurate.state import StateStore
from lakecurate.types import ChunkResult, ChunkSpec
from lakecurate.worker import BANDS_COLUMN, SIGNATURE_COLUMN


@dataclass
class CommitOutcome:
    """What one chunk's commit did."""

    chunk_key: str
    version: int
    rows_in: int
    rows_kept: int
    lake_dups: int


class Committer:
    """Commits staged chunks one at a time, in the order the runner hands them over."""

    def __init__(self, state: StateStore, delta: DeltaStore, index: MembershipIndex,
                 run_id: str, config_hash: str, exact_dedup: bool,
                 near: NearDedup | None = None) -> None:
        self.near = near
        self._scratch_con: duckdb.DuckDBPyConnection | None = None
        self.state = state
        self.delta = delta
        self.index = index
        self.run_id = run_id
        self.config_hash = config_hash
        self.exact_dedup = exact_dedup

    # -- decisions -------------------------------------------------------------------------
    def decide(self, staged: pa.Table) -> pa.Table:
        """Apply the lake-wide decisions (duplicate ids, exact duplicates) to a staged chunk."""
        not_malformed = pc.invert(pc.fill_null(pc.starts_with(staged["reason"], "malformed:"),
                                               False))
        given = pc.and_(staged["id_given"], not_malformed)
        seen_ids = self.index.ids_seen(pc.unique(pc.filter(staged["id"], given)))
        candidates = pc.is_null(staged["reason"])
        seen_content = (self.index.content_seen(pc.unique(pc.filter(staged["content_hash"],
                                                                      candidates)))
                        if self.exact_dedup else
                        pa.table({"content_hash": pa.array([], pa.string()),
                                  "doc_id": pa.array([], pa.string())}))
        con = self._scratch()
        con.register("staged", staged)
        con.register("seen_ids", seen_ids)
        con.register("seen_content", seen_content)
        try:
            rows = con.sql(engine.q("commit.apply_lake_decisions"),
                           params={"exact": self.exact_dedup}).to_arrow_table()
        finally:
            for name in ("staged", "seen_ids", "seen_content"):
                con.unregister(name)
        return rows.cast(staged.schema)

    def _scratch(self) -> duckdb.DuckDBPyConnection:
        """One in-memory DuckDB for the driver's per-chunk SQL (opening one costs ~10 ms)."""
        if self._scratch_con is None:
            self._scratch_con = engine.connect(threads=1)
        return self._scratch_con

    def close(self) -> None:
        if self._scratch_con is not None:
            self._scratch_con.close()
            self._scratch_con = None

    def _funnel(self, worker_steps: Sequence[Sequence[object]],
                rows: pa.Table) -> list[tuple[str, int, int]]:
        """The worker's steps (its own dedup is redone here), then the lake-wide ones."""
        con = self._scratch()
        con.register("decided", rows)
        try:
            lake = [tuple(r) for r in con.execute(engine.q("commit.dedup_funnel")).fetchall()]
        finally:
            con.unregister("decided")
        steps = [tuple(s) for s in worker_steps if not str(s[0]).startswith("exact_dup")]
        return [*steps, *lake]  # type: ignore[list-item]

    def _index(self, rows: pa.Table, seq: int,
               near_writer: Callable[[], None] | None = None) -> Callable[[object], None]:
        """The index writer for this chunk, called inside the state transaction."""
        kept = rows.filter(rows["kept"]).select(["content_hash", "id", "chunk_key"])
        not_malformed = pc.invert(pc.fill_null(pc.starts_with(rows["reason"], "malformed:"),
                                               False))
        given = rows.filter(pc.and_(rows["id_given"], not_malformed)).select(["id", "chunk_key"])

        def write(_kept: object) -> None:
            self.index.add(kept, given, seq)
            if near_writer is not None:
                near_writer()

        return write

    # -- the protocol ----------------------------------------------------------------------
    def commit(self, spec: ChunkSpec, result: ChunkResult) -> CommitOutcome:
        """Commit one staged chunk exactly once.

        The commitInfo carries the chunk's spec and result, so the state can be rebuilt from the
        Delta log alone (``lakecurate verify --repair``).
        """
        staged = pq.read_table(result.staged_path).replace_schema_metadata(None)
        key = result.chunk_key
        # The seq comes first: near dedup orders documents by it.
        seq = self.state.begin_commit("APPEND", [key], self.run_id, self.delta.version())
        rows = self.decide(staged)
        funnel = self._funnel(result.filter_stats, rows)
        near_writer = None
        if self.near is not None and SIGNATURE_COLUMN in rows.column_names:
            kept_before = int(pc.sum(rows["kept"]).as_py() or 0)
            rows, near_dups, near_writer = self.near.apply(rows, seq)
            funnel.append(("near_dup", kept_before, near_dups))
        elif SIGNATURE_COLUMN in rows.column_names:
            rows = rows.drop_columns([SIGNATURE_COLUMN, BANDS_COLUMN])
        kept = int(pc.sum(rows["kept"]).as_py() or 0)
        faults.hit("before_delta_commit", key)
        record = {"rows_in": result.rows_in, "rows_malformed": result.rows_malformed,
                  "rows_kept": kept, "worker": result.worker, "funnel": funnel,
                  "gate_violations": result.gate_violations, "redactions": result.redactions,
                  "spec": asdict(spec) | {"format": spec.format.value}}
        metadata = {"lakecurate.chunk_key": key, "lakecurate.run_id": self.run_id,
                    "lakecurate.config_hash": self.config_hash,
                    "lakecurate.rows_in": str(result.rows_in),
                    "lakecurate.rows_kept": str(kept),
                    "lakecurate.result": json.dumps(record)}
        version = self.delta.append(rows, seq, metadata)
        faults.hit("after_delta_commit", key)
        self.state.finish_append(seq, result, version, rows.filter(rows["kept"]), funnel,
                                 self.run_id, self._index(rows, seq, near_writer))
        Path(result.staged_path).unlink(missing_ok=True)
        return CommitOutcome(key, version, result.rows_in, kept, funnel[-1][2])

    def supersede(self, keys: Sequence[str]) -> int:
        """Remove the rows of committed chunks whose input changed; returns rows removed."""
        if not keys:
            return 0
        seq = self.state.begin_commit("SUPERSEDE", keys, self.run_id, self.delta.version())
        faults.hit("before_delta_commit", "supersede")
        version, removed = self.delta.delete_chunks(
            keys, seq, {"lakecurate.superseded": ",".join(keys),
                        "lakecurate.run_id": self.run_id})
        self.state.finish_supersede(seq, keys, version, removed, self.run_id,
                                    self.index.remove_chunks)
        return removed

    def restore(self, version: int) -> int:
        """Make ``version`` current (a new Delta commit) and re-derive the state from it."""
        seq = self.state.begin_commit("RESTORE", [], self.run_id, self.delta.version())
        faults.hit("before_delta_commit", "restore")
        new_version = self.delta.restore(version, seq, {"lakecurate.restored": str(version),
                                                        "lakecurate.run_id": self.run_id})
        faults.hit("after_delta_commit", "restore")
        self.finish_restore(seq, new_version)
        return new_version

    def finish_restore(self, seq: int, version: int) -> None:
        resync(self.state, self.delta)
        self.state.finish_commit(seq, version)

    # -- recovery --------------------------------------------------------------------------
    def reconcile(self, staging_dir: Path) -> list[str]:
        """Bring DuckDB in line with the Delta log after a crash; returns what was done."""
        notes: list[str] = []
        watermark = self.delta.watermark()
        for seq, kind, keys, intent_ns, _version_before in self.state.open_intents():
            if seq <= watermark:
                self._finalise(seq, kind, keys)
                notes.append(f"finalised commit {seq} ({kind} {', '.join(keys)}) found in Delta")
            else:
                removed = self.delta.remove_unreferenced(intent_ns)
                self.state.abandon_intent(seq, keys, self.run_id)
                notes.append(f"commit {seq} ({kind}) never reached Delta; will redo it"
                             + (f"; removed {removed} orphan data file(s)" if removed else ""))
        self._clean_staging(staging_dir)
        return notes

    def _finalise(self, seq: int, kind: str, keys: list[str]) -> None:
        """Complete step 4 of a commit the Delta log has, from what the log and table hold."""
        entry = self.delta.find_commit(seq)
        version = int(entry["version"]) if entry else self.delta.version()
        if kind == "SUPERSEDE":
            self.state.finish_supersede(seq, keys, version, 0, self.run_id,
                                        self.index.remove_chunks)
            return
        if kind == "RESTORE":
            self.finish_restore(seq, version)
            return
        (key,) = keys
        ds = self.delta.dataset()
        assert ds is not None
        rows = ds.to_table(filter=pc.field("chunk_key") == key)
        record = json.loads(entry["lakecurate.result"]) if entry else {}
        kept = int(pc.sum(rows["kept"]).as_py() or 0)
        malformed = int(record.get("rows_malformed", 0))
        result = ChunkResult(chunk_key=key, staged_path="", input_sha256="", config_hash="",
                             rows_in=rows.num_rows, rows_kept=kept,
                             rows_dropped=rows.num_rows - kept - malformed,
                             rows_malformed=malformed, blank_lines=0,
                             worker=str(record.get("worker", "")),
                             gate_violations=list(record.get("gate_violations", [])),
                             redactions=dict(record.get("redactions", {})))
        funnel = [tuple(s) for s in record.get("funnel", [])]
        near_writer = (self.near.writer_from_committed(rows, seq)
                       if self.near is not None else None)
        self.state.finish_append(seq, result, version, rows.filter(rows["kept"]), funnel,
                                 self.run_id, self._index(rows, seq, near_writer))

    def _clean_staging(self, staging_dir: Path) -> None:
        """Remove temp files of interrupted writes and staged files already committed."""
        if not staging_dir.exists():
            return
        temps = [p for p in staging_dir.iterdir() if ".tmp_" in p.name]
        for path in temps + committed_staged_files(staging_dir, self.state):
            path.unlink(missing_ok=True)


def committed_staged_files(staging_dir: Path, state: StateStore) -> list[Path]:
    """Staged files of chunks already committed: nothing needs them any more (those of
    pending chunks are what a resumed run commits without redoing the work)."""
    if not staging_dir.is_dir():
        return []
    done = {r[0] for r in state.con.execute(engine.q("state.success_keys")).fetchall()}
    return sorted(p for p in staging_dir.iterdir()
                  if ".tmp_" not in p.name and p.name.split(".", 1)[0] in done)
