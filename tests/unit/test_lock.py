"""``LakeLock``: one writer per lake, a clear error naming the holder, and no stale lock ever.

The cross-process test uses a real child process and a real SIGKILL: the kernel dropping the
``flock`` of a dead process is the property the lock is built on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import cli_env

from lakecurate.errors import LakeError, LockedError
from lakecurate.lake.lock import LakeLock


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    lake.mkdir()
    return lake / "lock"


def _record(path: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads(path.read_bytes())
    return data


def test_acquire_writes_the_holder_record(lock_path: Path) -> None:
    with LakeLock.acquire(lock_path, "ingest") as lock:
        rec = _record(lock_path)
        assert rec["pid"] == os.getpid()
        assert rec["host"] == socket.gethostname()
        assert rec["command"] == "ingest"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d{4}", str(rec["since"]))
        assert lock.previous is None  # a fresh lock file has no earlier holder


def test_second_acquire_in_the_same_process_names_pid_host_and_since(lock_path: Path) -> None:
    first = LakeLock.acquire(lock_path, "ingest")
    try:
        rec = _record(lock_path)
        with pytest.raises(LockedError) as info:
            LakeLock.acquire(lock_path, "retry")
        msg = str(info.value)
        assert f"pid {os.getpid()}" in msg
        assert f"on {socket.gethostname()}" in msg
        assert f"since {rec['since']}" in msg
        assert "ingest" in msg  # the holder's command, not the one that was refused
        assert str(lock_path.parent) in msg
        assert isinstance(info.value, LakeError)  # callers catching LakeError see it too
        # The refused attempt must not have overwritten the holder's record.
        assert _record(lock_path) == rec
    finally:
        first.release()


def test_release_clears_the_file_and_frees_the_lock(lock_path: Path) -> None:
    lock = LakeLock.acquire(lock_path, "ingest")
    assert lock_path.stat().st_size > 0
    lock.release()
    assert lock_path.read_bytes() == b""
    lock.release()  # idempotent
    again = LakeLock.acquire(lock_path, "retry")
    try:
        assert again.previous is None  # a cleanly released lock leaves no "previous holder"
        assert _record(lock_path)["command"] == "retry"
    finally:
        again.release()


def test_context_manager_releases_on_error(lock_path: Path) -> None:
    with pytest.raises(RuntimeError), LakeLock.acquire(lock_path, "ingest"):
        raise RuntimeError("boom")
    assert lock_path.read_bytes() == b""
    LakeLock.acquire(lock_path, "ingest").release()


_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from lakecurate.lake.lock import LakeLock
    lock = LakeLock.acquire(Path(sys.argv[1]), "ingest-child")
    print("locked", flush=True)
    time.sleep(120)
""")


@pytest.fixture
def holder(lock_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process that holds the lock and sleeps; killed at the end whatever happens."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(lock_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until the child holds the lock (or dies)
        if line.strip() != "locked":
            child.kill()
            _, err = child.communicate(timeout=30)
            pytest.fail(f"lock holder did not start: {line!r} {err}")
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)


def test_lock_held_by_another_process_then_taken_over_after_kill_9(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(LockedError) as info:
        LakeLock.acquire(lock_path, "ingest")
    msg = str(info.value)
    assert f"pid {holder.pid} " in msg
    assert "ingest-child" in msg
    assert f"pid {os.getpid()} " not in msg

    os.kill(holder.pid, signal.SIGKILL)
    assert holder.wait(timeout=30) == -signal.SIGKILL
    # The dead child never ran release(): its record is still in the file.
    stale = _record(lock_path)
    assert stale["pid"] == holder.pid

    deadline = time.monotonic() + 10
    while True:  # the kernel drops the flock with the process; no waiting is expected
        try:
            lock = LakeLock.acquire(lock_path, "ingest")
            break
        except LockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        assert lock.previous == stale
        assert lock.previous is not None and lock.previous["command"] == "ingest-child"
        assert _record(lock_path)["pid"] == os.getpid()
    finally:
        lock.release()
    assert lock_path.read_bytes() == b""
