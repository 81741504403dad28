"""One writer per lake: an exclusive ``flock`` on ``LAKE/lock``, with the holder written inside.

The kernel drops a ``flock`` when its process dies, however it dies, so a stale lock from a
killed run can never block the next one; the holder record only serves the error message.
(``flock`` is per machine: on a network file system use one driver host per lake.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from lakecurate.errors import LockedError


class LakeLock:
    """Hold with ``with LakeLock.acquire(path, "ingest"):``."""

    def __init__(self, path: Path, fd: int, previous: dict[str, object] | None) -> None:
        self.path = path
        self._fd: int | None = fd
        self.previous = previous  # the stale holder we took over from, if any

    @classmethod
    def acquire(cls, path: Path, command: str) -> LakeLock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            who = (f"pid {holder.get('pid')} on {holder.get('host')} "
                   f"({holder.get('command')}, since {holder.get('since')})") if holder \
                else "another process"
            raise LockedError(
                f"the lake {path.parent} is locked by {who}: one writer at a time; wait for "
                "it to finish, or stop that process and re-run (a killed holder releases the "
                "lock by itself)"
            ) from None
        previous = _read(fd) or None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                  "since": time.strftime("%Y-%m-%d %H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        os.fsync(fd)
        return cls(path, fd, previous)

    def release(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> LakeLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read(fd: int) -> dict[str, object]:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}
