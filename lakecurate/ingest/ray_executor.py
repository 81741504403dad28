"""The ``ray`` executor: the same chunks, finalises and plannings as the local process pool, run
as Ray tasks on a cluster (issue 15). The driver keeps DuckDB and the Delta commits and decides
in the same chunk-key order, so a Ray run gives the same table as a local one.

Failures split by who is at fault. A worker process or node that dies is Ray's to handle: a task
is retried by Ray (``max_retries``) on another worker, and only when Ray gives up does it come
back failed, naming the cause. An exception of lakecurate's own code is not retried by Ray
(``retry_exceptions=False``): it comes back as that exception, and the scheduler's attempts and
DEAD state decide, exactly as with local workers. A task running past ``chunk_timeout`` is
cancelled (its worker killed) and comes back failed with the reason.

Ray is an optional dependency (``pip install 'lakecurate[ray]'``); this module is the only one
that imports it.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from lakecurate.errors import UsageError
from lakecurate.ingest.executor import TaskSender, is_chunk_task, outcomes
from lakecurate.ingest.worker import run_order
from lakecurate.types import ChunkSpec, Outcome, TaskOrder

INSTALL = "pip install 'lakecurate[ray]'"
SYSTEM_RETRIES = 3
"""Ray re-runs a task this many times when its worker or node dies."""


def require_ray() -> Any:
    """The ``ray`` module, or a UsageError saying how to install it (checked before an ingest
    starts, so a lake is not even created without it)."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError(
            f"--executor ray needs the Ray package, which is not installed: {INSTALL}"
        ) from exc
    return ray


REACH_SECONDS = 5.0
"""How long ``check_address`` waits for a cluster's port to accept a connection."""


def check_address(address: str | None) -> None:
    """Refuse an address no Ray cluster answers at, before the ingest starts: Ray's own
    ``init`` raised a bare ValueError on a malformed one, and waited minutes on a port where
    nothing listens (a typo)."""
    if address is None or address in ("auto", "local"):
        return  # Ray's own: the cluster this machine runs, or a new one here
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(
            f"--address {address!r} is not HOST:PORT: give the address `ray start --head` "
            "printed (e.g. 10.0.0.5:6379), or 'auto' for the cluster this machine is part of"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_SECONDS).close()
    except OSError as exc:
        raise UsageError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}): start one there "
            "with `ray start --head`, or correct --address ([ingest].address)"
        ) from exc


@dataclass
class _Task:
    task: str  # its id, as the local executor names it (executor.task_id)
    keys: list[str]  # the chunks it processes, the inputs it plans, or its finalise's chunk
    submitted: float


class RayExecutor(TaskSender):
    """Ray tasks, as many in flight as the scheduler submits (two per CPU of the cluster)."""

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        ray = require_ray()
        self._ray = ray
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(
                address=address,
                num_cpus=workers if address is None else None,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        cpus = int(ray.cluster_resources().get("CPU", 0))
        self.workers = max(1, workers or cpus)
        self._remote = ray.remote(max_retries=SYSTEM_RETRIES, retry_exceptions=False)(run_order)
        self._tasks: dict[Any, _Task] = {}  # ObjectRef -> what it is
        self._stopped: dict[Any, str] = {}  # cancelled ObjectRef -> why

    # -- the Executor protocol (submit, finalise, plan: TaskSender) ----------------------
    def _send(
        self, task: str, keys: list[str], order: TaskOrder, specs: list[ChunkSpec] | None
    ) -> None:
        self._tasks[self._remote.remote(order, specs)] = _Task(task, keys, time.monotonic())

    def inflight(self) -> int:
        return len(self._tasks)

    def started(self) -> list[str]:
        return [k for t in self._tasks.values() if is_chunk_task(t.task) for k in t.keys]

    def progress(self) -> dict[str, float]:
        return {}

    def collect(self, timeout: float) -> list[Outcome]:
        if not self._tasks:
            return []
        ready, _ = self._ray.wait(list(self._tasks), num_returns=1, timeout=timeout)
        if ready:  # and everything else that is done by now
            ready, _ = self._ray.wait(list(self._tasks), num_returns=len(self._tasks), timeout=0)
        return [o for ref in ready for o in self._outcomes(ref)]

    def _outcomes(self, ref: Any) -> list[Outcome]:
        task = self._tasks.pop(ref)
        why = self._stopped.pop(ref, None)
        try:
            value = self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:  # our code raised: the cause
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return outcomes(task.task, task.keys, error=cause, why=why)
        except self._ray.exceptions.RayError as exc:  # Ray gave up: worker, node, cancel
            reason = why or (
                f"its Ray worker or node died {SYSTEM_RETRIES + 1} times "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            )
            return outcomes(task.task, task.keys, error=exc, why=reason)
        return outcomes(task.task, task.keys, result=value)

    def watch(self, heartbeat_timeout: float, chunk_timeout: float) -> None:
        """Cancel (kill the worker of) every task past ``chunk_timeout`` since it was
        submitted; Ray watches its workers' liveness itself."""
        if not chunk_timeout:
            return
        now = time.monotonic()
        for ref, task in self._tasks.items():
            if ref not in self._stopped and now - task.submitted > chunk_timeout:
                self._stopped[ref] = (
                    f"still running after {now - task.submitted:.0f} s (chunk_timeout = "
                    f"{chunk_timeout:g} s): cancelled its Ray task"
                )
                self._ray.cancel(ref, force=True)

    def close(self) -> None:
        for ref in self._tasks:
            self._ray.cancel(ref, force=True)
        self._tasks.clear()
        if self._started_ray:
            self._ray.shutdown()
