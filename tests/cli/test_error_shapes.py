"""One kind of error (issue 16, item 6): every failure, a usage mistake included, is one
``error: ...`` line on stderr and exit code 1, as docs/cli.md states; it names what was given
(the config file, the lake URI, the statement) and creates nothing. Real processes throughout.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, run_lakecurate

PROG = "python -m lakecurate"  # how run_lakecurate invokes the command


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single ``error: ...`` line, exit code 1, nothing else on either stream."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == ""
    return lines[0]


@pytest.mark.parametrize(
    ("args", "said", "command"),
    [
        (["--bogus"], "error: no such option '--bogus'", ""),
        (["nosuch"], "error: no such command 'nosuch'", ""),
        (["status", "--fromat", "json"], "Did you mean '--format'?", "status"),
        (["status", "--format", "xml"], "invalid value for '--format': 'xml'", "status"),
        (["ingest"], "error: missing argument 'INPUTS...'", "ingest"),
        (["diff", "1"], "error: missing argument 'B'", "diff"),
        (["diff", "one", "2"], "invalid value for 'A'", "diff"),
        (["index", "nope"], "error: no such command 'nope'", "index"),
    ],
    ids=["option", "command", "typo", "choice", "argument", "second-argument", "int", "subgroup"],
)
def test_usage_errors_are_one_error_line_with_the_help_hint(
    tmp_path: Path, args: list[str], said: str, command: str
) -> None:
    line = _error_line(run_lakecurate(*args, "--lake", tmp_path / "lake", cwd=tmp_path))
    assert said in line
    assert line.endswith(f"(try '{f'{PROG} {command}'.strip()} --help')")
    assert "Usage:" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [[], ["index"]])
def test_a_group_without_a_command_shows_its_help(args: list[str]) -> None:
    proc = run_lakecurate(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: ")
    assert "Commands:" in proc.stdout
    assert proc.stderr == ""


def test_docs_state_the_exit_codes() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for code in ("0", "1", "2", "130"):
        assert f"\n- `{code}`: " in doc
    assert "(try 'lakecurate CMD --help')" in doc


def test_an_unknown_config_key_names_the_file_given(tmp_path: Path) -> None:
    cfg = tmp_path / "mine.toml"
    cfg.write_text('[ingest]\nchunk_sise = "1MiB"\n', encoding="utf-8")
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "hello"}\n', encoding="utf-8")
    line = _error_line(run_lakecurate("ingest", data, "--lake", tmp_path / "lake", "--config", cfg))
    assert line.startswith(f"error: {cfg}: unknown key [ingest].chunk_sise; allowed keys: ")
    assert "lakecurate.toml" not in line
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("s3:///lake", "s3:///lake: name a bucket, e.g. s3://my-bucket/lake"),
        ("gs://bucket/lake", "gs://bucket/lake: only local folders and s3://"),
        ("file:///srv/lake", "file:///srv/lake is a URL: pass the folder as a path: /srv/lake"),
    ],
)
@pytest.mark.parametrize("command", ["ingest", "status"])
def test_a_lake_uri_is_refused_and_nothing_is_created(
    tmp_path: Path, uri: str, said: str, command: str
) -> None:
    """Object storage is s3:// (tests/integration/test_s3.py); anything else is refused
    before a folder is made (as a path, ``gs://b/x`` would be ``./gs:/b/x``)."""
    data = tmp_path / "in" / "a.jsonl"
    data.parent.mkdir()
    data.write_text('{"text": "hello"}\n', encoding="utf-8")
    args = [data] if command == "ingest" else []
    line = _error_line(run_lakecurate(command, *args, "--lake", uri, cwd=tmp_path))
    assert said in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no ./s3:/... folder


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("errors")
    data = base / "in.jsonl"
    data.write_text(
        "".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(5)), encoding="utf-8"
    )
    proc = run_lakecurate("ingest", data, "--lake", base / "lake", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    return base / "lake"


@pytest.mark.parametrize(
    ("statement", "verb", "does"),
    [
        ("INSTALL httpfs", "INSTALL", "downloads"),
        ("force install httpfs", "FORCE INSTALL", "downloads"),
        ("LOAD httpfs", "LOAD", "loads"),
    ],
)
def test_extension_statements_are_refused_by_their_own_name(
    lake: Path, statement: str, verb: str, does: str
) -> None:
    line = _error_line(run_lakecurate("sql", statement, "--lake", lake))
    assert f"read-only: {verb} refused (it {does} a DuckDB extension)" in line
    if verb != "LOAD":
        assert "LOAD" not in line
