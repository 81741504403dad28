"""The driver's side of a chunk: lake-wide decisions, the Delta commit, and the state after it.

The protocol (design section 6), for a group of chunks taken in commit order: each chunk gets
its intent (COMMITTING, its own seq) in DuckDB, is decided against the lake (the chunks of the
group before it included) from its staged keys alone, and has its membership-index rows and
bands written ahead in one state transaction; a worker then writes its data files from the
staged file and the driver's verdicts (``FinaliseOrder``); once every chunk of the group has
its files, one Delta commit names them all,
with app transaction the group's last seq; then one DuckDB transaction marks the group
SUCCESS. The Delta log is the linearisation point: a crash between the steps is repaired by
``store.recovery.reconcile`` when the next write session opens (it finalises the intents the
log has and abandons the others, index rows included), so nothing is committed twice and
nothing half-written stays in the table.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import config as configuration
from lakecurate import engine, faults
from lakecurate.config import Config
from lakecurate.ingest.near import Applied, NearDedup, RunChunk
from lakecurate.ingest.staging import count_true, delete_staged, patch_of, read_keys
from lakecurate.lake import sets
from lakecurate.lake.record import (
    APPEND,
    REDECIDE,
    RESTORE,
    SUPERSEDE,
    ChunkRecord,
    CommitRecord,
)
from lakecurate.schema import BANDS_COLUMN, SIGNATURE_COLUMN
from lakecurate.steps.near.signatures import add_signatures
from lakecurate.store.recovery import finish_restore, forget_leaving, index_writer
from lakecurate.store.session import WriteSession
from lakecurate.store.state import FinishedChunk
from lakecurate.types import ChunkResult, ChunkSpec, FinaliseOrder

if TYPE_CHECKING:
    from lakecurate.types import DataFile

NEAR_RUN_BYTES = 64 * 1024 * 1024
"""With near dedup, the input bytes of chunks matched as one run (a chunk larger alone): one
match's transient memory follows its documents (about 250 MiB for a 256 MiB chunk)."""

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


@dataclass
class Decided:
    """A chunk decided and its index rows written ahead: waiting for its data files (``files``,
    None until its finalise is back), then for the Delta commit of its group."""

    spec: ChunkSpec
    result: ChunkResult
    seq: int
    record: ChunkRecord
    finished: FinishedChunk
    files: list[DataFile] | None
    intent_ns: int
    lake_dups: int

    @property
    def key(self) -> str:
        return self.result.chunk_key


_POSITION = "_staged_position"
"""A row's place in the batch as handed to ``Committer.decide``, to put its lists back."""
_BATCH = "_batch"
"""A row's chunk: its place in the batch handed to ``Committer.decide`` (``commit.decide``)."""


def _involved(narrow: pa.Table, seen_ids: pa.Table, seen_content: pa.Table) -> pa.Array | None:
    """The rows ``apply_lake_decisions`` can change (None: all of them): those whose id or
    content hash is repeated in the batch or seen in the lake, and the workers' exact
    duplicates (and candidates without a content hash, which workers never stage). Every
    other row keeps what its worker staged: a document whose id and content are its own is
    kept, as the query keeps it. None when that would not hold: rows out of (chunk, line)
    order, or a null id (the query's windows put null ids in one partition with every
    row whose id is not checked)."""
    step = np.diff(narrow[_BATCH].to_numpy()), np.diff(narrow["source_line"].to_numpy())
    if not ((step[0] > 0) | ((step[0] == 0) & (step[1] >= 0))).all() or narrow["id"].null_count:
        return None
    worker_dup = pc.fill_null(pc.equal(narrow["reason"], "exact_dup"), False)
    no_hash = pc.and_(pc.is_null(narrow["reason"]), pc.is_null(narrow["content_hash"]))
    involved = pc.or_(worker_dup, no_hash)
    for column, seen in (("id", seen_ids["id"]), ("content_hash", seen_content["content_hash"])):
        values, counts = pc.value_counts(narrow[column].drop_null()).flatten()
        repeated = pc.filter(values, pc.greater(counts, 1))
        involved = pc.or_(involved, pc.is_in(narrow[column], repeated))
        involved = pc.or_(involved, pc.is_in(narrow[column], seen))
    return involved


def _merged(narrow: pa.Table, involved: pa.Array, decided: pa.Table) -> pa.Table:
    """``narrow`` with the query's ``kept``, ``reason`` and ``dup_of`` for the ``involved``
    rows (``decided``: those rows, in their order)."""
    out = narrow
    for name in ("kept", "reason", "dup_of"):
        column = pc.replace_with_mask(
            narrow[name].combine_chunks(),
            involved.combine_chunks() if isinstance(involved, pa.ChunkedArray) else involved,
            decided[name].combine_chunks().cast(narrow.schema.field(name).type),
        )
        out = out.set_column(out.schema.get_field_index(name), name, column)
    return out


def _runs(
    items: Sequence[tuple[ChunkSpec, ChunkResult]], limit: int
) -> list[list[tuple[ChunkSpec, ChunkResult]]]:
    """``items`` cut, in order, into runs of at most ``limit`` input bytes (a larger chunk
    alone)."""
    runs: list[list[tuple[ChunkSpec, ChunkResult]]] = []
    size = 0
    for item in items:
        if runs and size + item[0].input_bytes <= limit:
            runs[-1].append(item)
            size += item[0].input_bytes
        else:
            runs.append([item])
            size = item[0].input_bytes
    return runs


class Committer:
    """Commits staged chunks one at a time, in the order the runner hands them over."""

    def __init__(self, session: WriteSession, cfg: Config | None) -> None:
        """Commits into ``session``'s lake with the decisions of ``cfg`` (None: a command that
        makes no decisions, such as restore)."""
        self.state = session.state
        self.delta = session.delta
        self.index = session.index
        self.run_id = session.run_id
        self.near = NearDedup(session.near) if session.near is not None else None
        self.config_hash = cfg.hash if cfg else ""
        self.config_text = configuration.to_toml(cfg) if cfg else ""
        self.exact_dedup = cfg.dedup.exact if cfg else True
        self.rejected_text = cfg.output.rejected_text if cfg else "keep"
        self.redecided = 0  # chunks decided again by this committer
        self.group: list[Decided] = []  # staged, waiting for their group's Delta commit
        self._scratch_con: duckdb.DuckDBPyConnection | None = None

    # -- decisions -------------------------------------------------------------------------
    def decide(self, batch: Sequence[pa.Table]) -> list[pa.Table]:
        """Apply the lake-wide decisions (duplicate ids, exact duplicates) to staged chunks
        taken in commit order, each decided against the lake and the chunks before it: one
        query for the batch (its fixed cost was most of a small chunk's decision). The
        chunks' key tables share one layout (``stage`` sees to it)."""
        staged = pa.concat_tables(batch)
        not_malformed = pc.invert(
            pc.fill_null(pc.starts_with(staged["reason"], "malformed:"), False)
        )
        given = pc.and_(staged["id_given"], not_malformed)
        # Not made unique first: the Bloom filter rules out most of them as cheaply as a hash
        # table would, and the index makes the few it cannot unique.
        seen_ids = self.index.ids_seen(pc.filter(staged["id"], given))
        candidates = pc.is_null(staged["reason"])
        seen_content = (
            self.index.content_seen(pc.filter(staged["content_hash"], candidates))
            if self.exact_dedup
            else pa.table(
                {"content_hash": pa.array([], pa.string()), "doc_id": pa.array([], pa.string())}
            )
        )
        # The near-dedup lists (signatures or shingle sets: most of a chunk's key bytes) stay
        # out of DuckDB, whose windows would copy them several times; they are put back by
        # position afterwards.
        lists = [c for c in (SIGNATURE_COLUMN, BANDS_COLUMN) if c in staged.column_names]
        sizes = [t.num_rows for t in batch]
        narrow = (
            staged.drop_columns(lists)
            .append_column(_POSITION, pa.array(np.arange(staged.num_rows, dtype=np.int64)))
            .append_column(_BATCH, pa.array(np.repeat(np.arange(len(batch)), sizes)))
        )
        # Only the rows whose id or content repeats in the batch or is in the lake can change;
        # the query decides those (each partition of its windows is whole among them), the
        # rest stay as the workers staged them: the query's cost follows the duplicates, not
        # the chunk's size.
        involved = _involved(narrow, seen_ids, seen_content)
        con = self._scratch()
        con.register("staged", narrow if involved is None else narrow.filter(involved))
        con.register("seen_ids", seen_ids)
        con.register("seen_content", seen_content)
        try:
            rows = con.sql(
                engine.q("commit.apply_lake_decisions"), params={"exact": self.exact_dedup}
            ).to_arrow_table()
        finally:
            for name in ("staged", "seen_ids", "seen_content"):
                con.unregister(name)
        if involved is not None:
            rows = _merged(narrow, involved, rows)
        at = rows[_POSITION]
        for name in lists:
            rows = rows.append_column(name, staged[name].take(at))
        rows = rows.select(staged.schema.names).cast(staged.schema)
        # Ordered by chunk, then line: each chunk's rows are one slice.
        starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        return [rows.slice(a, b - a) for a, b in itertools.pairwise(starts)]

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
        """The worker's steps (its own dedup is redone here), then the lake-wide ones, counted
        from the decided rows alone (so recovery can recompute them) with Arrow kernels: a
        query per chunk cost more than the counting on small chunks."""
        reason = rows["reason"]

        id_dups = count_true(pc.equal(reason, "duplicate_id"))
        dups = count_true(pc.equal(reason, "exact_dup"))
        n = reason.null_count + id_dups + dups
        lake = [("duplicate_id", n, id_dups), ("exact_dup", n - id_dups, dups)]
        steps = [tuple(s) for s in worker_steps if not str(s[0]).startswith("exact_dup")]
        return [*steps, *lake]  # type: ignore[list-item]

    # -- the protocol ----------------------------------------------------------------------
    def stage(self, items: Sequence[tuple[ChunkSpec, ChunkResult]]) -> list[FinaliseOrder]:
        """Decide staged chunks from their keys, in commit order, write their intents and
        index rows ahead, and add them to the open group; returns the orders workers turn
        into their data files (``files_written`` hands them back, ``commit_group`` commits
        them). A batch is decided by one query, matched for near dedup as one run, and
        recorded by one state transaction (with near dedup, runs of at most
        ``NEAR_RUN_BYTES`` of input: the match's memory follows its documents)."""
        if self.near is not None and len(items) > 1:
            runs = _runs(items, NEAR_RUN_BYTES)
            if len(runs) > 1:
                return [order for run in runs for order in self.stage(run)]
        # Decider processes read the band files themselves: the driver reads only which
        # documents have bands.
        lists = self.near is None or not self.near.index.reads_band_files
        keyed = [(s, r, *read_keys(r.staged_path, lists)) for s, r in items]
        # Staged files of two layouts in the batch (a resume across versions): one at a
        # time, each decided against the one before.
        if len(items) > 1 and len({k[2].schema for k in keyed}) != 1:
            return [order for item in items for order in self.stage([item])]
        intent_ns = time.time_ns()
        # The seqs come first: near dedup orders documents by them. The intents and the index
        # rows written ahead are then one state transaction.
        first = self.state.next_seq()
        decided_rows = self.decide([k[2] for k in keyed])
        run = []
        for i, ((_, result, keys, bands_file), rows) in enumerate(
            zip(keyed, decided_rows, strict=True)
        ):
            # The sets verification compares are in the worker's sets file, read only for the
            # candidates (a staged file of the layout before holds them as a column).
            in_file = (
                BANDS_COLUMN in keys.column_names and SIGNATURE_COLUMN not in keys.column_names
            )
            sets_file = sets.beside(result.staged_path) if in_file else None
            run.append(RunChunk(rows, first + i, sets_file, bands_file))
        near = self._near_run(run)
        batch = [
            self._decide(spec, result, chunk.rows, chunk.seq, intent_ns, applied)
            for (spec, result, _, _), chunk, applied in zip(keyed, run, near, strict=True)
        ]

        def ahead() -> None:
            with self.index.batch():  # one key file per space for the batch
                for _, _, write in batch:
                    write()

        self.state.begin_appends(
            [d.seq for _, d, _ in batch],
            [d.key for _, d, _ in batch],
            self.run_id,
            self.delta.version(),
            ahead,
        )
        orders = []
        for (_, _, keys, _), (rows, decided, _) in zip(keyed, batch, strict=True):
            faults.hit("index_ahead", decided.key)
            self.group.append(decided)
            # A name no other order has: a worker still writing for an order of a run that
            # died (and whose seq this run reuses) must not write over this one's files.
            name = f"part-{decided.seq:08d}-{uuid.uuid4().hex[:16]}"
            orders.append(
                FinaliseOrder(
                    decided.key,
                    decided.seq,
                    decided.result.staged_path,
                    self.delta.loc.uri,
                    patch_of(keys, rows),
                    name,
                    self.rejected_text,
                )
            )
        return orders

    def files_written(self, key: str, files: list[DataFile]) -> None:
        """A finalise is back: the data files of ``key`` (a chunk of the open group)."""
        (decided,) = (d for d in self.group if d.key == key)
        decided.files = files

    @property
    def group_ready(self) -> bool:
        """Every chunk of the open group has its data files: it can be committed."""
        return all(d.files is not None for d in self.group)

    def drop_group(self) -> int:
        """After a failure: forget the open group and delete the data files its finalises
        wrote (its intents stay, for ``reconcile`` to abandon); returns files removed."""
        group, self.group = self.group, []
        return self.delta.remove_unreferenced(group[0].intent_ns) if group else 0

    def commit_group(self) -> list[CommitOutcome]:
        """One Delta commit carrying every chunk staged since the last one (exactly once: its
        app transaction is the group's last seq), then their SUCCESS in one state
        transaction."""
        group, self.group = self.group, []
        if not group:
            return []
        assert all(d.files is not None for d in group), "commit before every finalise is back"
        for d in group:
            faults.hit("before_delta_commit", d.key)
        record = CommitRecord(
            kind=APPEND,
            run_id=self.run_id,
            chunks=tuple(d.record for d in group),
            config_hash=self.config_hash,
            config_text=self.config_text or None,
        )
        files = [f for d in group for f in d.files or ()]
        version = self.delta.commit_files(
            files,
            group[-1].seq,
            record.metadata(),
            group[0].intent_ns,  # staged in order
        )
        for d in group:
            faults.hit("after_delta_commit", d.key)
        self.state.finish_chunks(version, self.run_id, [d.finished for d in group])
        for d in group:
            if d.result.staged_path:
                delete_staged(d.result.staged_path)
        return [
            CommitOutcome(d.key, version, d.result.rows_in, d.finished.rows_kept, d.lake_dups)
            for d in group
        ]

    def _near_run(self, run: Sequence[RunChunk]) -> Sequence[Applied | None]:
        """Near dedup of a run of chunks through ``decide``, matched as one (None each when
        near dedup is off, or the chunks have no band column)."""
        if self.near is None or not run or BANDS_COLUMN not in run[0].rows.column_names:
            return [None] * len(run)
        return self.near.apply_run(run)

    def _decide(
        self,
        spec: ChunkSpec,
        result: ChunkResult,
        rows: pa.Table,
        seq: int,
        intent_ns: int,
        near: Applied | None = None,
    ) -> tuple[pa.Table, Decided, Callable[[], None]]:
        """The rest of one chunk's lake-wide decisions (``rows``: its rows, or only their key
        columns, through ``decide``; ``near``: those rows through near dedup), its record, and
        what writes its index rows and bands ahead of its Delta commit (inside the caller's
        state transaction: the next chunk is decided against them)."""
        key = result.chunk_key
        funnel = self._funnel(result.filter_stats, rows)
        near_writer = None
        if near is not None:
            kept_before = int(pc.sum(rows["kept"]).as_py() or 0)
            rows, near_dups, near_writer = near
            funnel.append(("near_dup", kept_before, near_dups))
        else:
            rows = rows.drop_columns(
                [c for c in (SIGNATURE_COLUMN, BANDS_COLUMN) if c in rows.column_names]
            )
        kept = int(pc.sum(rows["kept"]).as_py() or 0)
        chunk = {
            "rows_in": result.rows_in,
            "rows_malformed": result.rows_malformed,
            "rows_kept": kept,
            "worker": result.worker,
            "funnel": funnel,
            "gate_violations": result.gate_violations,
            "redactions": result.redactions,
            "spec": asdict(spec) | {"format": spec.format.value},
        }
        decided = Decided(
            spec=spec,
            result=result,
            seq=seq,
            record=ChunkRecord(key, seq, result.rows_in, kept, chunk),
            finished=FinishedChunk(seq, result, kept, funnel),
            files=None,
            intent_ns=intent_ns,
            lake_dups=int(funnel[-1][2]),
        )
        return rows, decided, index_writer(self.index, rows, seq, near_writer)

    def supersede(self, keys: Sequence[str]) -> int:
        """Remove the rows of committed chunks whose input changed, then decide again every
        committed chunk that pointed at what left; returns rows removed.

        A document that was a duplicate of a removed one (``dup_of``, the same given id, or the
        same near-dedup cluster) would otherwise stay dropped with nothing kept in its place:
        a clean run of the new inputs keeps it (issue 12). Those chunks are queued in the
        intent's transaction and forgotten by the index with the superseded ones, so a crash
        anywhere leaves the queue for the next ingest.
        """
        assert not self.group, "supersede with a group open: its decisions would be stale"
        if keys:
            redo = self.dependents(keys)
            seq = self.state.begin_commit(
                "SUPERSEDE", keys, self.run_id, self.delta.version(), redecide=redo
            )
            faults.hit("before_delta_commit", "supersede")
            version, removed = self.delta.delete_chunks(
                keys,
                seq,
                CommitRecord(SUPERSEDE, self.run_id, superseded=tuple(keys)).metadata(),
            )
            faults.hit("after_delta_commit", "supersede")
            self.state.finish_supersede(
                seq, keys, version, removed, self.run_id, forget_leaving(self.state, self.index)
            )
        else:
            removed = 0
        self.redecide_queued()
        return removed

    def dependents(self, keys: Sequence[str]) -> list[str]:
        """Committed chunks (other than ``keys``) whose rows refer, directly or through each
        other, to a document of ``keys``: by ``dup_of`` (exact and near duplicates, and a
        repeated id, whose ``dup_of`` is the id itself) or by near-dedup cluster. (An exact
        copy of a near duplicate names the kept document, but shares the near duplicate's
        cluster: it goes with it, and becomes the first of its content, a ``near_dup``.)"""
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
                forget_leaving(self.state, self.index)(keys)
        for key in keys:
            self.redecide(key)
        return len(keys)

    def redecide(self, key: str) -> CommitOutcome | None:
        """Make a committed chunk's lake-wide decisions again from its committed rows (its
        input may be gone or outside this run's inputs): the filters' verdicts stay, every
        duplicate verdict is made again against the lake as it is now, and the chunk's rows
        are replaced in one Delta commit (an app transaction, like every commit)."""
        assert not self.group, "a re-decision with a group open would commit out of order"
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
        intent_ns = time.time_ns()
        seq = self.state.next_seq()
        self.redecided += 1
        (rows,) = self.decide([rows])
        (near,) = self._near_run([RunChunk(rows, seq)])
        rows, decided, ahead = self._decide(spec, result, rows, seq, intent_ns, near)
        self.state.begin_commit(
            "REDECIDE", [key], self.run_id, self.delta.version(), seq=seq, ahead=ahead
        )
        faults.hit("index_ahead", key)
        faults.hit("before_delta_commit", key)
        record = CommitRecord(
            kind=REDECIDE,
            run_id=self.run_id,
            chunks=(decided.record,),
            config_hash=self.config_hash,
            config_text=self.config_text or None,
        )
        version = self.delta.replace_chunk(rows, seq, record.metadata(), key)
        faults.hit("after_delta_commit", key)
        self.state.finish_chunks(version, self.run_id, [decided.finished])
        return CommitOutcome(
            key, version, result.rows_in, decided.finished.rows_kept, decided.lake_dups
        )

    def restore(self, version: int) -> int:
        """Make ``version`` current (a new Delta commit) and re-derive the state from it."""
        seq = self.state.begin_commit("RESTORE", [], self.run_id, self.delta.version())
        faults.hit("before_delta_commit", "restore")
        new_version = self.delta.restore(
            version, seq, CommitRecord(RESTORE, self.run_id, restored=version).metadata()
        )
        faults.hit("after_delta_commit", "restore")
        finish_restore(self.state, self.delta, seq, new_version)
        return new_version
