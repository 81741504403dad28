"""The ``lakecurate`` command as a user meets it: real processes (``python -m lakecurate``), exit
codes, stdout for results, one ``error: ...`` line on stderr for failures, and a read-only ``sql``
that leaves the lake byte-for-byte unchanged whatever it is asked.

One lake is ingested per module (twice: the second run must be a no-op) and shared by the tests
that only read it. ``--help`` and the docs-drift checks use click's ``CliRunner`` in-process.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import click
import pytest
from click.testing import CliRunner
from helpers import ROOT, SMALL_CONFIG, run_lakecurate

from lakecurate import Lake, __version__
from lakecurate.cli import main

RunCli = Callable[..., subprocess.CompletedProcess[str]]

SUMMARY = re.compile(
    r"ingested (\d+) chunk\(s\) of (\d+) file\(s\): ([\d,]+) documents in, "
    r"([\d,]+) kept, ([\d,]+) dropped"
)


def _int(s: str) -> int:
    return int(s.replace(",", ""))


@dataclass
class Ingested:
    path: Path
    first: subprocess.CompletedProcess[str]
    second: subprocess.CompletedProcess[str]
    rows_in: int
    kept: int
    dropped: int
    chunks: int


@pytest.fixture(scope="module")
def lake(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Ingested:
    base = tmp_path_factory.mktemp("cli")
    cfg = base / "lakecurate.toml"
    cfg.write_text(SMALL_CONFIG, encoding="utf-8")
    path = base / "lake"
    first = run_lakecurate("ingest", corpus, "--lake", path, "--config", cfg)
    assert first.returncode == 0, first.stderr
    m = SUMMARY.search(first.stdout)
    assert m, f"no summary line in {first.stdout!r}"
    second = run_lakecurate("ingest", corpus, "--lake", path, "--config", cfg)
    return Ingested(
        path,
        first,
        second,
        rows_in=_int(m.group(3)),
        kept=_int(m.group(4)),
        dropped=_int(m.group(5)),
        chunks=int(m.group(1)),
    )


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single ``error: ...`` line a failing command must print, and nothing else."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == ""
    return lines[0]


def _scalar(lake: Path, query: str) -> object:
    (row,) = Lake.open(lake).sql(query).rows
    (value,) = row
    return value


def _snapshot(lake: Path) -> dict[str, object]:
    """Everything that would show a write: row counts of every table and view, the Delta log,
    and the bytes of every file in the lake."""
    db = Lake.open(lake)
    tables = [
        r[0]
        for r in db.sql(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake' ORDER BY 1"
        ).rows
    ]
    assert "chunks" in tables and "runs" in tables
    names = [*tables, "documents", "docs", "rejects"]
    union = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM \"{t}\"" for t in names)
    counts = dict(db.sql(union).rows)
    log = sorted(p.name for p in (lake / "documents" / "_delta_log").glob("*.json"))
    files = {
        str(p.relative_to(lake)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(lake.rglob("*"))
        if p.is_file()
    }
    return {"counts": counts, "delta_log": log, "files": files}


@pytest.fixture(scope="module")
def baseline(lake: Ingested) -> dict[str, object]:
    """The lake as the two ingests left it; read-only commands must keep it exactly so."""
    snap = _snapshot(lake.path)
    assert snap["delta_log"], "no Delta log: comparisons with it would prove nothing"
    return snap


# --- ingest ---------------------------------------------------------------------------------


def test_ingest_prints_a_summary_with_documents_in_and_kept(lake: Ingested) -> None:
    assert lake.first.returncode == 0
    assert lake.rows_in == lake.kept + lake.dropped
    assert lake.kept > 0 and lake.dropped > 0  # the corpus is dirty on purpose
    assert lake.chunks > 4  # 64 KiB chunks: more chunks than the four files
    assert "error" not in lake.first.stdout.lower()
    assert "Traceback" not in lake.first.stderr


def test_summary_agrees_with_the_lake(lake: Ingested) -> None:
    assert _scalar(lake.path, "SELECT count(*) FROM documents") == lake.rows_in
    assert _scalar(lake.path, "SELECT count(*) FROM docs") == lake.kept
    assert _scalar(lake.path, "SELECT count(*) FROM chunks WHERE status = 'SUCCESS'") == lake.chunks


def test_second_identical_ingest_is_nothing_to_do(lake: Ingested) -> None:
    assert lake.second.returncode == 0, lake.second.stderr
    assert "nothing to do" in lake.second.stdout
    assert f"{lake.chunks} chunk(s)" in lake.second.stdout
    assert not SUMMARY.search(lake.second.stdout)
    assert _scalar(lake.path, "SELECT count(*) FROM documents") == lake.rows_in
    outcomes = Lake.open(lake.path).sql("SELECT outcome FROM runs ORDER BY started_at").rows
    assert [o for (o,) in outcomes] == ["OK", "NOTHING_TO_DO"]


def test_ingest_of_a_missing_path_names_it(run_cli: RunCli, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "data.jsonl"
    line = _one_error_line(run_cli("ingest", missing, "--lake", tmp_path / "lake"))
    assert str(missing) in line
    assert "no such file" in line


def test_ingest_names_the_missing_one_among_several(
    run_cli: RunCli, corpus: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "typo.jsonl"
    line = _one_error_line(
        run_cli("ingest", corpus / "web_a.jsonl", missing, "--lake", tmp_path / "lake")
    )
    assert str(missing) in line
    assert "web_a" not in line


def test_failed_ingest_of_a_missing_path_creates_no_lake(run_cli: RunCli, tmp_path: Path) -> None:
    run_cli("ingest", tmp_path / "typo.jsonl", "--lake", tmp_path / "lake")
    assert not (tmp_path / "lake").exists()


def test_config_with_an_unknown_key_is_refused_naming_it(
    run_cli: RunCli, corpus: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[ingest]\nchunk_size = "64KiB"\nchunk_sise = "1MiB"\n', encoding="utf-8")
    line = _one_error_line(run_cli("ingest", corpus, "--lake", tmp_path / "lake", "--config", cfg))
    assert "chunk_sise" in line
    assert "chunk_size" in line  # the allowed keys, so the typo is easy to fix
    assert not (tmp_path / "lake").exists()


# --- status ---------------------------------------------------------------------------------


def test_status_table(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli("status", "--lake", lake.path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for section in ("== chunks", "== funnel", "== runs"):
        assert section in out
    assert "== failures" not in out  # empty sections are left out of the table view
    chunks = out.split("== chunks", 1)[1].split("==", 1)[0].splitlines()
    row = next(ln for ln in chunks if ln.startswith("SUCCESS"))
    assert str(lake.kept) in row.split()
    assert "(1 row)" in chunks


def test_status_csv_parses_and_every_row_names_its_section(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli("status", "--lake", lake.path, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.reader(io.StringIO(proc.stdout, newline="")))
    header: list[str] = []
    seen: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        if r[0] == "section":
            header = r
            continue
        assert header, "data row before any header"
        assert len(r) == len(header)
        seen.setdefault(r[0], []).append(dict(zip(header, r, strict=True)))
    assert {"chunks", "funnel", "runs"} <= set(seen)
    (success,) = [r for r in seen["chunks"] if r["status"] == "SUCCESS"]
    assert int(success["rows_kept"]) == lake.kept
    assert int(success["chunks"]) == lake.chunks
    assert len(seen["runs"]) == 2


def test_status_json_is_json_lines(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli("status", "--lake", lake.path, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records and all(isinstance(r, dict) for r in records)
    by_section: dict[str, list[dict[str, object]]] = {}
    for r in records:
        by_section.setdefault(str(r["section"]), []).append(r)
    assert {"chunks", "funnel", "runs"} <= set(by_section)
    assert sum(int(str(r["rows_kept"])) for r in by_section["chunks"]) == lake.kept
    assert {r["outcome"] for r in by_section["runs"]} == {"OK", "NOTHING_TO_DO"}
    parse = next(r for r in by_section["funnel"] if r["step"] == "parse")
    assert parse["docs_in"] == lake.rows_in


def test_lake_defaults_to_the_environment_variable(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli(
        "sql",
        "SELECT count(*) AS n FROM docs",
        "--format",
        "csv",
        env={"LAKECURATE_LAKE": str(lake.path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"n\n{lake.kept}\n"


# --- sql ------------------------------------------------------------------------------------


def test_sql_docs_count_equals_kept_documents(run_cli: RunCli, lake: Ingested) -> None:
    a = run_cli("sql", "select count(*) from docs", "--lake", lake.path, "--format", "csv")
    b = run_cli(
        "sql", "select count(*) from documents where kept", "--lake", lake.path, "--format", "csv"
    )
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    n_docs = int(list(csv.reader(io.StringIO(a.stdout)))[1][0])
    n_kept = int(list(csv.reader(io.StringIO(b.stdout)))[1][0])
    assert n_docs == n_kept == lake.kept


QUERY = "SELECT 1 AS n, NULL AS missing, 'a,b' AS s, 'x' || chr(10) || 'y' AS nl"


def test_sql_table_format(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli("sql", QUERY, "--lake", lake.path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["n", "missing", "s", "nl"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].split() == ["1", "NULL", "a,b", "x\\ny"]
    assert lines[3] == "(1 row)"
    assert len(lines) == 4


def test_sql_csv_format(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli("sql", QUERY, "--lake", lake.path, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert list(csv.reader(io.StringIO(proc.stdout, newline=""))) == [
        ["n", "missing", "s", "nl"],
        ["1", "", "a,b", "x\ny"],
    ]


def test_sql_json_format(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli("sql", QUERY, "--lake", lake.path, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(x) for x in proc.stdout.splitlines()] == [
        {"n": 1, "missing": None, "s": "a,b", "nl": "x\ny"}
    ]


def test_sql_json_over_real_rows(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli(
        "sql",
        "SELECT reason, count(*) AS n FROM documents GROUP BY ALL ORDER BY ALL",
        "--lake",
        lake.path,
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in proc.stdout.splitlines()]
    assert sum(r["n"] for r in rows) == lake.rows_in
    assert [r["n"] for r in rows if r["reason"] is None] == [lake.kept]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT * FROM docs LIMIT 3", 3),
        ("SELECT id, text FROM documents LIMIT 1", 1),
        ("SELECT * FROM rejects LIMIT 2", 2),
    ],
)
def test_sql_with_limit_exits_cleanly(
    run_cli: RunCli, lake: Ingested, query: str, expected: int
) -> None:
    # A scan DuckDB stops early used to crash the process at exit (SIGSEGV / abort / hang)
    # after printing the right rows: see query._native_local.
    proc = run_cli("sql", query, "--lake", lake.path, "--format", "csv", timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert len(list(csv.reader(io.StringIO(proc.stdout, newline="")))) == expected + 1


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO runs SELECT * FROM runs",
        "DELETE FROM chunks",
        "UPDATE chunks SET status = 'PENDING'",
        "CREATE TABLE evil AS SELECT 1 AS x",
        "COPY (SELECT * FROM docs) TO '{tmp}/out.csv'",
        "ATTACH '{tmp}/other.duckdb' AS other",
        "SET enable_external_access=true",
        "SELECT 1; DELETE FROM chunks",  # a write behind a read
        "EXPLAIN ANALYZE DELETE FROM chunks",  # passes the statement check; stopped by READ_ONLY
        "WITH d AS (DELETE FROM chunks RETURNING *) SELECT * FROM d",
    ],
)
def test_write_statements_are_refused_and_change_nothing(
    run_cli: RunCli, lake: Ingested, baseline: dict[str, object], tmp_path: Path, statement: str
) -> None:
    proc = run_cli("sql", statement.format(tmp=tmp_path), "--lake", lake.path)
    line = _one_error_line(proc)
    assert "read-only" in line
    assert _snapshot(lake.path) == baseline
    assert not (tmp_path / "out.csv").exists()
    assert not (tmp_path / "other.duckdb").exists()


def test_status_and_queries_leave_the_lake_unchanged(
    run_cli: RunCli, lake: Ingested, baseline: dict[str, object]
) -> None:
    assert run_cli("status", "--lake", lake.path).returncode == 0
    assert run_cli("sql", "SELECT * FROM docs LIMIT 1", "--lake", lake.path).returncode == 0
    assert _snapshot(lake.path) == baseline


def test_sql_syntax_error_is_one_clear_failure(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli("sql", "SELEC count(*) FROM docs", "--lake", lake.path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    first = proc.stderr.splitlines()[0]
    # DuckDB's message goes on with the query and a caret under the error; the first line says
    # what is wrong.
    assert first.startswith("error: SQL error: Parser Error: syntax error at or near")
    assert '"SELEC"' in first
    assert proc.stdout == ""


def test_sql_unknown_table_names_it(run_cli: RunCli, lake: Ingested) -> None:
    proc = run_cli("sql", "SELECT * FROM no_such_table", "--lake", lake.path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: SQL error: Catalog Error")
    assert "no_such_table" in proc.stderr


def test_sql_empty_query(run_cli: RunCli, lake: Ingested) -> None:
    assert _one_error_line(run_cli("sql", "", "--lake", lake.path)) == "error: empty query"


@pytest.mark.parametrize("command", [("status",), ("sql", "SELECT 1")])
def test_missing_lake_says_to_run_ingest(
    run_cli: RunCli, tmp_path: Path, command: tuple[str, ...]
) -> None:
    missing = tmp_path / "nowhere"
    line = _one_error_line(run_cli(*command, "--lake", missing))
    assert "lakecurate ingest" in line
    assert str(missing) in line
    assert not missing.exists()  # reading never creates a lake


def test_debug_shows_the_traceback(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("--debug", "status", "--lake", tmp_path / "nowhere")
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr
    assert "LakeError" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: no lake at")
    env = run_cli("status", "--lake", tmp_path / "nowhere", env={"LAKECURATE_DEBUG": "1"})
    assert "Traceback (most recent call last)" in env.stderr


def test_version(run_cli: RunCli) -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout == f"lakecurate, version {__version__}\n"


def test_unknown_format_is_a_usage_error() -> None:
    res = CliRunner().invoke(main, ["status", "--format", "xml"], prog_name="lakecurate")
    assert res.exit_code == 1  # like every error (tests/cli/test_error_shapes.py)
    assert res.output.startswith("error: invalid value for '--format'")


# --- help and the CLI reference ---------------------------------------------------------------

COMMANDS = sorted(main.commands)


def test_there_are_commands() -> None:
    assert {"ingest", "status", "sql", "retry"} <= set(COMMANDS)


def test_top_level_help_lists_every_command(run_cli: RunCli) -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    # click names the program as it was started: "python -m lakecurate" here.
    assert proc.stdout.startswith("Usage: python -m lakecurate [OPTIONS] COMMAND")
    listed = proc.stdout.split("Commands:", 1)[1]
    for name in COMMANDS:
        assert re.search(rf"^\s+{name}\s+\S", listed, re.MULTILINE), name


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name: str) -> None:
    cmd = main.commands[name]
    assert cmd.help and cmd.help.strip(), f"{name} has no help text"
    for param in cmd.params:
        if isinstance(param, click.Option):
            assert param.help and param.help.strip(), f"{name} {param.opts} has no help"
    res = CliRunner().invoke(main, [name, "--help"], prog_name="lakecurate")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"Usage: lakecurate {name} ")
    # The first line of the docstring, however click wrapped it.
    assert " ".join(cmd.help.strip().splitlines()[0].split()) in " ".join(res.output.split())


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_cli_reference", ROOT / "docs" / "gen_cli_reference.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DOC = ROOT / "docs" / "cli.md"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_is_in_the_cli_reference(name: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"\n## lakecurate {name}\n" in text
    assert f"Usage: lakecurate {name} " in text


def test_cli_reference_is_current() -> None:
    fresh = _generator().render()
    assert fresh == DOC.read_text(encoding="utf-8"), (
        "docs/cli.md is out of date: run python docs/gen_cli_reference.py"
    )


def test_cli_reference_does_not_depend_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    assert _generator().render() == DOC.read_text(encoding="utf-8")


def test_verify_index_stats_and_dedup_stats_commands(
    tmp_path: Path, near_lake: Path, run_cli: RunCli
) -> None:
    lake = Path(shutil.copytree(near_lake, tmp_path / "lake"))  # the corpus, near dedup on
    ok = run_cli("verify", "--lake", lake)
    assert ok.returncode == 0 and ok.stdout.startswith("ok:")
    stats = run_cli("index", "stats", "--lake", lake, "--format", "json")
    assert stats.returncode == 0, stats.stderr
    rows = [json.loads(line) for line in stats.stdout.splitlines()]
    assert {r["space"] for r in rows} == {"content", "ids"}
    assert all(r["file"] == "ok" and r["n"] >= r["tier2_rows"] > 0 for r in rows)
    dd = run_cli("dedup-stats", "--lake", lake, "--format", "json")
    assert dd.returncode == 0, dd.stderr
    sections = {json.loads(line)["section"] for line in dd.stdout.splitlines()}
    assert sections == {"cluster sizes", "largest clusters"}
    (lake / "state.duckdb").unlink()
    broken = run_cli("verify", "--lake", lake)
    assert broken.returncode == 2 and "verify --repair" in broken.stdout
    fixed = run_cli("verify", "--lake", lake, "--repair")
    assert fixed.returncode == 0 and "repaired:" in fixed.stdout


# --- read-only means no statement that writes, wrapped or not (D9) ---------------------------
def _sql_in(cwd: Path, lake: Path, statement: str) -> subprocess.CompletedProcess[str]:
    """`lakecurate sql` run from ``cwd`` (which has a ``.tmp`` folder: DuckDB's temp
    directory, the one place external access left writable)."""
    return run_lakecurate("sql", statement, "--lake", lake, timeout=120, cwd=cwd)


@pytest.mark.parametrize(
    "statement",
    [
        "EXPLAIN ANALYZE COPY (SELECT * FROM docs) TO '.tmp/x.csv'",
        "/* c */ explain analyze -- c\n copy (select 1 as x) to '.tmp/x.csv'",
        "EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 1 AS x) TO '.tmp/x.csv'",
        "EXPLAIN ANALYZE CREATE TEMP TABLE evil AS SELECT 1 AS x",
        "EXPLAIN ANALYZE INSERT INTO runs SELECT * FROM runs",
        "EXPLAIN CREATE TABLE evil AS SELECT 1 AS x",
        "EXPLAIN ANALYZE WITH d AS (DELETE FROM chunks RETURNING *) SELECT * FROM d",
        "PRAGMA enable_profiling",
        "CALL pragma_version()",
    ],
)
def test_wrapped_writes_are_refused(
    lake: Ingested, baseline: dict[str, object], tmp_path: Path, statement: str
) -> None:
    (tmp_path / ".tmp").mkdir()
    line = _one_error_line(_sql_in(tmp_path, lake.path, statement))
    assert "read-only" in line
    assert list((tmp_path / ".tmp").iterdir()) == []
    assert _snapshot(lake.path) == baseline


@pytest.mark.parametrize(
    "statement",
    [
        "EXPLAIN SELECT count(*) FROM docs",
        "EXPLAIN ANALYZE SELECT count(*) FROM docs",
        "EXPLAIN (SELECT 1)",
        "EXPLAIN (FORMAT json) SELECT 1",
        "SHOW TABLES",
        "DESCRIBE docs",
        "PRAGMA show_tables",
        "PRAGMA table_info('chunks')",
        "WITH k AS (SELECT * FROM docs) SELECT count(*) FROM k",
        "SELECT count(*) FROM content_hashes",  # a large state table, copied when named
    ],
)
def test_reads_are_still_allowed(lake: Ingested, tmp_path: Path, statement: str) -> None:
    proc = _sql_in(tmp_path, lake.path, statement)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
