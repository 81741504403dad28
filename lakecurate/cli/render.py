"""Query results as text: an aligned table, CSV, or JSON lines; the same everywhere."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import uuid
from collections.abc import Sequence
from typing import Any

FORMATS = ("table", "csv", "json")


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


def _cell(v: Any, width: int = 60) -> str:
    s = "NULL" if v is None else str(_jsonable(v))
    s = s.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return s if len(s) <= width else s[: width - 1] + "…"


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


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table") -> str:
    """Format rows; ``table`` truncates long cells, ``csv`` and ``json`` never do."""
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
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join([line, sep, *body, f"({len(rows)} row{'s' if len(rows) != 1 else ''})"]) + "\n"
