"""``ingest``: plan, dispatch chunks to workers, commit them in chunk-key order, retry, report.

Workers run ahead in any order; chunks are decided strictly in key order (a chunk still being
retried holds the commit frontier, not the workers), which is why parallelism, crashes and
retries never change which document of a duplicate group is kept. Decided chunks are committed
to Delta in groups (``[ingest] commit_chunks / commit_bytes / commit_seconds``): one commit per
group keeps the driver's commit cost per chunk small and flat.
"""

from __future__ import annotations

import json
import time
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from lakecurate.config import Config
from lakecurate.errors import DiskFullError, chunk_failure, disk_full, is_disk_full
from lakecurate.ingest.chunking import Inputs
from lakecurate.ingest.commit import Committer
from lakecurate.ingest.executor import LocalExecutor, default_workers
from lakecurate.ingest.plan import make_plan
from lakecurate.ingest.staging import read_staged_result, staged_name
from lakecurate.lake.paths import LakePaths
from lakecurate.progress import NullReporter, Reporter
from lakecurate.store.session import write_session
from lakecurate.store.state import StateStore
from lakecurate.types import ChunkResult, ChunkSpec, WorkOrder

HEARTBEAT_SECONDS = 5.0  # how often chunks.heartbeat_at is written
POLL_SECONDS = 1.0  # how often the driver looks at worker beats
SNAPSHOT_SECONDS = 2.0  # how stale `status` may be while an ingest runs


@dataclass
class IngestReport:
    """What one ``ingest`` did; the CLI renders it, tests assert on it."""

    run_id: str
    files: int = 0
    files_read: int = 0
    chunks_planned: int = 0
    chunks_todo: int = 0
    chunks_committed: int = 0
    chunks_from_staging: int = 0
    rows_in: int = 0
    rows_kept: int = 0
    rows_superseded: int = 0
    chunks_redecided: int = 0  # committed chunks decided again: they pointed at removed rows
    dead: list[tuple[str, str]] = field(default_factory=list)
    file_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    index: dict[str, float] = field(default_factory=dict)  # membership-index counters

    @property
    def ok(self) -> bool:
        return not self.dead and not self.file_errors

    @property
    def outcome(self) -> str:
        if self.dead:
            return "DEAD_CHUNKS"
        if self.file_errors:
            return "FILE_ERRORS"
        changed = self.chunks_todo or self.rows_superseded or self.chunks_redecided
        return "OK" if changed else "NOTHING_TO_DO"


def ingest(
    paths: LakePaths,
    inputs: Inputs,
    cfg: Config,
    *,
    workers: int | None = None,
    verify: bool = False,
    reporter: Reporter | None = None,
    args: str = "",
) -> IngestReport:
    """Run one ingest in a write session (see the module docstring)."""
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    try:
        with write_session(
            paths, "ingest", args or json.dumps(inputs.given), cfg, create=True, bloom=True
        ) as session:
            report = IngestReport(run_id=session.run_id, notes=session.notes)
            session.state.reset_running(session.run_id)
            committer = Committer(session, cfg)
            try:
                _plan_and_run(
                    paths, inputs, cfg, workers, verify, reporter, session.state, report, committer
                )
            except BaseException:
                session.done, session.dead = report.chunks_committed, len(report.dead)
                raise
            finally:  # the Bloom files are saved however the run ends (D16): by the session
                committer.close()
                report.index = session.index.stats.as_dict()
                session.state.put_meta("index.last_run", json.dumps(report.index))
            report.seconds = time.perf_counter() - started
            session.done, session.dead = report.chunks_committed, len(report.dead)
            session.finish(report.outcome, "; ".join(report.file_errors)[:2000])
            session.state.publish_snapshot(paths.snapshot)
            return report
    except Exception as exc:
        if is_disk_full(exc) and not isinstance(exc, DiskFullError):
            raise disk_full(exc, "writing the lake") from exc
        raise
    finally:
        reporter.close()


def _plan_and_run(
    paths: LakePaths,
    inputs: Inputs,
    cfg: Config,
    workers: int | None,
    verify: bool,
    reporter: Reporter,
    state: StateStore,
    report: IngestReport,
    committer: Committer,
) -> None:
    plan = make_plan(inputs, cfg.ingest.chunk_size, state, verify, reporter)
    report.files, report.files_read = plan.files, plan.files_read
    report.file_errors, report.notes = plan.file_errors, report.notes + plan.notes
    report.chunks_planned = len(plan.specs)
    # Superseded rows leave the table, and the chunks that pointed at them are decided again,
    # before any new chunk is deduplicated against the lake.
    report.rows_superseded = committer.supersede(plan.superseded)
    report.chunks_redecided = committer.redecided
    state.mark_superseded(plan.retired, report.run_id)
    state.add_planned(plan.fresh, plan.sources, report.run_id)
    state.publish_snapshot(paths.snapshot)

    specs = {s.chunk_key: s for s in plan.specs}
    todo = state.todo(list(specs))
    report.chunks_todo = len(todo)
    report.dead = state.dead_in(list(specs))
    if report.dead:
        report.notes.append(
            f"{len(report.dead)} chunk(s) are DEAD from earlier runs; "
            "`lakecurate retry` re-queues them"
        )
    reporter.planned(len(plan.specs), len(todo), sum(specs[k].input_bytes for k, _, _ in todo))
    if not todo:
        return
    order = WorkOrder(
        staging_dir=str(paths.staging),
        run_id=report.run_id,
        config_hash=cfg.hash,
        exact_dedup=cfg.dedup.exact,
        decisions=committer.config_text,
    )
    n_workers = workers or cfg.ingest.workers or default_workers()
    _Scheduler(state, committer, reporter, report, cfg, order, n_workers, paths.snapshot).run(
        [specs[k] for k, _, _ in todo], {k: a for k, _, a in todo}
    )


class _Scheduler:
    """Feeds the pool, collects results, commits in key order, retries with backoff."""

    def __init__(
        self,
        state: StateStore,
        committer: Committer,
        reporter: Reporter,
        report: IngestReport,
        cfg: Config,
        order: WorkOrder,
        workers: int,
        snapshot: Path,
    ) -> None:
        self.state, self.committer, self.reporter = state, committer, reporter
        self.snapshot = snapshot
        self.published = time.monotonic()
        self.report, self.cfg, self.order = report, cfg, order
        self.executor = LocalExecutor(workers)
        self.workers = workers
        self.group_bytes = 0  # input bytes of the committer's open group
        self.group_opened = 0.0

    def _staged(self, spec: ChunkSpec) -> ChunkResult | None:
        path = Path(self.order.staging_dir) / staged_name(spec.chunk_key, self.order.config_hash)
        result = read_staged_result(path)
        if (
            result is None
            or result.chunk_key != spec.chunk_key
            or result.input_sha256 != spec.input_sha256
        ):
            return None
        result.staged_path = str(path)
        return result

    def run(self, specs: list[ChunkSpec], attempts: dict[str, int]) -> None:
        queue = deque(specs)
        commit_order = [s.chunk_key for s in specs]
        by_key = {s.chunk_key: s for s in specs}
        results: dict[str, ChunkResult] = {}
        inflight: dict[Future[ChunkResult], str] = {}
        retry_at: dict[str, float] = {}
        dead: set[str] = set()
        killed: dict[str, str] = {}  # chunk -> why its hung worker was killed
        frontier = 0

        def requeue(key: str) -> None:
            """Back to the queue without using up an attempt: not this chunk's fault."""
            attempts[key] -= 1
            queue.appendleft(by_key[key])

        last_beat = time.monotonic()
        try:
            while frontier < len(commit_order):
                now = time.monotonic()
                for key in [k for k, t in retry_at.items() if t <= now]:
                    del retry_at[key]
                    queue.appendleft(by_key[key])
                while queue and len(inflight) < 2 * self.workers:
                    spec = queue.popleft()
                    staged = self._staged(spec)
                    if staged is not None:
                        results[spec.chunk_key] = staged
                        self.report.chunks_from_staging += 1
                        continue
                    self.state.start(spec.chunk_key, self.report.run_id)
                    attempts[spec.chunk_key] = attempts.get(spec.chunk_key, 0) + 1
                    try:
                        future = self.executor.submit(spec, self.order)
                    except BrokenProcessPool:  # broke since the last wait
                        requeue(spec.chunk_key)
                        if inflight:  # the wait below sees its futures fail and says who died
                            break
                        self.executor.reset()  # an idle worker died: nothing to account for
                        continue
                    inflight[future] = spec.chunk_key
                while frontier < len(commit_order):
                    key = commit_order[frontier]
                    if key in dead:
                        frontier += 1
                    elif key in results:
                        self._stage(by_key[key], results.pop(key))
                        frontier += 1
                    else:
                        break
                if self.committer.group and (
                    time.monotonic() - self.group_opened >= self.cfg.ingest.commit_seconds
                ):
                    self._flush()  # the frontier waits: commit what is decided meanwhile
                if frontier >= len(commit_order) or not (inflight or retry_at or queue):
                    break
                timeout = POLL_SECONDS
                if retry_at:
                    timeout = max(0.0, min(timeout, min(retry_at.values()) - time.monotonic()))
                done, _ = (
                    wait(list(inflight), timeout=timeout, return_when=FIRST_COMPLETED)
                    if inflight
                    else (set(), set())
                )
                if not inflight and retry_at:
                    time.sleep(timeout)
                self.executor.collect_beats(set(inflight.values()))
                broken = any(
                    not f.cancelled() and isinstance(f.exception(), BrokenProcessPool) for f in done
                )
                crashed: dict[int, int] = {}
                if broken:  # every future of the pool fails: take them all, then say who died
                    crashed = self.executor.crashed()
                    done = done | wait(list(inflight), timeout=30).done
                for fut in done:
                    key = inflight.pop(fut)
                    pid = self.executor.pid_of(key)
                    self.executor.done(key)
                    if fut.cancelled():  # the pool was shut down under it
                        requeue(key)
                        continue
                    try:
                        results[key] = fut.result()
                    except BrokenProcessPool as exc:
                        if key in killed:
                            why = killed.pop(key)
                        elif pid in crashed:
                            why = (
                                f"its worker (pid {pid}) died of signal {-crashed[pid]} "
                                "(killed, or out of memory?)"
                            )
                        elif killed or crashed:  # an innocent bystander of another's death
                            requeue(key)
                            continue
                        else:
                            why = "a worker process died (killed, or out of memory?)"
                        self._failed(by_key[key], exc, attempts, retry_at, dead, why)
                    except Exception as exc:
                        self._failed(by_key[key], exc, attempts, retry_at, dead)
                if broken:
                    self.executor.reset()
                    killed.clear()
                self._watch(inflight, killed)
                if time.monotonic() - last_beat > HEARTBEAT_SECONDS:
                    self.state.heartbeat(
                        [k for k in inflight.values() if k in self.executor.running]
                    )
                    last_beat = time.monotonic()
            self._flush()
        finally:
            self.executor.close()
        self.report.dead = sorted(
            set(self.report.dead) | {(k, e) for k, e in self.state.dead_in(list(dead))}
        )

    def _watch(self, inflight: dict[Future[ChunkResult], str], killed: dict[str, str]) -> None:
        """Kill the worker of every chunk that stopped beating or ran out of time."""
        keys = set(inflight.values())  # beats were collected right after the wait
        ing = self.cfg.ingest
        for key, why in self.executor.hung(
            sorted(keys - set(killed)), ing.heartbeat_timeout, ing.chunk_timeout
        ).items():
            self.executor.kill(key)
            killed[key] = why

    def _stage(self, spec: ChunkSpec, result: ChunkResult) -> None:
        """Decide the chunk at the frontier; commit its group once the group is full."""
        if not self.committer.group:
            self.group_opened = time.monotonic()
        self.committer.stage(spec, result)
        self.group_bytes += spec.input_bytes
        ing = self.cfg.ingest
        if (
            len(self.committer.group) >= ing.commit_chunks
            or self.group_bytes >= ing.commit_bytes
            or ing.commit_seconds == 0
        ):
            self._flush()

    def _flush(self) -> None:
        """One Delta commit for the decided chunks of the open group."""
        specs = {d.key: d.spec for d in self.committer.group}
        self.group_bytes = 0
        outcomes = self.committer.commit_group()
        for outcome in outcomes:
            self.report.chunks_committed += 1
            self.report.rows_in += outcome.rows_in
            self.report.rows_kept += outcome.rows_kept
            self.reporter.chunk_done(
                outcome.chunk_key,
                specs[outcome.chunk_key].input_bytes,
                outcome.rows_in,
                outcome.rows_kept,
            )
        if outcomes and time.monotonic() - self.published > SNAPSHOT_SECONDS:
            self.state.publish_snapshot(self.snapshot)
            self.published = time.monotonic()

    def _failed(
        self,
        spec: ChunkSpec,
        exc: BaseException,
        attempts: dict[str, int],
        retry_at: dict[str, float],
        dead: set[str],
        why: str | None = None,
    ) -> None:
        key = spec.chunk_key
        verdict = chunk_failure(exc)  # the one place that decides stop / final / retry
        if verdict == "stop":  # not the chunk's fault: stop the run, the chunk stays PENDING
            raise disk_full(exc, f"a worker wrote the staged file of {key}") from exc
        message = why or f"{type(exc).__name__}: {exc}"
        tb = "".join(traceback.format_exception(exc))
        is_dead = verdict == "final" or attempts.get(key, 0) >= self.cfg.ingest.max_attempts
        self.state.fail(key, is_dead, message, tb, "", self.report.run_id)
        self.reporter.chunk_failed(key, message, is_dead)
        if is_dead:
            dead.add(key)
        else:
            backoff = self.cfg.ingest.retry_backoff * 2 ** (attempts.get(key, 1) - 1)
            retry_at[key] = time.monotonic() + backoff
