"""The one error tree of lakecurate.

Every error says what happened and what to do next. The CLI prints ``str(error)`` as one line;
``TransientError`` tells the runner that trying the same chunk again may succeed.
"""

from __future__ import annotations

import errno
import re
from typing import Literal


class LakecurateError(Exception):
    """Base of every error lakecurate raises on purpose."""


class ConfigError(LakecurateError):
    """The pipeline configuration is invalid (names the key and the allowed values)."""


class UsageError(LakecurateError):
    """The library was called in a way that cannot work; the message says what to change."""


class InputError(LakecurateError):
    """An input path is missing, unreadable or of an unknown format."""


class LakeError(LakecurateError):
    """The lake folder is missing, foreign or in a state lakecurate cannot use."""


class IndexFilesError(LakeError):
    """A near-dedup signature or band file is missing or unreadable: derived data, which
    ``verify --repair`` rebuilds from the table (never read as "no candidates")."""


class LockedError(LakeError):
    """Another process holds the lake's writer lock."""


class BusyError(LakeError):
    """Another process has a lake file open (DuckDB's own file lock): busy, never damaged."""


class ReadOnlyError(LakecurateError):
    """A query tried to modify the lake through the read-only SQL surface."""


class QueryError(LakecurateError):
    """A user query failed (syntax, unknown table, ...)."""


class ChunkError(LakecurateError):
    """Processing one chunk failed; the runner retries it or marks it DEAD."""


class TransientError(ChunkError):
    """A failure that may go away on retry (I/O hiccup, a worker process that died)."""


class PermanentChunkError(ChunkError):
    """A failure that retrying cannot fix (the input changed under us); goes DEAD at once."""


class WorkerStartError(LakecurateError):
    """Worker processes die as they start, so no chunk can run at all."""


class CommitError(LakecurateError):
    """The Delta commit or the state update after it failed; a re-run reconciles."""


class DiskFullError(LakecurateError):
    """A write found no space left (ENOSPC or a quota): the run stops, nothing partial is
    visible, and the same command resumes once space is freed."""


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXTS = ("no space left on device", "disk quota exceeded")


# A Rust backtrace (delta-rs appends one to its messages when RUST_BACKTRACE is set): frame 0
# or the "stack backtrace:" header starts it; nothing after it is for the user.
_BACKTRACE = re.compile(r"^(\s+0: |\s*stack backtrace:)", re.MULTILINE | re.IGNORECASE)
# DuckDB refusing a file another process holds: "Could not set lock on file ... Conflicting lock
# is held in /usr/bin/python3 (PID 123)".
_DUCKDB_LOCK = re.compile(r"Could not set lock on file|Conflicting lock is held", re.IGNORECASE)
_DUCKDB_HOLDER = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)", re.IGNORECASE)


def one_line(exc: BaseException | str) -> str:
    """An error text on one line: delta-rs and DuckDB messages span several, and delta-rs
    appends a Rust backtrace when RUST_BACKTRACE is set."""
    text = str(exc)
    if m := _BACKTRACE.search(text):
        text = text[: m.start()]
    return " ".join(text.split())


def lock_conflict(exc: BaseException | None) -> str | None:
    """When ``exc`` (or an exception it came from) is DuckDB refusing a file that another
    process holds, who holds it (``pid 123, /usr/bin/python3``, or ``another process``);
    None for any other error. A held file is busy, not damaged."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if _DUCKDB_LOCK.search(text):
            m = _DUCKDB_HOLDER.search(text)
            return f"pid {m.group(2)}, {m.group(1)}" if m else "another process"
        exc = exc.__cause__ or exc.__context__
    return None


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a full disk. Libraries report it
    as OSError(ENOSPC), as DuckDB's IOException or delta-rs's error text, so both the errno and
    the message count; a worker's exception arrives pickled, with both intact."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return True
        if any(t in str(exc).lower() for t in _FULL_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _first_full(exc: BaseException) -> BaseException | DiskFullError:
    """The earliest full-disk error behind ``exc``: a clean-up that fails on the same full disk
    (a cache save in a ``finally``) raises a new error whose context is the first one. Only
    ``__context__`` leads to earlier errors; a ``__cause__`` explains the same one (a worker's
    remote traceback, say) and is not a message for the user."""
    first: BaseException = exc
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, DiskFullError):
            return cur  # already the user's message, made where the disk filled first
        if (isinstance(cur, OSError) and cur.errno in _FULL_ERRNOS) or any(
            t in str(cur).lower() for t in _FULL_TEXTS
        ):
            first = cur
        cur = cur.__context__
    return first


def disk_full(exc: BaseException, where: str) -> DiskFullError:
    """The one-line error the user sees for a full disk met while doing ``where``: about the
    first write that failed, never a later clean-up that failed for the same reason."""
    first = _first_full(exc)
    if isinstance(first, DiskFullError):
        return DiskFullError(str(first))
    exc = first
    path = getattr(exc, "filename", None)
    return DiskFullError(
        f"no space left on device while {where}"
        + (f" ({path})" if path else "")
        + f": {one_line(exc)}. Nothing partial is visible in the lake; free space (or move the "
        "lake with --lake) and re-run the same command to resume"
    )


def chunk_failure(exc: BaseException) -> Literal["stop", "final", "retry"]:
    """What the failure of one chunk means, decided by its type here and nowhere else.

    - ``"stop"``: a full disk (``is_disk_full``: the errno or the text, anywhere in the chain).
      It is not the chunk's fault, and every other chunk would fail the same way: the run
      stops with a ``DiskFullError``, the chunk is not marked FAILED or DEAD (it goes back to
      PENDING), and the same command resumes once space is freed. Checked first, so a full
      disk met while raising another error still stops the run.
    - ``"final"``: ``PermanentChunkError``: the input changed or vanished after planning, or
      cannot be read as planned (a corrupt stream, an unreadable column). The same bytes fail
      the same way, so retrying only wastes attempts: the chunk goes DEAD at once.
    - ``"retry"``: everything else: a ``TransientError``, a worker process that died (OOM
      killer, a hang the driver killed), or an unexpected bug. It may not happen again, so
      the chunk is retried with backoff, and goes DEAD once ``max_attempts`` are used up
      (the runner counts those).
    """
    if is_disk_full(exc):
        return "stop"
    if isinstance(exc, PermanentChunkError):
        return "final"
    return "retry"
