"""One writer per lake: an exclusive ``flock`` on ``LAKE/lock``, with the holder written inside.

The kernel drops a ``flock`` when its process dies, however it dies, so a stale lock from a
killed run can never block the next one; the holder record only serves the error message.
(``flock`` is per machine: on a network file system use one driver host per lake.)

Readers (``sql``, ``status``, ``export``, ``report``) take the same file *shared*, without
waiting, only for the moment they copy the state tables (``reading``): that keeps a writer from
starting mid-copy, and DuckDB from refusing the writer a file a reader has open. A writer that
finds only readers (no holder record, or the record of a dead process) waits for them instead
of failing.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakecurate.errors import LockedError

# How long a writer waits for readers copying the state (they hold the lock for milliseconds;
# only a stopped or very slow reader makes a writer wait this long).
READER_WAIT_SECONDS = 30.0


class LakeLock:
    """Hold with ``with LakeLock.acquire(path, "ingest"):``."""

    def __init__(self, path: Path, fd: int, previous: dict[str, object] | None) -> None:
        self.path = path
        self._fd: int | None = fd
        self.previous = previous  # the stale holder we took over from, if any

    @classmethod
    def acquire(
        cls, path: Path, command: str, reader_wait: float = READER_WAIT_SECONDS
    ) -> LakeLock:
        """Take the lock; a live writer holding it is an error at once, readers are waited
        for (up to ``reader_wait`` seconds)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + reader_wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read(fd)
                if _writing(holder) or time.monotonic() >= deadline:
                    os.close(fd)
                    raise _locked(path, holder, reader_wait) from None
                time.sleep(0.01)
        previous = _read(fd) or None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": command,
            "since": time.strftime("%Y-%m-%d %H:%M:%S%z"),
        }
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


@contextmanager
def reading(path: Path) -> Iterator[bool]:
    """Hold ``path`` shared for the duration of the block; yields False (holding nothing)
    when a writer has it. Never waits, never creates or writes the file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # no writer ever ran here
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing drops the shared lock


def _writing(holder: dict[str, object]) -> bool:
    """Whether the holder record names a live writer (else the lock is held by readers, or
    by a writer between taking the lock and writing its record: both are worth waiting for).
    A record of a dead process on this host is what a killed writer leaves behind."""
    if not holder:
        return False
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(str(holder.get("pid"))), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def _locked(path: Path, holder: dict[str, object], waited: float) -> LockedError:
    if _writing(holder):
        who = (
            f"pid {holder.get('pid')} on {holder.get('host')} "
            f"({holder.get('command')}, since {holder.get('since')})"
        )
        return LockedError(
            f"the lake {path.parent} is locked by {who}: one writer at a time; wait for it "
            "to finish, or stop that process and re-run (a killed holder releases the lock "
            "by itself)"
        )
    return LockedError(
        f"the lake {path.parent} has been held by readers (status, sql, export or report "
        f"copying the state) for over {waited:g} s: is one of them stopped? Try again"
    )


def _read(fd: int) -> dict[str, object]:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}
