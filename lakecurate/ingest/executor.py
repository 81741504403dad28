"""Where workers run. ``local``: a pool of processes (Python UDFs hold the GIL, so processes, not
threads), started with ``spawn`` because deltalake panics in a forked child.

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
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from lakecurate.ingest.worker import process_chunk
from lakecurate.types import ChunkResult, ChunkSpec, WorkOrder

BEAT_SECONDS = 1.0

_beats: Any = None  # the pool's queue, in a worker process
_current: str | None = None  # the chunk this worker process is working on
_started = 0.0  # since when (time.monotonic(): CLOCK_MONOTONIC, the same in every process)


def default_workers() -> int:
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


def _init_worker(beats: Any) -> None:
    global _beats  # noqa: PLW0603 (one queue per worker process, set once)
    _beats = beats
    threading.Thread(target=_beat_forever, name="lakecurate-beat", daemon=True).start()


def _beat_forever() -> None:
    while True:
        key = _current
        if key is not None:
            _beats.put((key, os.getpid(), _started))
        time.sleep(BEAT_SECONDS)


def _run(spec: ChunkSpec, order: WorkOrder) -> ChunkResult:
    """``process_chunk`` with the heartbeat on: the first beat goes out before any work."""
    global _current, _started  # noqa: PLW0603
    _current, _started = spec.chunk_key, time.monotonic()  # one clock for all processes
    _beats.put((spec.chunk_key, os.getpid(), _started))
    try:
        return process_chunk(spec, order)
    finally:
        _current = None


@dataclass
class Running:
    """What the driver knows of a chunk a worker has started."""

    pid: int
    started: float  # time.monotonic() in the worker when it started the chunk
    last_beat: float


class LocalExecutor:
    """A process pool that can be rebuilt when a worker dies (OOM killer, kill -9, hang)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._beats: Any = None
        self.running: dict[str, Running] = {}

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            # Simple: a put is written before it returns (a Queue's feeder thread would lose
            # the beat of a worker killed right after). A fresh one per pool: a worker killed
            # mid-put may leave the old one's lock held.
            self._beats = ctx.SimpleQueue()
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker, initargs=(self._beats,)
            )
        return self._pool

    def submit(self, spec: ChunkSpec, order: WorkOrder) -> Future[ChunkResult]:
        return self._ensure().submit(_run, spec, order)

    def collect_beats(self, inflight: set[str]) -> None:
        """Take every beat that arrived, without waiting (late ones of finished chunks drop)."""
        now = time.monotonic()
        while self._beats is not None:
            try:
                if self._beats.empty():
                    break
                key, pid, started = self._beats.get()
            except (OSError, ValueError, EOFError):
                break
            if key not in inflight:
                continue
            seen = self.running.get(key)
            if seen is None or seen.pid != pid:
                self.running[key] = Running(pid, started, now)
            else:
                seen.last_beat = now

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

    def done(self, key: str) -> None:
        self.running.pop(key, None)

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

    def _close_beats(self) -> None:
        if self._beats is not None:
            self._beats.close()
            self._beats = None
        self.running.clear()
