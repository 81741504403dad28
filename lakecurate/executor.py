"""Where workers run. ``local``: a pool of processes (Python UDFs hold the GIL, so processes, not
threads), started with ``spawn`` because deltalake panics in a forked child.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor

from lakecurate.types import ChunkResult, ChunkSpec, WorkOrder
from lakecurate.worker import process_chunk


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


class LocalExecutor:
    """A process pool that can be rebuilt when a worker dies (OOM killer, kill -9)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers,
                                             mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def submit(self, spec: ChunkSpec, order: WorkOrder) -> Future[ChunkResult]:
        return self._ensure().submit(process_chunk, spec, order)

    def reset(self) -> None:
        """Drop a broken pool; the next submit starts fresh processes."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
