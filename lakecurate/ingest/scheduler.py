"""The scheduler of one ingest, in named verbs over an ``Executor``.

``submit`` feeds the executor (an input to plan while few chunks are known, else a chunk, or a
*bundle* of small ones in one task; a chunk whose staged file is already there skips the
workers), ``planned`` takes an input's cut (its chunks join the queue and the commit order),
``collect`` takes what finished (a chunk whose bundle failed runs again alone), ``blame``
records a failed attempt (retried with backoff, DEAD after ``max_attempts``, or the run stopped
for a full disk), ``retry`` puts a chunk back when its backoff is over, and ``commit`` decides
the chunks at the frontier in chunk-key order, sends each decided chunk back to a worker to
have its data files written (its *finalise*), and commits them to Delta in groups once their
files are back. Workers run ahead in any order; the frontier alone decides, which is why
parallelism, crashes and retries never change which document of a duplicate group is kept.

An ``Executor`` is where chunks run: the local process pool (``ingest.executor``) today, a
cluster next; the unit tests drive the scheduler with a fake one (crashes, hangs, completions
out of order) and no processes.
"""

from __future__ import annotations

import bisect
import heapq
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lakecurate.config import Config
from lakecurate.errors import CommitError, InputError, chunk_failure, disk_full, one_line
from lakecurate.ingest.commit import Committer
from lakecurate.ingest.plan import Planner
from lakecurate.ingest.staging import read_staged_result, staged_name
from lakecurate.lake.storage import Location
from lakecurate.progress import Reporter
from lakecurate.store.state import StateStore
from lakecurate.types import ChunkResult, ChunkSpec, FinaliseOrder, Outcome, PlanOrder, WorkOrder

HEARTBEAT_SECONDS = 5.0  # how often chunks.heartbeat_at is written
ATTEMPT_SECONDS = 1.0  # how soon a begun chunk's attempt is written (a statement per chunk
# begun cost the driver as much as deciding a small chunk)
POLL_SECONDS = 1.0  # how often the driver looks at worker beats
SNAPSHOT_SECONDS = 2.0  # how stale `status` may be while an ingest runs (at least)
SNAPSHOT_SHARE = 0.05  # at most this share of the driver's time goes to publishing them: a
# copy of the state tables costs more as the chunks grow (18 ms at 561 chunks), so the
# interval grows to 20x the last publish's time once that is more than SNAPSHOT_SECONDS
BATCH_HOLD_SECONDS = 0.1  # how long a short run of finished chunks waits to be decided
QUICK_TASK_SECONDS = 0.05  # chunks a worker does faster than this are submitted many ahead
QUICK_TASKS = 16  # how many tasks per worker are kept submitted then
SMALL_SHARE = 8  # a chunk of at most 1/8 of [ingest] bundle_bytes is small: it may share a task
BUNDLE_CHUNKS = 64  # small chunks go to a worker up to this many to a task (and up to
# [ingest] bundle_bytes): a task's fixed cost (the worker's filter query binds and compiles
# its regular expressions on every run: ~190 ms with the default preset) was most of a small
# chunk's time (issue 14); a bundle's chunks are staged and decided one by one


class Executor(Protocol):
    """Where chunks run. Every submitted chunk (and finalise) comes back from ``collect``
    exactly once per submission, as an ``Outcome``, however its attempt ended."""

    workers: int  # tasks it runs at once (the scheduler keeps twice as many submitted)

    def submit(self, specs: list[ChunkSpec], order: WorkOrder) -> None:
        """Process these chunks as one task: one chunk, or a bundle of small ones. Each comes
        back on its own, with its result or its own error; if the task fails as a whole,
        each comes back ``bundled`` with the task's error."""
        ...

    def finalise(self, order: FinaliseOrder) -> None:
        """Write a decided chunk's data files (``ingest.worker.finalise_chunk``)."""
        ...

    def plan(self, orders: list[PlanOrder]) -> None:
        """Read and cut inputs into chunks in one task (``ingest.worker.plan_inputs``): one,
        or a bundle of small ones; each comes back on its own, ``planning``."""
        ...

    def inflight(self) -> int:
        """Tasks submitted whose outcomes ``collect`` has not returned yet."""
        ...

    def started(self) -> list[str]:
        """Chunks a worker is working on now (their heartbeats go into the state)."""
        ...

    def progress(self) -> dict[str, float]:
        """How far (0..1) each started chunk is, as its worker last said."""
        ...

    def collect(self, timeout: float) -> list[Outcome]:
        """The outcomes ready, waiting up to ``timeout`` seconds for the first."""
        ...

    def watch(self, heartbeat_timeout: float, chunk_timeout: float) -> None:
        """Stop every chunk whose worker is silent or over time (it comes back failed)."""
        ...

    def close(self) -> None: ...


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
    skipped: list[str] = field(default_factory=list)  # per kind: input files not read, and why
    malformed: list[str] = field(default_factory=list)  # files mostly malformed: reason and fix
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


class Scheduler:
    """Feeds the executor, collects outcomes, commits in key order, retries with backoff."""

    def __init__(
        self,
        state: StateStore,
        committer: Committer,
        reporter: Reporter,
        report: IngestReport,
        cfg: Config,
        order: WorkOrder,
        executor: Executor,
        snapshot: Path,
        planner: Planner,
    ) -> None:
        self.state, self.committer, self.reporter = state, committer, reporter
        self.snapshot = snapshot
        self.published = time.monotonic()
        self.snapshot_every = SNAPSHOT_SECONDS
        self.report, self.cfg, self.order = report, cfg, order
        self.executor, self.planner = executor, planner
        self.queue: list[str] = []  # a heap of chunk keys: the workers take the first in order
        self.queue_bytes = 0  # the input bytes of the chunks in it
        self.by_key: dict[str, ChunkSpec] = {}
        self.attempts: dict[str, int] = {}
        self.alone: set[str] = set()  # failed inside a bundle: run in tasks of their own
        self.plan_alone: set[str] = set()  # inputs whose planning failed inside a bundle
        # An attempt counts once a worker starts the chunk, not when it is submitted: with
        # many quick chunks submitted ahead, a kill would use up attempts of chunks no worker
        # ever began. ``unstarted``: submitted, not begun; ``uncounted``: begun, not yet
        # written to the state (within ATTEMPT_SECONDS, at a failure, at the end of the run).
        self.unstarted: set[str] = set()
        self.uncounted: list[str] = []
        self.given_back: list[str] = []  # written, then found blameless: to take back
        self.counted_at = time.monotonic()
        self.results: dict[str, ChunkResult] = {}
        self.retry_at: dict[str, float] = {}
        self.dead: set[str] = set()
        self.commit_order: list[str] = []
        self.frontier = 0
        self.group_bytes = 0  # input bytes of the committer's open group
        self.group_opened = 0.0
        self.group_closed = False  # full, or open too long: commit once its files are back
        self.held_since = 0.0  # since when a short run of finished chunks waits for more
        self.chunk_seconds: float | None = None  # a worker's time per chunk, moving average
        self.finalising: dict[str, FinaliseOrder] = {}  # in a worker now
        self.finalise_attempts: dict[str, int] = {}
        self.plan_attempts: dict[str, int] = {}
        self.bytes_todo = 0  # input bytes of the chunks to do, as planned so far

    def run(self, specs: list[ChunkSpec], attempts: dict[str, int]) -> None:
        """Every chunk of ``specs``, and of the inputs the planner has pending, committed or
        DEAD (``attempts``: those used so far)."""
        self.attempts = attempts
        self.add(specs)
        ing = self.cfg.ingest
        last_beat = time.monotonic()
        try:
            while (
                self.frontier < len(self.commit_order)
                or self.committer.group
                or self.planner.unplanned
            ):
                self.retry()
                self.submit()
                self.commit()
                if (
                    not self.committer.group
                    and not self.planner.unplanned
                    and (
                        self.frontier >= len(self.commit_order)
                        or not (self.executor.inflight() or self.retry_at or self.queue)
                    )
                ):
                    break
                timeout = POLL_SECONDS
                wake = [*self.retry_at.values()]
                if self.held_since:
                    wake.append(self.held_since + BATCH_HOLD_SECONDS)
                if wake:
                    timeout = max(0.0, min(timeout, min(wake) - time.monotonic()))
                if self.executor.inflight():
                    self.collect(self.executor.collect(timeout))
                elif self.retry_at:
                    time.sleep(timeout)
                self.executor.watch(ing.heartbeat_timeout, ing.chunk_timeout)
                self.reporter.chunk_progress(
                    {
                        k: (f, self.by_key[k].input_bytes)
                        for k, f in self.executor.progress().items()
                    }
                )
                self.began(self.executor.started())
                if time.monotonic() - self.counted_at > ATTEMPT_SECONDS:
                    self.count_attempts()
                if time.monotonic() - last_beat > HEARTBEAT_SECONDS:
                    self.state.heartbeat(self.executor.started())
                    last_beat = time.monotonic()
        finally:
            self.count_attempts()
            self.executor.close()
            self.committer.drop_group()  # only after a failure is a group still open
        self.report.dead = sorted(
            set(self.report.dead) | {(k, e) for k, e in self.state.dead_in(list(self.dead))}
        )

    # -- the verbs ------------------------------------------------------------------------
    def add(self, specs: list[ChunkSpec]) -> None:
        """Chunks to do join the queue and the commit order. The planner's barrier keeps
        every chunk of an input still being planned after the frontier, so the commit order
        stays chunk-key order."""
        for spec in specs:
            key = spec.chunk_key
            self.by_key[key] = spec
            self._push(key)
            at = bisect.bisect(self.commit_order, key)
            assert at >= self.frontier, f"{key} planned behind the commit frontier"
            self.commit_order.insert(at, key)

    def retry(self) -> None:
        """Back to the front of the queue: every chunk whose backoff is over."""
        now = time.monotonic()
        for key in [k for k, t in self.retry_at.items() if t <= now]:
            del self.retry_at[key]
            self._push(key)

    def submit(self) -> None:
        """Keep the executor fed (two tasks per worker): an input to plan while fewer chunks
        than that are known, else the first chunks in key order (``_bundle``)."""
        going: list[list[ChunkSpec]] = []
        room, refill = self._depth()
        if self.executor.inflight() > refill:
            return
        while self.executor.inflight() + len(going) < room:
            if self.planner.unsent and self._queue_short(room):
                self._plan_orders(self._plan_bundle())
                continue
            if not self.queue:
                break
            bundle = self._bundle(room)
            if bundle:
                going.append(bundle)
        self.state.start([s.chunk_key for b in going for s in b], self.report.run_id)
        for bundle in going:
            self.unstarted.update(s.chunk_key for s in bundle)
            self.executor.submit(bundle, self.order)

    def began(self, keys: list[str]) -> None:
        """Workers began these chunks: each uses an attempt (once per submission)."""
        for key in keys:
            if key in self.unstarted:
                self.unstarted.discard(key)
                self.attempts[key] = self.attempts.get(key, 0) + 1
                self.uncounted.append(key)

    def count_attempts(self) -> None:
        """Write the attempts begun since the last time to the state."""
        if self.uncounted:
            self.state.count_attempts(self.uncounted)
            self.uncounted = []
        if self.given_back:
            self.state.count_attempts(self.given_back, -1)
            self.given_back = []
        self.counted_at = time.monotonic()

    def collect(self, outcomes: list[Outcome]) -> None:
        """The attempts that ended: the inputs' cuts join the run (all at once: one state
        transaction), then each other outcome in turn."""
        cuts = [o for o in outcomes if o.planning and o.cut is not None]
        if cuts:
            self.planned(cuts)
        for outcome in outcomes:
            if not (outcome.planning and outcome.cut is not None):
                self._collect(outcome)

    def _collect(self, outcome: Outcome) -> None:
        """One attempt's outcome: a result waits for the frontier, a failure is blamed, a
        blameless one runs again without using up an attempt."""
        key = outcome.key
        if outcome.planning:
            self.plan_failed(outcome)
        elif outcome.finalise:
            self.finalised(outcome)
        elif outcome.result is not None:
            self.began([key])  # done before a beat of it was seen
            self.results[key] = outcome.result
            took = outcome.result.seconds
            was = self.chunk_seconds
            self.chunk_seconds = took if was is None else 0.8 * was + 0.2 * took
        elif outcome.blameless or (
            outcome.bundled and outcome.error is not None and chunk_failure(outcome.error) != "stop"
        ):
            # cut off by another's crash, or failed in a bundle (whose chunk was at fault is
            # not known: each runs again alone): its attempt does not count
            if outcome.bundled:
                self.alone.add(key)
                assert outcome.error is not None
                why = outcome.why or f"{type(outcome.error).__name__}: {one_line(outcome.error)}"
                self.state.unstart(
                    [key],
                    f"the task it shared with other small chunks failed ({why[:300]}): "
                    "it runs again in a task of its own",
                    self.report.run_id,
                )
            if key in self.unstarted:
                self.unstarted.discard(key)
            else:
                self.attempts[key] -= 1
                if key in self.uncounted:
                    self.uncounted.remove(key)
                else:  # written already: taken back at the next count
                    self.given_back.append(key)
            self._push(key)
        else:
            assert outcome.error is not None
            self.began([key])
            self.blame(key, outcome.error, outcome.why)

    def blame(self, key: str, exc: BaseException, why: str | None = None) -> None:
        """A failed attempt: retried after a backoff, DEAD when final or out of attempts."""
        verdict = chunk_failure(exc)  # the one place that decides stop / final / retry
        if verdict == "stop":  # not the chunk's fault: stop the run, the chunk stays PENDING
            raise disk_full(exc, f"a worker wrote the staged file of {key}") from exc
        message = why or f"{type(exc).__name__}: {exc}"
        tb = "".join(traceback.format_exception(exc))
        self.count_attempts()
        used = self.attempts.get(key, 0)
        is_dead = verdict == "final" or used >= self.cfg.ingest.max_attempts
        self.state.fail(key, is_dead, message, tb, "", self.report.run_id)
        self.reporter.chunk_failed(key, message, is_dead)
        if is_dead:
            self.dead.add(key)
        else:
            backoff = self.cfg.ingest.retry_backoff * 2 ** (max(used, 1) - 1)
            self.retry_at[key] = time.monotonic() + backoff

    def planned(self, cuts: list[Outcome]) -> None:
        """Inputs' cuts are back: their chunks still to do join the run."""
        specs = self.planner.cut([(o.key, *o.cut) for o in cuts if o.cut is not None])
        keys = [s.chunk_key for s in specs]
        todo = self.state.todo(keys)
        self.report.dead += self.state.dead_in(keys)
        self.attempts.update({k: a for k, _, a in todo})
        by_key = {s.chunk_key: s for s in specs}
        self.add([by_key[k] for k, _, _ in todo])
        self.report.chunks_planned += len(specs)
        self.report.chunks_todo += len(todo)
        self.bytes_todo += sum(by_key[k].input_bytes for k, _, _ in todo)
        self.reporter.planned(self.report.chunks_planned, self.report.chunks_todo, self.bytes_todo)

    def plan_failed(self, outcome: Outcome) -> None:
        """An input's planning failed: one that cannot be read is a file error (its rows stay
        as they are); otherwise it runs again, up to ``max_attempts`` (alone, without using
        an attempt, if it failed in a bundle or was cut off by another's failure)."""
        path = outcome.key
        order = self.planner.order(path)
        exc = outcome.error
        stop = exc is not None and chunk_failure(exc) == "stop"
        if outcome.blameless or (outcome.bundled and not stop):
            if outcome.bundled:
                self.plan_alone.add(path)
            self.plan_attempts[path] -= 1
            self._plan_orders([order])
            return
        assert exc is not None
        if stop:
            raise disk_full(exc, f"a worker planning {path}") from exc
        if isinstance(exc, InputError):
            self.planner.failed(path, str(exc))
        elif self.plan_attempts[path] >= self.cfg.ingest.max_attempts:
            why = outcome.why or f"{type(exc).__name__}: {one_line(exc)}"
            self.planner.failed(
                path,
                f"{path}: reading it to plan its chunks failed {self.plan_attempts[path]} "
                f"times, last: {why}; its rows in the lake are left as they are",
            )
        else:
            self._plan_orders([order])

    def finalised(self, outcome: Outcome) -> None:
        """A finalise is back: its files join the group; a failed one runs again (it is
        deterministic: a failure is the machine's, not the chunk's), up to ``max_attempts``,
        then the run stops with the group uncommitted (the next run redoes it)."""
        key = outcome.key
        order = self.finalising.pop(key)
        if outcome.files is not None:
            self.committer.files_written(key, outcome.files)
            return
        if outcome.blameless:  # not its fault: runs again without using up an attempt
            self.finalise_attempts[key] -= 1
            self._finalise(order)
            return
        exc = outcome.error
        assert exc is not None
        what = f"writing the data files of {key} for Delta commit seq {order.seq}"
        if chunk_failure(exc) == "stop":
            raise disk_full(exc, what) from exc
        if self.finalise_attempts.get(key, 0) >= self.cfg.ingest.max_attempts:
            raise CommitError(
                f"{what} failed {self.finalise_attempts[key]} times, last: "
                f"{outcome.why or one_line(exc)}; nothing was committed, re-run the same command"
            ) from exc
        self._finalise(order)

    def commit(self) -> None:
        """Decide every chunk at the frontier that is ready, in chunk-key order (a DEAD one is
        passed over), until the open group closes (full, open too long, or the frontier at
        the end); commit it once every finalise of it is back."""
        while True:
            self._decide_ready()
            if self.committer.group and (
                self.frontier >= len(self.commit_order)
                or time.monotonic() - self.group_opened >= self.cfg.ingest.commit_seconds
            ):
                self.group_closed = True  # the frontier waits: commit what is decided meanwhile
            if not (self.group_closed and self.committer.group_ready):
                return
            self.flush()  # and on: the next group may be ready at the frontier already

    def _decide_ready(self) -> None:
        """Decide the run of finished chunks at the frontier as one batch (DEAD ones are
        passed over), up to what the open group takes. A short run whose next chunk is still
        being worked on waits a little for it (``BATCH_HOLD_SECONDS``), so that small chunks
        are decided many at a time (a decision's fixed cost is most of a small chunk's)."""
        barrier = self.planner.barrier()
        at = self.frontier
        ready: list[tuple[ChunkSpec, ChunkResult]] = []
        while at < len(self.commit_order) and not self._full(ready):
            key = self.commit_order[at]
            if barrier is not None and key >= barrier:
                break  # an input still being planned may have chunks before it
            if key in self.dead:
                at += 1
                if not ready:
                    self.frontier = at
            elif key in self.results:
                ready.append((self.by_key[key], self.results[key]))
                at += 1
            else:
                break
        if not ready:
            self.held_since = 0.0  # nothing waits (the run loop must not wake for it)
            return
        coming = (
            at < len(self.commit_order)
            and not self._full(ready)
            and (barrier is None or self.commit_order[at] < barrier)
            and self.executor.inflight() > 0
        )
        now = time.monotonic()
        if coming and len(ready) < self._depth()[0] // 2:
            self.held_since = self.held_since or now
            if now - self.held_since < BATCH_HOLD_SECONDS:
                return
        self.held_since = 0.0
        for spec, _ in ready:
            del self.results[spec.chunk_key]
        self.frontier = at
        self._stage(ready)

    def flush(self) -> None:
        """One Delta commit for the decided chunks of the open group (their files are back)."""
        specs = {d.key: d.spec for d in self.committer.group}
        self.group_bytes = 0
        self.group_closed = False
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
        if outcomes and time.monotonic() - self.published > self.snapshot_every:
            started = time.monotonic()
            self.state.publish_snapshot(self.snapshot)
            self.published = time.monotonic()
            took = self.published - started
            self.snapshot_every = max(SNAPSHOT_SECONDS, took / SNAPSHOT_SHARE)

    # -- helpers --------------------------------------------------------------------------
    def _full(self, ready: list[tuple[ChunkSpec, ChunkResult]]) -> bool:
        """The open group, with the chunks ``ready`` to join it, takes no more."""
        if self.group_closed:
            return True
        ing = self.cfg.ingest
        chunks = len(self.committer.group) + len(ready)
        return chunks > 0 and (
            chunks >= ing.commit_chunks
            or self.group_bytes + sum(s.input_bytes for s, _ in ready) >= ing.commit_bytes
            or ing.commit_seconds == 0
        )

    def _stage(self, ready: list[tuple[ChunkSpec, ChunkResult]]) -> None:
        """Decide the chunks at the frontier (one batch) and send each to be finalised; close
        their group once it is full."""
        if not self.committer.group:
            self.group_opened = time.monotonic()
        if self.given_back or any(spec.chunk_key in self.uncounted for spec, _ in ready):
            self.count_attempts()  # before their SUCCESS, which counts one if none was
        for order in self.committer.stage(ready):
            self._finalise(order)
        self.group_bytes += sum(spec.input_bytes for spec, _ in ready)
        self.group_closed = self._full([])  # the group as it is now

    def _push(self, key: str) -> None:
        heapq.heappush(self.queue, key)
        self.queue_bytes += self.by_key[key].input_bytes

    def _bundle(self, room: int) -> list[ChunkSpec]:
        """The chunks of the next task, from the head of the queue in key order: the first
        one to do and, while it and they are small (an eighth of ``[ingest] bundle_bytes`` at
        most), those after it, up to ``bundle_bytes``, ``BUNDLE_CHUNKS`` and a ``2 room``-th
        of the queue's bytes, but not below the small size (one that failed in a bundle goes
        alone). A chunk of a second or more of work gains little from sharing its task's fixed
        cost, and large bundles kept workers idle: 15 files of ../shared/data/real (7 KB to
        3 MB compressed) took 17-18 s in bundles of up to 16 MiB or a quarter of the queue,
        14-15 s a chunk a task. The queue's share also makes bundles shrink as it empties. A
        chunk already staged by an earlier run goes straight to the commit frontier."""
        bundle: list[ChunkSpec] = []
        size, limit = 0, self.cfg.ingest.bundle_bytes
        small = limit // SMALL_SHARE
        most = min(limit, max(small, -(-self.queue_bytes // max(2 * room, 1))))
        while self.queue and len(bundle) < BUNDLE_CHUNKS:
            spec = self.by_key[self.queue[0]]
            alone = spec.chunk_key in self.alone or spec.input_bytes > small
            if bundle and (alone or size + spec.input_bytes > most):
                break
            heapq.heappop(self.queue)
            self.queue_bytes -= spec.input_bytes
            staged = self._staged(spec)
            if staged is not None:
                self.results[spec.chunk_key] = staged
                self.report.chunks_from_staging += 1
                continue
            bundle.append(spec)
            size += spec.input_bytes
            if alone:
                break
        return bundle

    def _queue_short(self, room: int) -> bool:
        """The queue's chunks make fewer than ``room`` tasks (so inputs waiting to be planned
        should be): a chunk of ``bundle_bytes`` or more is a task, smaller ones go many to a
        task, so counting chunks would starve the bundles. Its bytes are summed only when it
        is shorter than ``room`` full bundles."""
        queued, most = len(self.queue), self.cfg.ingest.bundle_bytes
        if not most or queued < room or queued >= room * BUNDLE_CHUNKS:
            return queued < room
        return sum(min(self.by_key[k].input_bytes, most) for k in self.queue) < room * most

    def _depth(self) -> tuple[int, int]:
        """How many tasks to keep submitted, and at how many in flight to submit more: two per
        worker, refilled at once; while chunks take a worker less than ``QUICK_TASK_SECONDS``,
        ``QUICK_TASKS`` per worker, refilled when half are back, so that their dispatch and
        their decisions are made many at a time (a task's round trip and the driver's
        transactions cost more than such a chunk). Longer chunks keep the queue short: a
        finalise waits behind what is queued before it."""
        quick = self.chunk_seconds is not None and self.chunk_seconds < QUICK_TASK_SECONDS
        room = (QUICK_TASKS if quick else 2) * self.executor.workers
        return room, room // 2 if quick else room

    def _plan_bundle(self) -> list[PlanOrder]:
        """The inputs to plan in the next task: the first one waiting and, while they are
        small, those after it, up to ``[ingest] bundle_bytes`` and ``BUNDLE_CHUNKS`` (one that
        failed in a bundle goes alone): a task and a state transaction per small file cost
        more than reading it."""
        unsent, orders = self.planner.unsent, list[PlanOrder]()
        size, most = 0, self.cfg.ingest.bundle_bytes
        while unsent and len(orders) < BUNDLE_CHUNKS:
            pending = unsent[0]
            alone = pending.path in self.plan_alone
            if orders and (alone or size + pending.stat.st_size > most):
                break
            unsent.popleft()
            orders.append(self.planner.order(pending.path))
            size += pending.stat.st_size
            if alone:
                break
        return orders

    def _plan_orders(self, orders: list[PlanOrder]) -> None:
        for order in orders:
            self.plan_attempts[order.path] = self.plan_attempts.get(order.path, 0) + 1
        self.executor.plan(orders)

    def _finalise(self, order: FinaliseOrder) -> None:
        self.finalising[order.chunk_key] = order
        self.finalise_attempts[order.chunk_key] = self.finalise_attempts.get(order.chunk_key, 0) + 1
        self.executor.finalise(order)

    def _staged(self, spec: ChunkSpec) -> ChunkResult | None:
        path = Location(self.order.staging_dir) / staged_name(
            spec.chunk_key, self.order.config_hash
        )
        result = read_staged_result(path)
        if (
            result is None
            or result.chunk_key != spec.chunk_key
            or result.input_sha256 != spec.input_sha256
        ):
            return None
        result.staged_path = path.uri
        return result
