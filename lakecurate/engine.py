"""The one place that opens DuckDB, and the loader of the named SQL statements in ``sql/``.

SQL lives in files (``-- name: some_statement`` starts a statement) so it can be read, tested and
reviewed as SQL. Values are always bound parameters; identifiers go through ``quote_ident``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

import duckdb

from lakecurate.errors import BusyError, LakeError

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def sql_dir() -> Path:
    """``sql/`` inside the installed package, or at the top of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "sql", here.parent / "sql"):
        if candidate.is_dir():
            return candidate
    raise LakeError(f"lakecurate's sql/ folder is missing next to {here}: reinstall lakecurate")


@cache
def statements() -> dict[str, str]:
    """Every named statement under ``sql/``, keyed ``subject.name`` (``state.claim_chunk``)."""
    found: dict[str, str] = {}
    root = sql_dir()
    for path in sorted(root.rglob("*.sql")):
        if "migrations" in path.parts:
            continue
        subject = path.parent.name
        text = path.read_text(encoding="utf-8")
        marks = list(_NAME.finditer(text))
        if not marks:
            raise LakeError(f"{path} has no '-- name:' statements")
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            key = f"{subject}.{m.group(1)}"
            if key in found:
                raise LakeError(f"SQL statement {key} is defined twice (in {path})")
            found[key] = text[m.end() : end].strip().rstrip(";")
    return found


def q(name: str) -> str:
    """The text of one named statement."""
    try:
        return statements()[name]
    except KeyError:
        raise LakeError(f"no SQL statement named {name!r} in {sql_dir()}") from None


def migrations() -> list[tuple[int, str]]:
    """Numbered schema migrations (``sql/state/migrations/001_init.sql``), in order."""
    out = []
    for path in sorted((sql_dir() / "state" / "migrations").glob("*.sql")):
        out.append((int(path.name.split("_", 1)[0]), path.read_text(encoding="utf-8")))
    return out


def quote_ident(name: str) -> str:
    """Quote an SQL identifier for DuckDB."""
    return '"' + name.replace('"', '""') + '"'


def connect(
    path: Path | None = None,
    *,
    read_only: bool = False,
    threads: int | None = None,
    track_progress: bool = False,
) -> duckdb.DuckDBPyConnection:
    """Open DuckDB (in memory when ``path`` is None), mapping lock conflicts to a clear error.
    ``track_progress``: ``query_progress()`` answers from another thread (nothing is drawn)."""
    try:
        con = duckdb.connect(str(path) if path else ":memory:", read_only=read_only)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise BusyError(
                f"{path} is open for writing by another process (a running ingest?): "
                "wait for it to finish, then try again"
            ) from exc
        raise LakeError(f"cannot open {path}: {exc}") from exc
    _settings(con, threads, track_progress)
    return con


def _settings(con: duckdb.DuckDBPyConnection, threads: int | None, track_progress: bool) -> None:
    """Per-connection settings. DuckDB draws its own bar on stdout for a query that runs a few
    seconds: from a worker or the driver it would overwrite lakecurate's progress display (on
    by default; a per-connection setting, so set on every connection and cursor)."""
    if track_progress:
        con.execute(
            "SET enable_progress_bar = true; SET enable_progress_bar_print = false; "
            "SET progress_bar_time = 0"
        )
    else:
        con.execute("SET enable_progress_bar = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")


_PROCESS_DB: dict[int, tuple[duckdb.DuckDBPyConnection, set[Callable[..., None]]]] = {}
"""pid -> this process's in-memory database for ``cursor``, and the setups already run on it."""


def cursor(
    *,
    threads: int | None = None,
    track_progress: bool = False,
    setup: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A fresh connection to this process's one in-memory database, for a short piece of
    work (a worker's chunk). Opening an in-memory DuckDB costs ~10 ms and closing it ~2 ms, a
    cursor of a kept one ~0.3 ms: on small chunks the opening was a third of a worker's time
    (issue 14). Close it when done: what it registered goes with it. ``setup`` (e.g. creating
    functions and macros, which live in the database) runs once per process. ``threads`` is
    the database's setting, so every cursor of the process shares it."""
    pid = os.getpid()
    if pid not in _PROCESS_DB:  # a forked child never shares its parent's database
        _PROCESS_DB.clear()
        _PROCESS_DB[pid] = (connect(threads=threads), set())
    db, done = _PROCESS_DB[pid]
    con = db.cursor()
    _settings(con, threads, track_progress)
    if setup is not None and setup not in done:
        setup(con)
        done.add(setup)
    return con
