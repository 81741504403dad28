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
from lakecurate.ingest.near import NearDedup
from lakecurate.lake.delta import DeltaStore
from lakecurate.steps.near.signatures import add_signatures
from lakecurate.store.index import MembershipIndex
from lakecurate.store.rebuild import CONFIG_KEY, resync
from lakecurate.store.state import StateStore
from lakecurate.types import BANDS_COLUMN, SIGNATURE_COLUMN, ChunkResult, ChunkSpec

LAKE_REASONS = ("duplicate_id", "exact_dup", "near_dup")
"""The verdicts the driver makes against the whole lake; a re-decision makes them again."""


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

    def __init__(
        self,
        state: StateStore,
        delta: DeltaStore,
        index: MembershipIndex,
        run_id: str,
        config_hash: str,
        exact_dedup: bool,
        near: NearDedup | None = None,
        config_text: str = "",
    ) -> None:
        self.near = near
        self.config_text = config_text
        self.redecided = 0  # chunks decided again by this committer
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
        not_malformed = pc.invert(
            pc.fill_null(pc.starts_with(staged["reason"], "malformed:"), False)
        )
        given = pc.and_(staged["id_given"], not_malformed)
        seen_ids = self.index.ids_seen(pc.unique(pc.filter(staged["id"], given)))
        candidates = pc.is_null(staged["reason"])
        seen_content = (
            self.index.content_seen(pc.unique(pc.filter(staged["content_hash"], candidates)))
            if self.exact_dedup
            else pa.table(
                {"content_hash": pa.array([], pa.string()), "doc_id": pa.array([], pa.string())}
            )
        )
        con = self._scratch()
        con.register("staged", staged)
        con.register("seen_ids", seen_ids)
        con.register("seen_content", seen_content)
        try:
            rows = con.sql(
                engine.q("commit.apply_lake_decisions"), params={"exact": self.exact_dedup}
            ).to_arrow_table()
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

    def _funnel(
        self, worker_steps: Sequence[Sequence[object]], rows: pa.Table
    ) -> list[tuple[str, int, int]]:
        """The worker's steps (its own dedup is redone here), then the lake-wide ones."""
        con = self._scratch()
        con.register("decided", rows)
        try:
            lake = [tuple(r) for r in con.execute(engine.q("commit.dedup_funnel")).fetchall()]
        finally:
            con.unregister("decided")
        steps = [tuple(s) for s in worker_steps if not str(s[0]).startswith("exact_dup")]
        return [*steps, *lake]  # type: ignore[list-item]

    def _index(
        self, rows: pa.Table, seq: int, near_writer: Callable[[], None] | None = None
    ) -> Callable[[object], None]:
        """The index writer for this chunk, called inside the state transaction."""
        kept = rows.filter(rows["kept"]).select(["content_hash", "id", "chunk_key"])
        not_malformed = pc.invert(pc.fill_null(pc.starts_with(rows["reason"], "malformed:"), False))
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
        # The seq comes first: near dedup orders documents by it.
        seq = self.state.begin_commit(
            "APPEND", [result.chunk_key], self.run_id, self.delta.version()
        )
        outcome = self._decide_and_commit(spec, result, staged, seq, replace=False)
        Path(result.staged_path).unlink(missing_ok=True)
        return outcome

    def _decide_and_commit(
        self, spec: ChunkSpec, result: ChunkResult, staged: pa.Table, seq: int, replace: bool
    ) -> CommitOutcome:
        """The lake-wide decisions, the Delta commit (an append, or with ``replace`` the
        chunk's rows swapped for the new ones in one commit) and the state after it."""
        key = result.chunk_key
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
        record = {
            "rows_in": result.rows_in,
            "rows_malformed": result.rows_malformed,
            "rows_kept": kept,
            "worker": result.worker,
            "funnel": funnel,
            "gate_violations": result.gate_violations,
            "redactions": result.redactions,
            "spec": asdict(spec) | {"format": spec.format.value},
        }
        metadata = {
            "lakecurate.chunk_key": key,
            "lakecurate.run_id": self.run_id,
            "lakecurate.config_hash": self.config_hash,
            "lakecurate.rows_in": str(result.rows_in),
            "lakecurate.rows_kept": str(kept),
            "lakecurate.result": json.dumps(record),
        }
        if self.config_text:
            metadata[CONFIG_KEY] = self.config_text
        if replace:
            metadata["lakecurate.redecided"] = "true"
        version = self.delta.append(rows, seq, metadata, replace=replace)
        faults.hit("after_delta_commit", key)
        self.state.finish_append(
            seq,
            result,
            version,
            rows.filter(rows["kept"]),
            funnel,
            self.run_id,
            self._index(rows, seq, near_writer),
        )
        return CommitOutcome(key, version, result.rows_in, kept, funnel[-1][2])

    def supersede(self, keys: Sequence[str]) -> int:
        """Remove the rows of committed chunks whose input changed, then decide again every
        committed chunk that pointed at what left; returns rows removed.

        A document that was a duplicate of a removed one (``dup_of``, the same given id, or the
        same near-dedup cluster) would otherwise stay dropped with nothing kept in its place:
        a clean run of the new inputs keeps it (issue 12). Those chunks are queued in the
        intent's transaction and forgotten by the index with the superseded ones, so a crash
        anywhere leaves the queue for the next ingest.
        """
        if keys:
            redo = self.dependents(keys)
            seq = self.state.begin_commit(
                "SUPERSEDE", keys, self.run_id, self.delta.version(), redecide=redo
            )
            faults.hit("before_delta_commit", "supersede")
            version, removed = self.delta.delete_chunks(
                keys,
                seq,
                {"lakecurate.superseded": ",".join(keys), "lakecurate.run_id": self.run_id},
            )
            self.state.finish_supersede(seq, keys, version, removed, self.run_id, self._forget)
        else:
            removed = 0
        self.redecide_queued()
        return removed

    def _forget(self, keys: Sequence[str]) -> None:
        """Take these chunks and every chunk queued for a new decision out of the index and
        the band index (inside the caller's transaction): decisions made against them next
        would point at documents that are leaving, or at a chunk's own old copy."""
        every = sorted({*keys, *self.state.redecide_queue()})
        forget_near(self.state, self.state.commit_seqs(every))
        self.index.remove_chunks(every)

    def dependents(self, keys: Sequence[str]) -> list[str]:
        """Committed chunks (other than ``keys``) whose rows refer, directly or through each
        other, to a document of ``keys``: by ``dup_of`` (exact and near duplicates, and a
        repeated id, whose ``dup_of`` is the id itself) or by near-dedup cluster."""
        ds = self.delta.dataset()
        if ds is None:
            return []
        # One scan, then sets in memory (see DeltaStore.rows_of_chunks for why a dataset
        # filter on chunk_key is avoided).
        rows = ds.to_table(columns=["chunk_key", "id", "dup_of", "cluster_id"])
        chunk = rows["chunk_key"].cast(pa.string())
        refers = pc.or_(pc.is_valid(rows["dup_of"]), pc.is_valid(rows["cluster_id"]))
        affected, frontier = set(keys), set(keys)
        while frontier:
            mine = pc.is_in(chunk, pa.array(sorted(frontier), pa.string()))
            ids = pc.unique(pc.filter(rows["id"], mine))
            clusters = pc.unique(pc.drop_null(pc.filter(rows["cluster_id"], mine)))
            hit = pc.and_(
                refers,
                pc.or_(
                    pc.fill_null(pc.is_in(rows["dup_of"], ids), False),
                    pc.fill_null(pc.is_in(rows["cluster_id"], clusters), False),
                ),
            )
            frontier = set(pc.unique(pc.filter(chunk, hit)).to_pylist()) - affected
            affected |= frontier
        return sorted(affected - set(keys))

    def redecide_queued(self) -> int:
        """Decide again, in commit order, every chunk queued by a supersede; returns how many."""
        keys = self.state.redecide_queue()
        # All out of the index first (also what a state rebuilt from the log indexed again):
        # none may match its own or another's old verdicts.
        if keys:
            with self.state.transaction():
                self._forget(keys)
        for key in keys:
            self.redecide(key)
        return len(keys)

    def redecide(self, key: str) -> CommitOutcome | None:
        """Make a committed chunk's lake-wide decisions again from its committed rows (its
        input may be gone or outside this run's inputs): the filters' verdicts stay, every
        duplicate verdict is made again against the lake as it is now, and the chunk's rows
        are replaced in one Delta commit (an app transaction, like every commit)."""
        spec = self.state.spec_of(key)
        if spec is None or self.delta.table() is None:
            self.state.unqueue_redecide([key])
            return None
        rows = self.delta.rows_of_chunks([key]).sort_by("source_line")
        lake_made = pc.fill_null(pc.is_in(rows["reason"], pa.array(LAKE_REASONS)), False)
        for name, value in (
            ("kept", pa.scalar(True)),
            ("reason", pa.scalar(None, pa.string())),
            ("dup_of", pa.scalar(None, pa.string())),
        ):
            i = rows.schema.get_field_index(name)
            rows = rows.set_column(i, name, pc.if_else(lake_made, value, rows[name]))
        i = rows.schema.get_field_index("cluster_id")
        rows = rows.set_column(i, "cluster_id", pa.nulls(rows.num_rows, pa.int64()))
        if self.near is not None:
            rows = add_signatures(rows, self.near.cfg)
        result = self.state.result_of(key, rows.num_rows)
        seq = self.state.begin_commit("REDECIDE", [key], self.run_id, self.delta.version())
        self.redecided += 1
        return self._decide_and_commit(spec, result, rows, seq, replace=True)

    def restore(self, version: int) -> int:
        """Make ``version`` current (a new Delta commit) and re-derive the state from it."""
        seq = self.state.begin_commit("RESTORE", [], self.run_id, self.delta.version())
        faults.hit("before_delta_commit", "restore")
        new_version = self.delta.restore(
            version, seq, {"lakecurate.restored": str(version), "lakecurate.run_id": self.run_id}
        )
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
                self.state.abandon_intent(seq, kind, keys, self.run_id)
                notes.append(
                    f"commit {seq} ({kind}) never reached Delta; will redo it"
                    + (f"; removed {removed} orphan data file(s)" if removed else "")
                )
        self._clean_staging(staging_dir)
        return notes

    def _finalise(self, seq: int, kind: str, keys: list[str]) -> None:
        """Complete step 4 of a commit the Delta log has, from what the log and table hold."""
        entry = self.delta.find_commit(seq)
        version = int(entry["version"]) if entry else self.delta.version()
        if kind == "SUPERSEDE":
            self.state.finish_supersede(
                seq, keys, version, 0, self.run_id, self.index.remove_chunks
            )
            return
        if kind == "RESTORE":
            self.finish_restore(seq, version)
            return
        (key,) = keys  # an APPEND, or a REDECIDE (the rows it wrote are the chunk's rows now)
        rows = self.delta.rows_of_chunks([key])
        record = json.loads(entry["lakecurate.result"]) if entry else {}
        kept = int(pc.sum(rows["kept"]).as_py() or 0)
        malformed = int(record.get("rows_malformed", 0))
        result = ChunkResult(
            chunk_key=key,
            staged_path="",
            input_sha256="",
            config_hash="",
            rows_in=rows.num_rows,
            rows_kept=kept,
            rows_dropped=rows.num_rows - kept - malformed,
            rows_malformed=malformed,
            blank_lines=0,
            worker=str(record.get("worker", "")),
            gate_violations=list(record.get("gate_violations", [])),
            redactions=dict(record.get("redactions", {})),
        )
        funnel = [tuple(s) for s in record.get("funnel", [])]
        near_writer = self.near.writer_from_committed(rows, seq) if self.near is not None else None
        self.state.finish_append(
            seq,
            result,
            version,
            rows.filter(rows["kept"]),
            funnel,
            self.run_id,
            self._index(rows, seq, near_writer),
        )

    def _clean_staging(self, staging_dir: Path) -> None:
        """Remove temp files of interrupted writes and staged files already committed."""
        if not staging_dir.exists():
            return
        temps = [p for p in staging_dir.iterdir() if ".tmp_" in p.name]
        for path in temps + committed_staged_files(staging_dir, self.state):
            path.unlink(missing_ok=True)


def forget_near(state: StateStore, seqs: Sequence[int]) -> None:
    """Drop the band-index rows of these commits, whether or not this command runs near dedup
    (a `compact` finalising a crashed supersede must not leave them behind)."""
    if seqs and state.con.execute(engine.q("state.has_near_index")).fetchall()[0][0]:
        for statement in ("dedup.forget_seqs", "dedup.forget_docs_seqs"):
            state.con.execute(engine.q(statement), {"seqs": list(seqs)})


def committed_staged_files(staging_dir: Path, state: StateStore) -> list[Path]:
    """Staged files of chunks already committed: nothing needs them any more (those of
    pending chunks are what a resumed run commits without redoing the work)."""
    if not staging_dir.is_dir():
        return []
    done = {r[0] for r in state.con.execute(engine.q("state.success_keys")).fetchall()}
    return sorted(
        p
        for p in staging_dir.iterdir()
        if ".tmp_" not in p.name and p.name.split(".", 1)[0] in done
    )
