"""The one error tree of lakecurate.

Every error says what happened and what to do next. The CLI prints ``str(error)`` as one line;
``TransientError`` tells the runner that trying the same chunk again may succeed.
"""

from __future__ import annotations

import errno


class LakecurateError(Exception):
    """Base of every error lakecurate raises on purpose."""


class ConfigError(LakecurateError):
    """The pipeline configuration is invalid (names the key and the allowed values)."""


class InputError(LakecurateError):
    """An input path is missing, unreadable or of an unknown format."""


class LakeError(LakecurateError):
    """The lake folder is missing, foreign or in a state lakecurate cannot use."""


class LockedError(LakeError):
    """Another process holds the lake's writer lock."""


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


class CommitError(LakecurateError):
    """The Delta commit or the state update after it failed; a re-run reconciles."""


class DiskFullError(LakecurateError):
    """A write found no space left (ENOSPC or a quota): the run stops, nothing partial is
    visible, and the same command resumes once space is freed."""


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXTS = ("no space left on device", "disk quota exceeded")


def one_line(exc: BaseException | str) -> str:
    """An error text on one line: delta-rs and DuckDB messages span several."""
    return " ".join(str(exc).split())


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


def disk_full(exc: BaseException, where: str) -> DiskFullError:
    """The one-line error the user sees for a full disk met while doing ``where``."""
    path = getattr(exc, "filename", None)
    return DiskFullError(
        f"no space left on device while {where}" + (f" ({path})" if path else "")
        + f": {one_line(exc)}. Nothing partial is visible in the lake; free space (or move the "
        "lake with --lake) and re-run the same command to resume")
