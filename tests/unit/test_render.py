"""``lakecurate.cli.render``: the same rows as an aligned table, CSV and JSON lines.

The table is for eyes (one line per row, long cells cut); CSV and JSON are for programs (nothing
cut, nothing escaped beyond what the format needs), so each test reads the output back.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import uuid

import pytest

from lakecurate.cli.render import FORMATS, render

COLUMNS = ["id", "text", "blob", "missing"]
ROWS = [
    (1, "line one\nline two\tend\r", b"raw \xff bytes", None),
    (2, "x" * 200, b"plain", "here"),
]


def _table_lines(columns: list[str], rows: list[tuple[object, ...]]) -> list[str]:
    out = render(columns, rows, "table")
    assert out.endswith("\n")
    return out.rstrip("\n").split("\n")


def _csv(columns: list[str], rows: list[tuple[object, ...]]) -> list[list[str]]:
    return list(csv.reader(io.StringIO(render(columns, rows, "csv"), newline="")))


def _json(columns: list[str], rows: list[tuple[object, ...]]) -> list[dict[str, object]]:
    out = render(columns, rows, "json")
    return [json.loads(line) for line in out.splitlines()]


def test_formats_constant_lists_the_three_formats() -> None:
    assert FORMATS == ("table", "csv", "json")


def test_table_layout_header_separator_rows_and_count() -> None:
    lines = _table_lines(["a", "longer_name"], [(1, "x"), (22, None)])
    assert lines[0] == "a   longer_name"
    assert lines[1] == "--  -----------"
    assert lines[2] == "1   x"
    assert lines[3] == "22  NULL"
    assert lines[4] == "(2 rows)"
    assert len(lines) == 5


@pytest.mark.parametrize(("n", "footer"), [(0, "(0 rows)"), (1, "(1 row)"), (3, "(3 rows)")])
def test_table_row_count_footer(n: int, footer: str) -> None:
    assert _table_lines(["a"], [(i,) for i in range(n)])[-1] == footer


def test_null_in_each_format() -> None:
    assert _table_lines(["a", "b"], [(None, 1)])[2].split() == ["NULL", "1"]
    # CSV has no NULL: an empty field (and not the string "None").
    assert _csv(["a", "b"], [(None, 1)]) == [["a", "b"], ["", "1"]]
    assert _json(["a", "b"], [(None, 1)]) == [{"a": None, "b": 1}]


def test_table_escapes_control_characters_so_one_row_is_one_line() -> None:
    lines = _table_lines(COLUMNS, ROWS)
    assert len(lines) == 2 + len(ROWS) + 1
    assert "line one\\nline two\\tend\\r" in lines[2]
    assert "\t" not in "".join(lines)


def test_csv_and_json_keep_newlines_and_tabs_verbatim() -> None:
    assert _csv(COLUMNS, ROWS)[1][1] == "line one\nline two\tend\r"
    assert _json(COLUMNS, ROWS)[0]["text"] == "line one\nline two\tend\r"


def test_bytes_are_decoded_and_invalid_utf8_is_shown_not_dropped() -> None:
    assert "raw \\xff bytes" in _table_lines(COLUMNS, ROWS)[2]
    assert _csv(COLUMNS, ROWS)[1][2] == "raw \\xff bytes"
    parsed = _json(COLUMNS, ROWS)
    assert parsed[0]["blob"] == "raw \\xff bytes"
    assert parsed[1]["blob"] == "plain"


def test_long_cells_are_truncated_in_table_only() -> None:
    lines = _table_lines(COLUMNS, ROWS)
    cell = lines[3].split()[1]
    assert cell == "x" * 59 + "…"
    assert "x" * 60 not in "".join(lines)
    assert _csv(COLUMNS, ROWS)[2][1] == "x" * 200
    assert _json(COLUMNS, ROWS)[1]["text"] == "x" * 200


def test_a_cell_of_exactly_the_width_is_not_truncated() -> None:
    assert _table_lines(["t"], [("y" * 60,)])[2] == "y" * 60


def test_unknown_format_is_a_value_error_naming_it_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"'xml'.*table, csv, json"):
        render(["a"], [(1,)], "xml")


def test_json_datetimes_round_trip_through_fromisoformat() -> None:
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
    naive = dt.datetime(1999, 12, 31, 23, 59, 59)
    day = dt.date(2020, 2, 29)
    tod = dt.time(12, 30, 1)
    (row,) = _json(["tz", "naive", "day", "tod"], [(when, naive, day, tod)])
    assert all(isinstance(v, str) for v in row.values())
    assert dt.datetime.fromisoformat(str(row["tz"])) == when
    assert dt.datetime.fromisoformat(str(row["naive"])) == naive
    assert dt.date.fromisoformat(str(row["day"])) == day
    assert dt.time.fromisoformat(str(row["tod"])) == tod


def test_json_nested_values_decimals_and_unicode() -> None:
    (row,) = _json(
        ["l", "s", "d", "u"],
        [([1, None, b"b"], {"k": dt.date(2021, 5, 6), 3: "v"}, decimal.Decimal("1.5"), "héllo ✓")],
    )
    assert row == {
        "l": [1, None, "b"],
        "s": {"k": "2021-05-06", "3": "v"},
        "d": 1.5,
        "u": "héllo ✓",
    }
    # Non-ASCII is written as itself, not as \\u escapes.
    assert "héllo ✓" in render(["u"], [("héllo ✓",)], "json")


def test_json_is_one_object_per_line_and_empty_for_no_rows() -> None:
    out = render(["a"], [(1,), (2,), (3,)], "json")
    assert out.count("\n") == 3
    assert [json.loads(x)["a"] for x in out.splitlines()] == [1, 2, 3]
    assert render(["a"], [], "json") == ""


def test_csv_of_no_rows_is_the_header_and_quotes_commas() -> None:
    assert render(["a", "b"], [], "csv") == "a,b\n"
    assert _csv(["a"], [('x, "y"',)]) == [["a"], ['x, "y"']]


def test_uuid_values_render_in_every_format() -> None:
    # DuckDB returns UUID columns as uuid.UUID; JSON used to crash on them with a TypeError.
    u = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
    assert _json(["u"], [(u,)]) == [{"u": str(u)}]
    assert _csv(["u"], [(u,)])[1] == [str(u)]
    assert _table_lines(["u"], [(u,)])[2] == str(u)


def test_json_keeps_every_column_when_names_repeat() -> None:
    # `SELECT 1 AS a, 2 AS a` is valid SQL; a dict keyed by name used to drop the first value.
    # Repeats get DuckDB's own de-duplication suffix (a, a_1, a_1_1).
    (row,) = _json(["a", "a", "a_1"], [(1, 2, 3)])
    assert row == {"a": 1, "a_1": 2, "a_1_1": 3}
    # CSV and the table show the names as given.
    assert _csv(["a", "a"], [(1, 2)]) == [["a", "a"], ["1", "2"]]
