"""``render`` fitted to a width: the ``first`` columns kept first, the columns left out named,
wrapped cells losing no character, and no line ever wider than asked."""

from __future__ import annotations

import pytest

from lakecurate.cli.render import render

COLUMNS = ["key", "big", "note", "small"]
ROWS = [("k1", "x" * 50, "one two three four five six seven eight nine ten", 7)]


def _lines(out: str) -> list[str]:
    return out.rstrip("\n").split("\n")


def test_without_a_width_nothing_is_hidden_or_wrapped() -> None:
    lines = _lines(render(COLUMNS, ROWS, wrap=["note"]))
    assert lines[0].split() == COLUMNS
    assert lines[-1] == "(1 row)"
    assert len(lines) == 4


@pytest.mark.parametrize("width", [30, 45, 60, 80])
def test_no_line_is_wider_than_asked(width: int) -> None:
    out = render(COLUMNS, ROWS, width=width, first=["key", "note"], wrap=["note"])
    assert max(map(len, _lines(out))) <= width


def test_first_columns_are_kept_and_the_others_named_as_hidden() -> None:
    lines = _lines(render(COLUMNS, ROWS, width=45, first=["key", "note"], wrap=["note"]))
    assert lines[0].split() == ["key", "note", "small"]  # in the given order; big did not fit
    start = next(i for i, line in enumerate(lines) if line.startswith("("))
    footer = " ".join(lines[start:])
    assert footer == "(1 row; hidden to fit 45 columns: big; see them with --format json)"


def test_a_wrapped_cell_keeps_every_word() -> None:
    note = ROWS[0][2]
    lines = _lines(render(["key", "note"], [("k1", note)], width=30, wrap=["note"]))
    assert lines[-1] == "(1 row)"
    body = [ln[len("key  ") :] for ln in lines[2:-1]]
    assert len(body) > 1 and max(map(len, body)) <= 25
    assert " ".join(body) == note


def test_a_column_wider_than_the_terminal_alone_wraps_to_it() -> None:
    value = "/a/very/long/path/" * 5
    lines = _lines(render(["path"], [(value,)], width=20, wrap=["path"]))
    assert max(map(len, lines)) <= 20
    assert "".join(lines[2:-1]) == value
