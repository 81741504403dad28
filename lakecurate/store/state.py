"""The chunk ledger in ``state.duckdb``: verb methods, each one atomic, each leaving an event.

DuckDB wants few, large transactions, so transitions take lists of keys; the driver is the only
writer (the lake lock guarantees it), workers never touch this file.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb

from lakecurate import __version__, engine, faults
from lakecurate.errors import BusyError, LakeError
from lakecurate.lake import atomic, paths
from lakecurate.types import ChunkResult, ChunkSpec, Format, Status

SCHEMA_VERSION_KEY = "schema_version"
# The tables readers see while an ingest holds the state file; the large index tables are left
# out (they are the driver's business, and copying them would cost more than the ingest).
SNAPSHOT_TABLES = (
    "runs",
    "sources",
    "chunks",
    "chunk_events",
    "filter_stats",
    "commits",
    "lake_meta",
)
KEY_TABLES = {"content": "content_hashes", "ids": "doc_ids"}

"""The membership index's key spaces and the tables readers see them as (``store.key_files``:
the keys are in files; the names are those of the DuckDB tables they were)."""


@dataclass(frozen=True)
class FinishedChunk:
    """A chunk a Delta commit carried, as the state records it."""

    seq: int
    result: ChunkResult
    rows_kept: int
    funnel: Sequence[Sequence[Any]]


STATE_MEMORY_LIMIT = "512MB"
"""DuckDB's memory limit for the state database (what the driver's DuckDB may hold)."""


class StateStore:
    """Read-write access to one lake's state database."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    @classmethod
    def open(cls, path: Path) -> StateStore:
        """Open (creating and migrating as needed) the state database at ``path``."""
        try:
            con = engine.connect(path)
        except BusyError:
            raise  # held by another process: busy, not damaged
        except (duckdb.Error, LakeError) as exc:
            raise LakeError(
                f"{path} is not a readable lakecurate state database ({exc}); "
                "move it away and run `lakecurate verify --repair`"
            ) from exc
        # DuckDB's default is 80% of RAM: its buffer pool would keep every index page it ever
        # read, so the driver's memory would grow with the lake. The state's working set is
        # one chunk's lookups; the rest is read back from disk when needed.
        con.execute(f"SET memory_limit = '{STATE_MEMORY_LIMIT}'")
        store = cls(con)
        store._migrate()
        from lakecurate.store import key_files  # Arrow: not for readers of the state alone

        key_files.move_out(con, paths.key_folder(path))
        return store

    def close(self) -> None:
        self.con.close()

    def checkpoint(self) -> None:
        """Make the database file whole on its own (no WAL), e.g. to copy it."""
        self._x("state.checkpoint")

    def _migrate(self) -> None:
        have = self._x("state.has_meta_table").fetchone()
        current = 0
        if have and have[0]:
            row = self._x("state.get_meta", {"key": SCHEMA_VERSION_KEY}).fetchone()
            current = int(row[0]) if row else 0
        for number, text in engine.migrations():
            if number <= current:
                continue
            with self.transaction():
                self.con.execute(text)
                self._put_meta(SCHEMA_VERSION_KEY, str(number))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One DuckDB transaction: all of it or none of it survives a crash."""
        self.con.begin()
        try:
            yield
        except BaseException:
            self.con.rollback()
            raise
        self.con.commit()

    def _x(self, name: str, params: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
        return self.con.execute(engine.q(name), params or {})

    def _one(self, name: str) -> Any:
        """The single value a named statement returns."""
        rows = self._x(name).fetchall()  # all: DuckDB 2 keeps a half-read result open
        assert rows, f"{name} returned no row"
        return rows[0][0]

    def _put_meta(self, key: str, value: str) -> None:
        self._x("state.put_meta", {"key": key, "value": value})

    def put_meta(self, key: str, value: str) -> None:
        self._put_meta(key, value)

    def publish_snapshot(self, path: Path) -> None:
        """Publish a consistent copy of the small state tables for concurrent readers.

        DuckDB lets no other process open a file a writer holds, so ``status`` and ``sql``
        read this instead during an ingest: written to a temp file in one read transaction,
        fsynced, renamed over the previous one.
        """
        with atomic.replacing(path) as tmp:
            try:
                self._x("state.attach_snapshot", {"path": str(tmp)})
                try:
                    with self.transaction():
                        for table in SNAPSHOT_TABLES:
                            self.con.execute(
                                engine.q("state.snapshot_table").format(
                                    table=engine.quote_ident(table)
                                )
                            )
                finally:
                    self._x("state.detach_snapshot")
            finally:
                tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)

    # -- runs -------------------------------------------------------------------------------
    def begin_run(self, command: str, args: str, config_hash: str) -> str:
        run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        with self.transaction():
            self._x("state.abandon_runs")
            self._x(
                "state.insert_run",
                {
                    "run_id": run_id,
                    "command": command,
                    "args": args,
                    "config_hash": config_hash,
                    "version": __version__,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                },
            )
        return run_id

    def finish_run(self, run_id: str, outcome: str, done: int, dead: int, message: str) -> None:
        self._x(
            "state.finish_run",
            {"run_id": run_id, "outcome": outcome, "done": done, "dead": dead, "message": message},
        )

    # -- the stat cache and the plan --------------------------------------------------------
    def cached_sources(self, paths: Sequence[str]) -> dict[str, tuple[int, int, int, str, int]]:
        """Stat-cache rows (size, mtime_ns, inode, sha256, chunk_size) of these paths."""
        rows = self._x("state.get_sources", {"paths": list(paths)}).fetchall()
        return {r[0]: tuple(r[1:]) for r in rows}

    def chunks_of_sources(self, paths: Sequence[str]) -> dict[str, list[tuple[ChunkSpec, Status]]]:
        """Every chunk ever planned from these paths, grouped by path, in chunk order.

        One query for the whole input set: a resume over thousands of files must not issue a
        query per file.
        """
        out: dict[str, list[tuple[ChunkSpec, Status]]] = {}
        for row in self._x("state.chunks_of_sources", {"paths": list(paths)}).fetchall():
            spec = _spec(row)
            out.setdefault(spec.source_path, []).append((spec, Status(row[-1])))
        return out

    def chunks_under(self, folder: str) -> dict[str, list[tuple[ChunkSpec, Status]]]:
        """Live chunks of every source below ``folder``, grouped by path."""
        out: dict[str, list[tuple[ChunkSpec, Status]]] = {}
        prefix = folder if folder.endswith(("/", os.sep)) else folder + os.sep
        for row in self._x("state.chunks_under", {"prefix": prefix}).fetchall():
            spec = _spec(row)
            out.setdefault(spec.source_path, []).append((spec, Status(row[-1])))
        return out

    def forget_sources(self, paths: Sequence[str]) -> None:
        """Drop stat-cache rows of inputs that are gone (a file that comes back is read)."""
        if paths:
            self._x("state.forget_sources", {"paths": list(paths)})

    def add_planned(self, specs: Sequence[ChunkSpec], sources: Sequence[Any], run_id: str) -> None:
        """Record the plan and the stat cache of the files read for it, in one transaction.

        Together, so a crash can never leave a cached source whose chunks were not recorded.
        New chunks start PENDING.
        """
        import pyarrow as pa  # here, not at the top: `status` opens no ledger and needs no Arrow

        with self.transaction():
            if specs:
                rows = [asdict(s) | {"format": s.format.value} for s in specs]
                self.con.register("planned", pa.Table.from_pylist(rows))
                try:
                    self._x("state.insert_planned", {"run_id": run_id})
                finally:
                    self.con.unregister("planned")
            for src in sources:
                self._x(
                    "state.put_source",
                    {
                        "path": src.path,
                        "format": src.format.value,
                        "size": src.stat.st_size,
                        "mtime_ns": src.stat.st_mtime_ns,
                        "inode": src.stat.st_ino,
                        "sha256": src.sha256,
                        "chunk_size": src.chunk_size,
                    },
                )

    # -- transitions ------------------------------------------------------------------------
    def _event(self, keys: Sequence[str], to: Status, message: str, run_id: str | None) -> None:
        self._x(
            "state.event",
            {"keys": list(keys), "to_status": to.value, "message": message, "run_id": run_id},
        )

    def todo(self, keys: Sequence[str]) -> list[tuple[str, Status, int]]:
        rows = self._x("state.todo", {"keys": list(keys)}).fetchall()
        return [(k, Status(s), a) for k, s, a in rows]

    def dead_in(self, keys: Sequence[str]) -> list[tuple[str, str]]:
        return [tuple(r) for r in self._x("state.dead_in", {"keys": list(keys)}).fetchall()]

    def reset_running(self, run_id: str) -> None:
        with self.transaction():
            self._x(
                "state.event_by_status",
                {
                    "run_id": run_id,
                    "from_status": "RUNNING",
                    "to_status": "PENDING",
                    "message": "interrupted: the run that held it ended",
                },
            )
            self._x("state.reset_running")

    def start(self, keys: Sequence[str], run_id: str) -> None:
        """These chunks go to the workers (one transaction for all: one fsync)."""
        if not keys:
            return
        with self.transaction():
            self._event(keys, Status.RUNNING, "dispatched to a worker", run_id)
            self._x("state.start_chunk", {"keys": list(keys), "run_id": run_id})

    def unstart(self, keys: Sequence[str], message: str, run_id: str) -> None:
        """These chunks go back to the queue, their attempt not counted (``message``: why)."""
        with self.transaction():
            self._event(keys, Status.PENDING, message, run_id)
            self._x("state.unstart_chunk", {"keys": list(keys)})

    def count_attempts(self, keys: Sequence[str], by: int = 1) -> None:
        """Workers began these chunks (a key once per attempt begun); ``by = -1``: attempts
        that turned out not to count (cut off by another chunk's failure) are taken back."""
        if keys:
            self._x("state.count_attempts", {"keys": list(keys), "by": by})

    def heartbeat(self, keys: Sequence[str]) -> None:
        if keys:
            self._x("state.heartbeat", {"keys": list(keys)})

    def fail(self, key: str, dead: bool, error: str, tb: str, worker: str, run_id: str) -> None:
        to = Status.DEAD if dead else Status.FAILED
        with self.transaction():
            self._event([key], to, error[:500], run_id)
            self._x(
                "state.fail_chunk",
                {
                    "key": key,
                    "to_status": to.value,
                    "error": error,
                    "traceback": tb,
                    "worker": worker,
                },
            )

    def requeue_dead(self, keys: Sequence[str] | None, run_id: str | None) -> list[str]:
        with self.transaction():
            if keys is not None:
                self._event(keys, Status.PENDING, "re-queued by `lakecurate retry`", run_id)
            else:
                self._x(
                    "state.event_by_status",
                    {
                        "run_id": run_id,
                        "from_status": "DEAD",
                        "to_status": "PENDING",
                        "message": "re-queued by `lakecurate retry`",
                    },
                )
            rows = self._x("state.requeue_dead", {"keys": list(keys) if keys else None})
            return sorted(r[0] for r in rows.fetchall())

    # -- the commit protocol ----------------------------------------------------------------
    def begin_commit(
        self,
        kind: str,
        keys: Sequence[str],
        run_id: str,
        version_before: int,
        redecide: Sequence[str] = (),
        seq: int | None = None,
        ahead: Callable[[], None] | None = None,
    ) -> int:
        """Record the intent of a Delta commit other than an APPEND (``begin_appends``);
        returns seq.

        A SUPERSEDE also queues the chunks it makes stale (``redecide``) in the same
        transaction; a REDECIDE leaves its chunk SUCCESS (its old rows stay until the new ones
        replace them in one Delta commit), decided with ``seq`` (``next_seq``: the lock makes
        us the only writer) and its index rows written ahead (``ahead``) in the same
        transaction: one commit, one fsync.
        """
        assert kind != "APPEND", "APPEND intents go through begin_appends"
        with self.transaction():
            if seq is None:
                seq = int(self._one("state.next_seq"))
            inserted = self._x(
                "state.insert_commit",
                {
                    "seq": seq,
                    "kind": kind,
                    "keys": list(keys),
                    "run_id": run_id,
                    "intent_ns": time.time_ns(),
                    "version_before": version_before,
                },
            ).fetchall()
            if not inserted:
                raise RuntimeError(f"commit seq {seq} was taken meanwhile")
            if redecide:
                self._event(
                    redecide,
                    Status.SUCCESS,
                    f"queued for new lake-wide decisions: "
                    f"commit seq {seq} removes documents it refers to",
                    run_id,
                )
                self._x("state.queue_redecide", {"keys": list(redecide)})
            if ahead is not None:
                ahead()
        return seq

    def begin_appends(
        self,
        seqs: Sequence[int],
        keys: Sequence[str],
        run_id: str,
        version_before: int,
        ahead: Callable[[], None],
    ) -> None:
        """Record the intents of a batch of chunks decided in commit order, one APPEND each
        (``seqs``: consecutive from ``next_seq``), their chunks COMMITTING, and their index
        rows written ahead (``ahead``): one transaction, one fsync, whatever the batch's size
        (a chunk's own transaction cost more than its decision on small chunks)."""
        params = {"seqs": list(seqs), "keys": list(keys), "run_id": run_id}
        with self.transaction():
            inserted = self._x(
                "state.insert_appends",
                params | {"intent_ns": time.time_ns(), "version_before": version_before},
            ).fetchall()
            if len(inserted) != len(seqs):
                raise RuntimeError(f"commit seq {seqs[0]} was taken meanwhile")
            self._x("state.event_committing", params)
            self._x("state.mark_committing", {"seqs": list(seqs), "keys": list(keys)})
            ahead()

    def next_seq(self) -> int:
        """The seq the next ``begin_commit`` will take."""
        return int(self._one("state.next_seq"))

    def last_seq(self) -> int:
        """The highest commit seq this state knows (0 for a new one)."""
        return int(self._one("state.last_seq"))

    def open_intents(self) -> list[tuple[int, str, list[str], int, int]]:
        return [tuple(r) for r in self._x("state.open_intents").fetchall()]

    def abandon_intent(
        self,
        seq: int,
        kind: str,
        keys: Sequence[str],
        run_id: str,
        forget: Callable[[], None] | None = None,
    ) -> None:
        """A commit that never reached Delta: forget it; an APPEND's chunks go back to PENDING
        (a REDECIDE's chunk stays SUCCESS and queued, its old rows untouched). ``forget`` takes
        the index rows the commit wrote ahead of Delta out, in the same transaction."""
        with self.transaction():
            if forget is not None:
                forget()
            if kind == "APPEND":
                self._event(
                    keys,
                    Status.PENDING,
                    f"commit seq {seq} was interrupted before Delta; will commit again",
                    run_id,
                )
                self._x("state.uncommit_chunks", {"keys": list(keys)})
            self._x("state.drop_intent", {"seq": seq})

    # -- new lake-wide decisions for committed chunks (issue 12) ----------------------------
    def redecide_queue(self) -> list[str]:
        """Chunks queued for new decisions that are still committed, in commit order."""
        self._x("state.drop_stale_redecide")
        return [r[0] for r in self._x("state.redecide_queue").fetchall()]

    def unqueue_redecide(self, keys: Sequence[str]) -> None:
        self._x("state.unqueue_redecide", {"keys": list(keys)})

    def commit_seqs(self, keys: Sequence[str]) -> list[int]:
        """The commit seqs of these chunks' rows (the band index keys documents by them)."""
        if not keys:
            return []
        return [int(r[0]) for r in self._x("state.commit_seqs_of", {"keys": list(keys)}).fetchall()]

    def spec_of(self, key: str) -> ChunkSpec | None:
        """The spec of one chunk as the ledger holds it."""
        row = self._x("state.spec_of_key", {"key": key}).fetchone()
        return None if row is None else _spec(row)

    def result_of(self, key: str, rows_in: int) -> ChunkResult:
        """A committed chunk's worker result, as far as a re-decision needs it: its counts,
        gates, redactions and the worker's funnel steps (the lake-wide ones are made again)."""
        rec = self._x("state.chunk_record", {"key": key}).fetchone()
        malformed, worker, gates, redactions = (
            (rec[1] or 0, rec[2] or "", rec[3], rec[4]) if rec else (0, "", None, None)
        )
        funnel = [
            (str(a), int(b), int(c))
            for a, b, c in self._x("state.chunk_funnel", {"key": key}).fetchall()
            if a not in ("duplicate_id", "exact_dup", "near_dup")
        ]
        return ChunkResult(
            chunk_key=key,
            staged_path="",
            input_sha256="",
            config_hash="",
            rows_in=rows_in,
            rows_kept=0,
            rows_dropped=0,
            rows_malformed=int(malformed),
            blank_lines=0,
            filter_stats=funnel,
            worker=worker,
            gate_violations=gates.split("; ") if gates else [],
            redactions=json.loads(redactions) if redactions else {},
        )

    def finish_chunks(
        self,
        version: int,
        run_id: str,
        chunks: Sequence[FinishedChunk],
        index: Callable[[], None] | None = None,
    ) -> None:
        """Mark chunks SUCCESS at ``version`` (one Delta commit carried them all) and record
        their funnels: one transaction. ``index`` writes their membership-index rows and bands
        in it too (recovery; an ingest wrote them before its Delta commit)."""
        with self.transaction():
            if index is not None:
                index()
            keys = [done.result.chunk_key for done in chunks]  # one statement each, per group
            self._x("state.clear_filter_stats", {"keys": keys})
            self._event(keys, Status.SUCCESS, f"delta version {version}", run_id)
            self.unqueue_redecide(keys)
            for key in keys:
                faults.hit("during_state_update", key)
            self._insert_funnels([(done.result.chunk_key, done.funnel) for done in chunks])
            # The chunks' rows and their commits' intents, one statement each for the group
            # (a statement per chunk cost more than its work on small chunks).
            import pyarrow as pa

            finished = pa.Table.from_pylist(
                [_finished_row(done) for done in chunks], schema=_finished_schema()
            )
            self.con.register("finished_chunks", finished)
            try:
                self._x("state.succeed_chunks", {"version": version})
                self._x("state.finish_chunk_commits", {"version": version})
            finally:
                self.con.unregister("finished_chunks")

    def finish_commit(self, seq: int, version: int) -> None:
        """Mark a commit intent DONE (for commits that change no chunk row themselves)."""
        self._x("state.finish_commit", {"seq": seq, "version": version, "added": 0, "removed": 0})

    def add_funnel(self, key: str, funnel: Sequence[Sequence[Any]]) -> None:
        """Insert a chunk's funnel rows in one statement (inside the caller's transaction)."""
        self._insert_funnels([(key, funnel)])

    def _insert_funnels(self, funnels: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        """Insert the funnel rows of several chunks in one statement."""
        import pyarrow as pa

        rows = [(key, f, no) for key, funnel in funnels for no, f in enumerate(funnel)]
        if not rows:
            return
        self.con.register(
            "funnel_rows",
            pa.table(
                {
                    "chunk_key": [key for key, _, _ in rows],
                    "step": [str(f[0]) for _, f, _ in rows],
                    "step_no": [no for _, _, no in rows],
                    "docs_in": [int(f[1]) for _, f, _ in rows],
                    "docs_dropped": [int(f[2]) for _, f, _ in rows],
                }
            ),
        )
        try:
            self._x("state.insert_funnel")
        finally:
            self.con.unregister("funnel_rows")

    def finish_supersede(
        self,
        seq: int,
        keys: Sequence[str],
        version: int,
        removed: int,
        run_id: str,
        remove_hashes: Any,
    ) -> None:
        with self.transaction():
            remove_hashes(keys)
            self._event(
                keys, Status.SUPERSEDED, "input changed; rows removed from the table", run_id
            )
            self._x("state.supersede_chunks", {"keys": list(keys)})
            self._x(
                "state.finish_commit",
                {"seq": seq, "version": version, "added": 0, "removed": removed},
            )

    def mark_superseded(self, keys: Sequence[str], run_id: str) -> None:
        """Chunks that never reached the table: nothing to remove, just retire them."""
        if keys:
            with self.transaction():
                self._event(
                    keys, Status.SUPERSEDED, "input changed before it was committed", run_id
                )
                self._x("state.supersede_chunks", {"keys": list(keys)})


def _finished_row(done: FinishedChunk) -> dict[str, Any]:
    """One row of ``finished_chunks`` (``state.succeed_chunks``): what the state records of a
    chunk a Delta commit carried."""
    result = done.result
    return {
        "chunk_key": result.chunk_key,
        "seq": done.seq,
        "rows_in": result.rows_in,
        "rows_kept": done.rows_kept,
        "rows_dropped": result.rows_in - done.rows_kept - result.rows_malformed,
        "rows_malformed": result.rows_malformed,
        "worker": result.worker or None,
        "gate_violations": "; ".join(result.gate_violations) or None,
        "redactions": json.dumps(result.redactions) if result.redactions else None,
    }


def _finished_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("chunk_key", pa.string()),
            ("seq", pa.int64()),
            ("rows_in", pa.int64()),
            ("rows_kept", pa.int64()),
            ("rows_dropped", pa.int64()),
            ("rows_malformed", pa.int64()),
            ("worker", pa.string()),
            ("gate_violations", pa.string()),
            ("redactions", pa.string()),
        ]
    )


def _spec(row: Sequence[Any]) -> ChunkSpec:
    """A ChunkSpec from a row of ``state.chunks_of_sources`` / ``state.spec_of_key``."""
    (key, src, src_sha, fmt, idx, first, sha, nbytes, b0, b1, g0, g1, _status) = row
    return ChunkSpec(
        chunk_key=key,
        source_path=src,
        source_sha256=src_sha,
        format=Format(fmt),
        chunk_index=idx,
        first_line=first,
        input_sha256=sha,
        input_bytes=nbytes,
        byte_start=b0,
        byte_end=b1,
        row_group_start=g0,
        row_group_end=g1,
    )
