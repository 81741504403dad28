"""The driver's side of a chunk: lake-wide decisions, the Delta commit, and the state after it.

The protocol (design section 6): record the intent (COMMITTING, seq) in DuckDB, commit to Delta
with app transaction ``seq``, then mark SUCCESS and index the kept hashes in one DuckDB
transaction. The Delta log is the linearisation point: on start, ``reconcile`` finalises intents
the log has (seq <= watermark) and abandons the others, deleting any data file their interrupted
write left behind, so nothing is committed twice and nothing half-written stays in the table.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate import engine, faults
from lakecurate.index import ContentIndex
from lakecurate.lake.delta import DeltaStore
from lakecurate.state import StateStore
from lakecurate.types import ChunkResult

LAKE_DEDUP_STEP = "exact_dup:lake"


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

    def __init__(self, state: StateStore, delta: DeltaStore, index: ContentIndex,
                 run_id: str, config_hash: str, exact_dedup: bool) -> None:
        self.state = state
        self.delta = delta
        self.index = index
        self.run_id = run_id
        self.config_hash = config_hash
        self.exact_dedup = exact_dedup

    # -- decisions -------------------------------------------------------------------------
    def decide(self, staged: pa.Table) -> tuple[pa.Table, int]:
        """Apply lake-wide exact dedup to a staged chunk; returns (rows, lake duplicates)."""
        kept_before = int(pc.sum(staged["kept"]).as_py() or 0)
        if not self.exact_dedup or kept_before == 0:
            return staged, 0
        hashes = pc.filter(staged["content_hash"], staged["kept"])
        seen = self.index.seen(hashes)
        if seen.num_rows == 0:
            return staged, 0
        con = engine.connect(threads=1)
        try:
            con.register("staged", staged)
            con.register("seen", seen)
            rows = con.sql(engine.q("commit.apply_lake_dups")).to_arrow_table()
        finally:
            con.close()
        rows = rows.cast(staged.schema)
        kept_after = int(pc.sum(rows["kept"]).as_py() or 0)
        return rows, kept_before - kept_after

    @staticmethod
    def _kept_hashes(rows: pa.Table) -> pa.Table:
        kept = rows.filter(rows["kept"])
        return kept.select(["content_hash", "id", "chunk_key"])

    def _funnel(self, result: ChunkResult, rows: pa.Table,
                lake_dups: int) -> list[tuple[str, int, int]]:
        kept = int(pc.sum(rows["kept"]).as_py() or 0)
        return [*result.filter_stats, (LAKE_DEDUP_STEP, kept + lake_dups, lake_dups)]

    # -- the protocol ----------------------------------------------------------------------
    def commit(self, result: ChunkResult) -> CommitOutcome:
        """Commit one staged chunk exactly once."""
        staged = pq.read_table(result.staged_path).replace_schema_metadata(None)
        rows, lake_dups = self.decide(staged)
        key = result.chunk_key
        seq = self.state.begin_commit("APPEND", [key], self.run_id, self.delta.version())
        faults.hit("before_delta_commit", key)
        kept = int(pc.sum(rows["kept"]).as_py() or 0)
        metadata = {"lakecurate.chunk_key": key, "lakecurate.run_id": self.run_id,
                    "lakecurate.config_hash": self.config_hash,
                    "lakecurate.rows_in": str(result.rows_in),
                    "lakecurate.rows_kept": str(kept),
                    "lakecurate.rows_malformed": str(result.rows_malformed)}
        version = self.delta.append(rows, seq, metadata)
        faults.hit("after_delta_commit", key)
        self.state.finish_append(seq, result, version, self._kept_hashes(rows),
                                 self._funnel(result, rows, lake_dups), self.run_id,
                                 self.index.add)
        Path(result.staged_path).unlink(missing_ok=True)
        return CommitOutcome(key, version, result.rows_in, kept, lake_dups)

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
                removed = self._remove_orphans(intent_ns)
                self.state.abandon_intent(seq, keys, self.run_id)
                notes.append(f"commit {seq} ({kind}) never reached Delta; will redo it"
                             + (f"; removed {removed} orphan data file(s)" if removed else ""))
        self._clean_staging(staging_dir)
        return notes

    def _finalise(self, seq: int, kind: str, keys: list[str]) -> None:
        version = self.delta.find_commit(seq)
        if version is None:
            version = self.delta.version()
        if kind == "SUPERSEDE":
            self.state.finish_supersede(seq, keys, version, 0, self.run_id,
                                        self.index.remove_chunks)
            return
        (key,) = keys
        rows = self._committed_rows(key)
        result = self._result_from_rows(key, rows)
        self.state.finish_append(seq, result, version, self._kept_hashes(rows),
                                 self._funnel_from_rows(rows), self.run_id, self.index.add)

    def _committed_rows(self, key: str) -> pa.Table:
        ds = self.delta.dataset()
        assert ds is not None
        return ds.to_table(columns=["id", "kept", "reason", "content_hash", "chunk_key"],
                           filter=pc.field("chunk_key") == key)

    @staticmethod
    def _result_from_rows(key: str, rows: pa.Table) -> ChunkResult:
        reasons = rows["reason"].to_pylist()
        malformed = sum(1 for r in reasons if r and r.startswith("malformed:"))
        kept = int(pc.sum(rows["kept"]).as_py() or 0)
        return ChunkResult(chunk_key=key, staged_path="", input_sha256="", config_hash="",
                           rows_in=rows.num_rows, rows_kept=kept,
                           rows_dropped=rows.num_rows - kept - malformed,
                           rows_malformed=malformed, blank_lines=0)

    @staticmethod
    def _funnel_from_rows(rows: pa.Table) -> list[tuple[str, int, int]]:
        con = duckdb.connect()
        try:
            con.register("decided", rows)
            funnel = [tuple(r) for r in con.execute(engine.q("worker.funnel")).fetchall()]
        finally:
            con.close()
        # Rows committed as exact_dup cannot tell chunk-level from lake-level duplicates apart;
        # recovery books them all under the chunk step.
        kept = int(pc.sum(rows["kept"]).as_py() or 0)
        return [*funnel, (LAKE_DEDUP_STEP, kept, 0)]  # type: ignore[list-item]

    def _remove_orphans(self, intent_ns: int) -> int:
        """Delete data files an interrupted write left: unreferenced and newer than the intent.

        Safe because the lake lock makes this the only writer, and every file an older version
        references (including tombstoned ones kept for time travel) predates the intent.
        """
        referenced = self.delta.referenced_files()
        removed = 0
        for path in self.delta.data_files():
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            # 50 ms margin: file mtimes come from a coarse kernel clock.
            if (os.path.normpath(str(path)) not in referenced
                    and st.st_mtime_ns >= intent_ns - 50_000_000):
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def _clean_staging(self, staging_dir: Path) -> None:
        """Remove temp files of interrupted writes and staged files already committed."""
        if not staging_dir.exists():
            return
        done = {r[0] for r in self.state.con.execute(engine.q("state.success_keys")).fetchall()}
        for path in staging_dir.iterdir():
            if ".tmp_" in path.name or path.name.split(".", 1)[0] in done:
                path.unlink(missing_ok=True)
