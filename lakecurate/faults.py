"""Fault injection for the crash tests: kill or raise at a named point.

``LAKECURATE_FAULT`` holds comma-separated rules ``point:action[:match]``; ``action`` is ``kill``
(SIGKILL the whole process group, like a power cut), ``oom`` (SIGKILL this process only, as the
OOM killer takes one worker), ``hang`` (SIGSTOP this process: frozen, no heartbeat), ``stall``
(sleep a minute: alive, beating, far too slow), ``raise``,
``enospc`` (raise ``OSError(ENOSPC)``, what a write to a full disk raises), or ``sleep`` (one
second: slows a run down so a test can watch it from outside); ``match`` restricts the rule to
keys containing that text. Unset, every call is a dictionary lookup and nothing else.

Points: ``worker_start`` (a worker process starts), ``plan`` (a worker starts reading an input to
cut it into chunks), ``worker`` (a worker starts a chunk),
``staged_write`` (the staged Parquet temp file is written, not yet renamed), ``index_ahead`` (a
chunk decided, its index rows written ahead of its group's Delta commit), ``before_delta_commit``
(intents recorded, Delta not yet written), ``delta_write`` (a worker writing a chunk's data
files), ``delta_log_append`` (a commit file of the Delta log written and synced under its
temp name, not yet the version), ``after_delta_commit``, ``during_state_update`` (inside the
DuckDB transaction after a commit), ``export_shard`` (an export shard published, the next not
begun), ``near_meta`` (a new near-dedup index's rule recorded, its MinHash fingerprint not yet).
"""

from __future__ import annotations

import errno
import os
import signal
import time

ENV = "LAKECURATE_FAULT"


class InjectedFaultError(RuntimeError):
    """Raised by a ``raise`` rule; looks like any unexpected bug to the runner."""


def hit(point: str, key: str = "") -> None:
    """Act on any rule configured for ``point`` (and ``key``)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    for rule in spec.split(","):
        parts = rule.strip().split(":", 2)
        if len(parts) < 2 or parts[0] != point:
            continue
        if len(parts) == 3 and parts[2] not in key:
            continue
        if parts[1] == "kill":
            try:
                os.killpg(os.getpgid(0), signal.SIGKILL)
            finally:
                os.kill(os.getpid(), signal.SIGKILL)
        if parts[1] == "oom":  # this process only, as the OOM killer picks one
            os.kill(os.getpid(), signal.SIGKILL)
        if parts[1] == "hang":  # frozen: no progress, no heartbeat, until someone kills it
            os.kill(os.getpid(), signal.SIGSTOP)
        if parts[1] == "stall":  # alive and beating, but far too slow
            time.sleep(60.0)
        if parts[1] == "sleep":
            time.sleep(1.0)
        if parts[1] == "raise":
            raise InjectedFaultError(f"injected fault at {point} ({key})")
        if parts[1] == "enospc":
            raise OSError(
                errno.ENOSPC, f"No space left on device (injected at {point})", key or None
            )
