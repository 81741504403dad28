"""The one error tree of lakecurate.

Every error says what happened and what to do next. The CLI prints ``str(error)`` as one line;
``TransientError`` tells the runner that trying the same chunk again may succeed.
"""

from __future__ import annotations


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
