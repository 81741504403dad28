"""Query results as text: an aligned table, CSV, or JSON lines; the same everywhere.

A table can be fitted to a terminal's width: the columns that matter most are kept, long values
of the columns that may wrap are wrapped, the rest is left out and named under the table (CSV
and JSON always hold everything).
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import os
import sys
import textwrap
import uuid
from collections.abc import Collection, Sequence
from typing import Any

FORMATS = ("table", "csv", "json")
CUT = 60
"""A table cell longer than this is cut with "…", unless its column wraps."""
WRAP_MIN = 20
"""The narrowest a wrapping column gets before it is left out instead."""
SEP = "  "
"""Between two columns of a table."""


def terminal_width() -> int | None:
    """The width tables fit: ``$COLUMNS``, else that of the terminal stdout writes to; None
    (no limit) for a pipe or a file, so that a program reading a table gets every column."""
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else None
    except (OSError, ValueError):
        return None


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="backslashreplace")
    if isinstance(v, dt.date | dt.datetime | dt.time | dt.timedelta):
        return str(v)
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v


def _cell(v: Any, width: int | None = CUT) -> str:
    s = "NULL" if v is None else str(_jsonable(v))
    s = s.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return s if width is None or len(s) <= width else s[: width - 1] + "…"


def _unique(columns: Sequence[str]) -> list[str]:
    """Column names made unique the way DuckDB does it (``a, a -> a, a_1``).

    ``SELECT 1 AS a, 2 AS a`` is valid SQL; keyed by name, a JSON object would keep only the
    last value and silently drop the others.
    """
    seen: set[str] = set()
    out = []
    for given in columns:
        name = given
        while name in seen:
            name = f"{name}_1"
        seen.add(name)
        out.append(name)
    return out


def render(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fmt: str = "table",
    *,
    width: int | None = None,
    first: Sequence[str] = (),
    wrap: Collection[str] = (),
) -> str:
    """Format rows; ``csv`` and ``json`` never cut anything.

    ``table`` cuts long cells (at ``CUT``) except in the ``wrap`` columns, and with a
    ``width`` fits it: the ``first`` columns, then the others left to right, are kept while
    they fit, ``wrap`` columns wrapped onto more lines, and the columns left out are named.
    """
    if fmt == "json":
        # default=str: a type DuckDB may return that _jsonable does not know yet must not crash
        # the whole output with a TypeError.
        keys = _unique(columns)
        return "".join(
            json.dumps(
                dict(zip(keys, map(_jsonable, r), strict=True)), ensure_ascii=False, default=str
            )
            + "\n"
            for r in rows
        )
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if v is None else _jsonable(v) for v in r])
        return buf.getvalue()
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    cells = [
        [_cell(v, None if c in wrap else CUT) for c, v in zip(columns, r, strict=True)]
        for r in rows
    ]
    natural = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    widths = dict(enumerate(natural))
    if width is not None and sum(natural) + len(SEP) * (len(columns) - 1) > width:
        widths = _fit(columns, natural, width, first, wrap)
    shown = sorted(widths)
    out = [
        SEP.join(columns[i][: widths[i]].ljust(widths[i]) for i in shown).rstrip(),
        SEP.join("-" * widths[i] for i in shown),
    ]
    for r in cells:
        parts = [_wrapped(r[i], widths[i]) for i in shown]
        for k in range(max(map(len, parts), default=1)):
            out.append(
                SEP.join(
                    (p[k] if k < len(p) else "").ljust(widths[i])
                    for i, p in zip(shown, parts, strict=True)
                ).rstrip()
            )
    footer = f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    hidden = [c for i, c in enumerate(columns) if i not in widths]
    if hidden:
        footer += (
            f"; hidden to fit {width} columns: {', '.join(hidden)}; see them with --format json"
        )
    out += textwrap.wrap(f"({footer})", width) if width else [f"({footer})"]
    return "\n".join(out) + "\n"


def _wrapped(cell: str, width: int) -> list[str]:
    """A cell as lines of at most ``width`` (at spaces where it can, anywhere where not)."""
    if len(cell) <= width:
        return [cell]
    return textwrap.wrap(cell, width, break_on_hyphens=False) or [""]


def _fit(
    columns: Sequence[str],
    natural: Sequence[int],
    width: int,
    first: Sequence[str],
    wrap: Collection[str],
) -> dict[int, int]:
    """The columns kept and their widths, for a table at most ``width`` wide."""
    order = [columns.index(c) for c in first if c in columns]
    order += [i for i in range(len(columns)) if i not in order]

    def need(i: int) -> int:
        if columns[i] in wrap:
            return min(natural[i], max(len(columns[i]), WRAP_MIN))
        return natural[i]

    widths: dict[int, int] = {}
    used = -len(SEP)
    for i in order:
        if not widths or used + len(SEP) + need(i) <= width:
            widths[i] = need(i)
            used += len(SEP) + need(i)
    spare = width - used
    for i, w in widths.items():  # what is left goes to the wrapping columns, in order
        if columns[i] in wrap and spare > 0:
            grow = min(spare, natural[i] - w)
            widths[i] = w + grow
            spare -= grow
    if spare < 0:  # one column alone is wider than the terminal: it wraps
        widths[order[0]] = max(1, width)
    return widths
