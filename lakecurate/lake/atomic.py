"""Files written whole or not at all: a temp sibling, fsync, rename, fsync of the folder.

Every file lakecurate writes outside Delta and DuckDB goes through here (staged chunks, Bloom
files, the state snapshot, the config, reports and exports), so a kill leaves either the old
file or the new one, plus at most a temp file that ``is_temp`` recognises and cleanup removes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

TEMP_MARK = ".tmp_"


def is_temp(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is the temp file of an interrupted atomic write."""
    name = os.path.basename(path)
    return TEMP_MARK in name or name.endswith(".toml.tmp")  # .toml.tmp: before 0.2


def fsync_path(path: Path) -> None:
    """Flush a file (or, on POSIX, a folder's entries) to disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # a platform without directory file descriptors
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replacing(path: Path, *, hidden: bool = False, durable: bool = True) -> Iterator[Path]:
    """Yield a temp path next to ``path``; when the block ends without an error, fsync it and
    rename it over ``path``; otherwise delete it. ``hidden`` starts the temp name with a dot
    (for files written into a user's folder). ``durable=False`` skips the two fsyncs, for a
    file its reader checks (a checksum) and can do again: a power cut that tears it costs
    that redo, and the fsyncs cost more than writing a small file."""
    name = f"{'.' if hidden else ''}{path.name}{TEMP_MARK}{os.getpid()}_{time.time_ns()}"
    tmp = path.with_name(name)
    try:
        yield tmp
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
        if durable:
            fsync_path(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: Path, data: bytes, *, hidden: bool = False) -> None:
    """Write a small file atomically."""
    with replacing(path, hidden=hidden) as tmp:
        tmp.write_bytes(data)


def write_text(path: Path, text: str, *, hidden: bool = False) -> None:
    """Write a small UTF-8 text file atomically."""
    write_bytes(path, text.encode("utf-8"), hidden=hidden)
