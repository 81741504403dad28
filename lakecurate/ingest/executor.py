"""Where workers run. ``local``: a pool of processes (Python UDFs hold the GIL, so processes, not
threads), started with ``spawn`` because deltalake panics in a forked child. It implements the
scheduler's ``Executor`` protocol (``ingest.scheduler``): submit a chunk, a decided chunk's
finalise or an input to plan, collect outcomes, watch.

Each worker process beats: while it works on a chunk, a daemon thread sends ``(chunk_key, pid)``
to the driver every ``BEAT_SECONDS``. A stopped, frozen or GIL-starved process stops beating,
and a chunk that runs past its time limit is hung whatever its beats say: the driver kills that
process by pid (``kill``); the pool breaks, and the runner retries the chunk.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from lakecurate import faults
from lakecurate.errors import WorkerStartError
from lakecurate.ingest.worker import progress, run_order
from lakecurate.types import ChunkSpec, FinaliseOrder, Outcome, PlanOrder, TaskOrder, WorkOrder

BEAT_SECONDS = 1.0
STILLBORN_POOLS = 3
"""Pools in a row that break before any worker began a task: the workers cannot start."""

_beats: Any = None  # the pool's queue, in a worker process
_current: str | None = None  # the chunk this worker process is working on
_started = 0.0  # since when (time.monotonic(): CLOCK_MONOTONIC, the same in every process)


def default_workers() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


def _init_worker(beats: Any, driver: int) -> None:
    """``driver``: its pid, passed in (a worker that starts after the driver died has
    another parent already)."""
    global _beats  # noqa: PLW0603 (one queue per worker process, set once)
    faults.hit("worker_start")
    _beats = beats
    threading.Thread(
        target=_beat_forever, args=(driver,), name="lakecurate-beat", daemon=True
    ).start()


def _beat_forever(parent: int) -> None:
    """Beat every second while a task runs; end the worker once its driver is gone (a driver
    ended by SIGTERM left its workers waiting forever to hand back a result)."""
    while True:
        if os.getppid() != parent:
            os._exit(1)  # nobody will take this worker's result
        key = _current
        if key is not None:
            done = progress.fraction() if is_chunk_task(key) else 0.0
            _beats.put((key, os.getpid(), _started, done))
        time.sleep(BEAT_SECONDS)


FINALISE = "\0finalise"
"""Appended to a chunk key: the task id of that chunk's finalise (no file name has a NUL)."""
PLAN = "\0plan"
"""Appended to an input's path: the task id of its planning."""
BUNDLE = "\0bundle"
"""Appended to a task id: the task has several chunks (or inputs to plan), the first named."""


def task_id(keys: list[str], kind: str = "") -> str:
    """The id of a task over ``keys`` (chunk keys, or paths with ``kind`` PLAN)."""
    return keys[0] + kind + (BUNDLE if len(keys) > 1 else "")


def is_chunk_task(task: str) -> bool:
    """Chunks' processing, one or a bundle (whose beats carry progress and go into the
    state), not a finalise or a planning."""
    return not task.endswith(FINALISE) and PLAN not in task


def _run(task: str, specs: list[ChunkSpec] | None, order: TaskOrder) -> Any:
    """A chunk's processing, its finalise or an input's planning, with the heartbeat on: the
    first beat goes out before any work."""
    global _current, _started  # noqa: PLW0603
    _current, _started = task, time.monotonic()  # one clock for all processes
    _beats.put((task, os.getpid(), _started, 0.0))
    try:
        return run_order(order, specs)
    finally:
        _current = None


def outcomes(task: str, keys: list[str], **fields: Any) -> list[Outcome]:
    """The outcomes of task ``task``: a finalise's, or one per chunk (or input planned) of
    ``keys``: its result (or its own error, returned in its place), or the task's failure,
    ``bundled`` when they were several."""
    if task.endswith(FINALISE):
        files = fields.pop("result", None)
        return [Outcome(keys[0], finalise=True, files=files, **fields)]
    planning = PLAN in task
    results = fields.pop("result", None)
    if results is None:
        if len(keys) > 1 and "error" in fields:
            fields["bundled"] = True
        return [Outcome(k, planning=planning, **fields) for k in keys]
    return [
        Outcome(k, planning=planning, error=r)
        if isinstance(r, BaseException)
        else Outcome(k, planning=True, cut=r)
        if planning
        else Outcome(k, result=r)
        for k, r in zip(keys, results, strict=True)
    ]


class TaskSender:
    """The ``Executor`` protocol's ``submit``, ``finalise`` and ``plan`` as tasks named by
    ``task_id`` over their keys: each executor ships a task its own way (``_send``)."""

    def submit(self, specs: list[ChunkSpec], order: WorkOrder) -> None:
        keys = [s.chunk_key for s in specs]
        self._send(task_id(keys), keys, order, specs)

    def finalise(self, order: FinaliseOrder) -> None:
        self._send(order.chunk_key + FINALISE, [order.chunk_key], order, None)

    def plan(self, orders: list[PlanOrder]) -> None:
        paths = [o.path for o in orders]
        self._send(task_id(paths, PLAN), paths, orders, None)

    def _send(
        self, task: str, keys: list[str], order: TaskOrder, specs: list[ChunkSpec] | None
    ) -> None:
        raise NotImplementedError


@dataclass
class Running:
    """What the driver knows of a chunk a worker has started."""

    pid: int
    started: float  # time.monotonic() in the worker when it started the chunk
    last_beat: float
    done: float = 0.0  # how far into the chunk, as its last beat said (0..1)


class LocalExecutor(TaskSender):
    """A process pool that can be rebuilt when a worker dies (OOM killer, kill -9, hang)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._beats: Any = None
        self.running: dict[str, Running] = {}
        self._futures: dict[Future[Any], str] = {}  # -> task: a chunk key, or a finalise's
        self._keys: dict[str, list[str]] = {}  # task -> its chunks (or inputs, or finalise's)
        self._blameless: list[str] = []  # refused by a pool that broke: to run again
        self._killed: dict[str, str] = {}  # chunk -> why its hung worker was killed
        self._beaten = False  # a worker of the current pool began a task
        self._stillborn = 0  # pools in a row that broke before any worker began a task

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            # Simple: a put is written before it returns (a Queue's feeder thread would lose
            # the beat of a worker killed right after). A fresh one per pool: a worker killed
            # mid-put may leave the old one's lock held.
            self._beats = ctx.SimpleQueue()
            self._beaten = False
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=ctx,
                initializer=_init_worker,
                initargs=(self._beats, os.getpid()),
            )
        return self._pool

    # -- the Executor protocol (submit, finalise, plan: TaskSender) ----------------------
    def _send(
        self, task: str, keys: list[str], order: TaskOrder, specs: list[ChunkSpec] | None
    ) -> None:
        self._keys[task] = keys
        try:
            future = self._ensure().submit(_run, task, specs, order)
        except BrokenProcessPool:  # broke since the last collect: not this task's fault
            self._blameless.append(task)
            if not self._futures:  # an idle worker died: nothing to account for
                self.reset()
            return
        self._futures[future] = task

    def inflight(self) -> int:
        return len(self._futures) + len(self._blameless)

    def started(self) -> list[str]:
        return [k for t in self._started() for k in self._keys[t]]

    def progress(self) -> dict[str, float]:
        return {k: self.running[t].done for t in self._started() for k in self._keys[t]}

    def _started(self) -> list[str]:
        """The chunk tasks a worker is on."""
        return [t for t in self._futures.values() if t in self.running and is_chunk_task(t)]

    def collect(self, timeout: float) -> list[Outcome]:
        """Outcomes of the chunks that finished (waiting up to ``timeout`` for the first).

        When the pool breaks every future fails: each worker that died by itself is blamed
        for its chunk (with the signal), a chunk whose hung worker ``watch`` killed gets that
        reason, and the innocent bystanders come back blameless, to be run again.
        """
        out = [o for t in self._blameless for o in self._outcomes(t, blameless=True)]
        self._blameless.clear()
        if not self._futures:
            return out
        inflight = set(self._futures.values())
        done, _ = wait(
            list(self._futures), timeout=0 if out else timeout, return_when=FIRST_COMPLETED
        )
        self.collect_beats(inflight)
        broken = any(
            not f.cancelled() and isinstance(f.exception(), BrokenProcessPool) for f in done
        )
        crashed: dict[int, int] = {}
        if broken:  # every future of the pool fails: take them all, then say who died
            crashed = self.crashed()
            done = done | wait(list(self._futures), timeout=30).done
        for fut in done:
            key = self._futures.pop(fut)
            pid = self.pid_of(key)
            self.running.pop(key, None)
            if fut.cancelled():  # the pool was shut down under it
                out += self._outcomes(key, blameless=True)
                continue
            try:
                out += self._outcomes(key, result=fut.result())
            except BrokenProcessPool as exc:
                if key in self._killed:
                    why = self._killed.pop(key)
                elif pid in crashed:
                    why = (
                        f"its worker (pid {pid}) died of signal {-crashed[pid]} "
                        "(killed, or out of memory?)"
                    )
                elif self._killed or crashed:  # an innocent bystander of another's death
                    out += self._outcomes(key, blameless=True)
                    continue
                else:
                    why = "a worker process died (killed, or out of memory?)"
                out += self._outcomes(key, error=exc, why=why)
            except Exception as exc:
                out += self._outcomes(key, error=exc)
        if broken:
            self._stillborn = 0 if self._beaten else self._stillborn + 1
            self.reset()
            self._killed.clear()
            if self._stillborn >= STILLBORN_POOLS:
                codes = sorted({c for c in crashed.values()})
                raise WorkerStartError(
                    f"worker processes die as they start ({self._stillborn} pools in a row "
                    f"ended before any worker began a chunk; exit codes {codes}); their own "
                    "error is printed above. A script that calls Lake.ingest must call it "
                    'under `if __name__ == "__main__":`; otherwise check that '
                    '`python -c "import lakecurate"` works in this environment'
                )
        return out

    def watch(self, heartbeat_timeout: float, chunk_timeout: float) -> None:
        """Kill the worker of every chunk that stopped beating or ran out of time; its chunk
        comes back from ``collect`` failed, with the reason."""
        keys = set(self._futures.values())  # beats were collected by the last collect
        for key, why in self.hung(
            sorted(keys - set(self._killed)), heartbeat_timeout, chunk_timeout
        ).items():
            self.kill(key)
            self._killed[key] = why

    def _outcomes(self, task: str, **fields: Any) -> list[Outcome]:
        return outcomes(task, self._keys.pop(task), **fields)

    # -- the process pool ---------------------------------------------------------------

    def collect_beats(self, inflight: set[str]) -> None:
        """Take every beat that arrived, without waiting (late ones of finished chunks drop)."""
        now = time.monotonic()
        while self._beats is not None:
            try:
                if self._beats.empty():
                    break
                key, pid, started, done = self._beats.get()
            except (OSError, ValueError, EOFError):
                break
            self._beaten = True
            if key not in inflight:
                continue
            seen = self.running.get(key)
            if seen is None or seen.pid != pid:
                self.running[key] = Running(pid, started, now, done)
            else:
                seen.last_beat, seen.done = now, done

    def hung(
        self, keys: list[str], heartbeat_timeout: float, chunk_timeout: float
    ) -> dict[str, str]:
        """Of ``keys`` (in flight), those whose worker is silent or over time, with why."""
        now = time.monotonic()
        out: dict[str, str] = {}
        for key in keys:
            seen = self.running.get(key)
            if seen is None:
                continue  # queued in the pool, not started
            if now - seen.last_beat > heartbeat_timeout:
                out[key] = (
                    f"no heartbeat from worker pid {seen.pid} for "
                    f"{now - seen.last_beat:.0f} s (heartbeat_timeout = "
                    f"{heartbeat_timeout:g} s): killed it, hung or frozen"
                )
            elif chunk_timeout and now - seen.started > chunk_timeout:
                out[key] = (
                    f"still running after {now - seen.started:.0f} s (chunk_timeout = "
                    f"{chunk_timeout:g} s): killed worker pid {seen.pid}"
                )
        return out

    def kill(self, key: str) -> None:
        """SIGKILL the process working on ``key``; the pool breaks and is rebuilt."""
        seen = self.running.pop(key, None)
        if seen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(seen.pid, signal.SIGKILL)

    def pid_of(self, key: str) -> int | None:
        seen = self.running.get(key)
        return None if seen is None else seen.pid

    def crashed(self) -> dict[int, int]:
        """After the pool broke: pid -> exit code of each worker that died by itself (not by
        the SIGTERM the pool sends the survivors), so its chunk is the one to blame. Reads the
        pool's process table, a private attribute: when it is absent nobody is blamed alone."""
        procs = dict(getattr(self._pool, "_processes", None) or {})
        if self._pool is not None:  # broken: this returns once every worker is reaped
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        out: dict[int, int] = {}
        for pid, proc in list(procs.items()):
            code = proc.exitcode
            if code is not None and code not in (0, -signal.SIGTERM):
                out[pid] = code
        return out

    def reset(self) -> None:
        """Drop a broken pool; the next submit starts fresh processes."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._close_beats()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._close_beats()
        self._futures.clear()
        self._keys.clear()
        self._blameless.clear()
        self._killed.clear()

    def _close_beats(self) -> None:
        if self._beats is not None:
            self._beats.close()
            self._beats = None
        self.running.clear()
