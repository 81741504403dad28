"""Tables that fit the terminal (issue 16, item 7): `history` (~240 columns), `index stats`
(~260) and `explain` at COLUMNS=100 and 200, run as real processes: no line wider than the
terminal, the key columns there, the others named as hidden and all in `--format json`, and
`explain` showing whole paths and hashes (wrapped, never cut).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import run_lakecurate

from lakecurate import Lake

WIDTHS = [100, 200]


@pytest.fixture(scope="module")
def lake(small_lake: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus ingested (a commit: a copy of the session's ``small_lake``), then compacted
    (a second one)."""
    path = Path(shutil.copytree(small_lake, tmp_path_factory.mktemp("width") / "lake"))
    proc = run_lakecurate("compact", "--lake", path)
    assert proc.returncode == 0, proc.stderr
    return path


def _run(width: int | None, *args: object) -> str:
    """stdout of a command at ``width`` columns (None: not set, output to a pipe)."""
    proc = run_lakecurate(*args, env={"COLUMNS": "" if width is None else str(width)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _json_columns(*args: object) -> list[str]:
    rows = [json.loads(line) for line in _run(None, *args, "--format", "json").splitlines()]
    return list(rows[0])


def _fits(out: str, width: int) -> None:
    wide = [line for line in out.splitlines() if len(line) > width]
    assert wide == [], f"{len(wide)} line(s) wider than {width}: {wide[0]!r}"


def _header_and_hidden(out: str) -> tuple[list[str], list[str]]:
    """The header's columns and the columns the footer names as hidden (the footer may wrap)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("("))
    footer = " ".join(lines[start:])
    hidden: list[str] = []
    if "hidden to fit" in footer:
        named = footer.split("columns: ", 1)[1].split("; see them with --format json", 1)[0]
        hidden = named.split(", ")
    return lines[0].split(), hidden


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    ("command", "key"),
    [
        (("history",), ["version", "timestamp", "operation", "rows_added", "rows_removed"]),
        (("index", "stats"), ["space", "file", "n", "tier2_rows", "fill_ratio", "estimated_p"]),
    ],
    ids=["history", "index-stats"],
)
def test_wide_tables_fit_and_name_what_they_hide(
    lake: Path, width: int, command: tuple[str, ...], key: list[str]
) -> None:
    out = _run(width, *command, "--lake", lake)
    _fits(out, width)
    shown, hidden = _header_and_hidden(out)
    assert set(key) <= set(shown)
    every = _json_columns(*command, "--lake", lake)
    assert len(every) > len(shown)  # the table really was too wide for this test to mean much
    assert sorted(shown + hidden) == sorted(every)  # each column shown or named, once
    if width == 200:
        assert len(shown) > len(key)  # a wider terminal shows more


def test_history_rows_are_all_there(lake: Path) -> None:
    out = _run(100, "history", "--lake", lake)
    versions = [line.split()[0] for line in out.splitlines()[2:] if line[:1].isdigit()]
    assert versions == ["0", "1"]
    assert "COMPACT" in out


def test_a_pipe_gets_every_column(lake: Path) -> None:
    shown, hidden = _header_and_hidden(_run(None, "history", "--lake", lake))
    assert hidden == []
    assert shown == _json_columns("history", "--lake", lake)


def _fields(out: str) -> dict[str, str]:
    """The first occurrence's field -> value, continuation lines joined (spaces dropped: a wrap
    may fall on one)."""
    lines = out.split("== related", maxsplit=1)[0].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("field")) + 2
    fields: dict[str, str] = {}
    name = ""
    for line in lines[start:]:
        if line.startswith("("):
            break
        value = line
        if not line.startswith(" "):
            name, _, value = line.partition(" ")
            fields[name] = ""
        fields[name] += value.replace(" ", "")
    return fields


@pytest.mark.parametrize("width", WIDTHS)
def test_explain_shows_whole_paths_and_hashes(lake: Path, width: int) -> None:
    # A record without an id of its own: its id is its file's absolute path and line.
    (doc_id,) = Lake.open(lake).sql("SELECT min(id) FROM documents WHERE NOT id_given").rows[0]
    out = _run(width, "explain", doc_id, "--lake", lake)
    _fits(out, width)
    assert "…" not in out  # nothing cut
    (full,) = [
        json.loads(line)
        for line in _run(None, "explain", doc_id, "--lake", lake, "--format", "json").splitlines()
        if json.loads(line)["section"] == "occurrence"
    ]
    shown = _fields(out)
    for field in ("id", "source_path", "input_sha256", "chunk_key", "run_id", "config_hash"):
        assert full[field], field
        assert shown[field] == str(full[field]).replace(" ", ""), field
    assert len(shown["input_sha256"]) == 64
