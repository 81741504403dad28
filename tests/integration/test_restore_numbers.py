"""After `restore` and `vacuum` every number agrees with the version the lake is at (issue 16,
item 8): a restored lake's `chunks`, `status` and `docs` equal those of a lake that only ever
had that version, and the Delta table itself; `sql --version`, `export --version` and
`restore` follow one readability rule after a real vacuum; restoring the current version is
one error line."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from deltalake import DeltaTable
from helpers import lake_rows

from lakecurate import Lake
from lakecurate.lake.delta import DeltaStore

Run = Callable[..., subprocess.CompletedProcess[str]]

# Every counter `status` and `sql` show of a chunk.
CHUNK_NUMBERS = (
    "SELECT chunk_key, status, rows_in, rows_kept, rows_dropped, rows_malformed, "
    "gate_violations, redactions, commit_seq IS NOT NULL AS committed FROM chunks"
)


def _write(path: Path, start: int, n: int, tag: str) -> None:
    """``n`` records, ids from ``start``; every 7th is a repeat and every 11th empty, so that
    dedup and the empty-text filter drop some and the counts are not trivial."""
    lines = []
    for i in range(start, start + n):
        text = "" if i % 11 == 0 else f"{tag} record {i % 50 if i % 7 == 0 else i} " * 8
        lines.append(json.dumps({"id": f"{tag}-{i}", "text": text}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _numbers(lake: Lake) -> dict[str, object]:
    """What `status` and `sql` say about the chunks, the funnel and the documents."""
    st = lake.status()
    success = [r for r in st.by_status.rows if r[0] == "SUCCESS"]
    return {
        "committed chunks": sorted(r for r in lake.sql(CHUNK_NUMBERS).rows if r[1] == "SUCCESS"),
        "status SUCCESS": success,
        "funnel": st.funnel.rows,
        "funnel rows": sorted(lake.sql("SELECT * FROM filter_stats").rows),
        "documents": lake_rows(lake.root),
    }


def test_restored_numbers_equal_a_lake_that_only_had_that_version(
    tmp_path: Path, config_file: Path
) -> None:
    data = tmp_path / "in"
    data.mkdir()
    _write(data / "a.jsonl", 0, 2500, "a")  # several 64 KiB chunks
    _write(data / "b.jsonl", 0, 300, "b")
    first = {p.name: p.read_bytes() for p in data.iterdir()}
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([data], config=config_file).ok
    v1 = lake.history().dicts()[-1]["version"]
    # change a (a different middle: some chunks superseded, new ones committed) and add c
    _write(data / "a.jsonl", 1000, 2500, "a")
    _write(data / "c.jsonl", 0, 400, "c")
    assert lake.ingest([data]).ok
    assert lake.sql("SELECT count(*) FROM chunks WHERE status = 'SUPERSEDED'").rows[0][0] > 0

    lake.restore(v1)

    # the twin: the same inputs at the same paths, ingested once
    (data / "c.jsonl").unlink()
    for name, raw in first.items():
        (data / name).write_bytes(raw)
    twin = Lake.open(tmp_path / "twin")
    assert twin.ingest([data], config=config_file).ok
    assert _numbers(lake) == _numbers(twin)

    # chunks the restored version lacks wait to be processed again, with no numbers
    pending = lake.sql(CHUNK_NUMBERS + " WHERE status = 'PENDING'").rows
    assert pending, "the second ingest's chunks are not in the restored version"
    assert all(r[2:] == (None,) * 6 + (False,) for r in pending), pending
    keys = [r[0] for r in pending]
    assert lake.sql(
        "SELECT count(*) FROM filter_stats WHERE chunk_key IN (SELECT unnest($k))",
        params={"k": keys},
    ).rows == [(0,)]
    by_status = {r[0]: r[1:] for r in lake.status().by_status.rows}
    assert by_status["PENDING"][2:] == (0, 0, 0, 0)  # rows in, kept, dropped, malformed

    # and the state agrees with the Delta table itself, chunk by chunk
    table = lake.sql(
        "SELECT chunk_key, count(*), count(*) FILTER (kept) FROM documents GROUP BY 1 ORDER BY 1"
    ).rows
    state = lake.sql(
        "SELECT chunk_key, rows_in, rows_kept FROM chunks WHERE status = 'SUCCESS' ORDER BY 1"
    ).rows
    assert table == state


def _history(lake: Path) -> tuple[int, ...]:
    return tuple(h["version"] for h in Lake.open(lake).history().dicts())


def test_sql_export_and_restore_follow_one_rule_after_a_vacuum(
    tmp_path: Path, config_file: Path, run_cli: Run
) -> None:
    """Versions 0 (a), 1 (a superseded: no files), 2 (a' appended), 3 (a' superseded), 4 (a''):
    after a vacuum with no retention the files of a and a' are gone, so 0 and 2 cannot be
    read while 1 and 3 can — not one range, and each command must say the same."""
    data = tmp_path / "in"
    data.mkdir()
    lake_path = tmp_path / "lake"
    lake = Lake.open(lake_path)  # the history made in-process; the commands checked are the CLI
    for round_ in range(3):
        _write(data / "a.jsonl", round_ * 1000, 200, "a")
        assert lake.ingest([data], config=config_file if round_ == 0 else None).ok
    ops = [h["operation"] for h in lake.history().dicts()]
    assert ops == ["APPEND", "SUPERSEDE", "APPEND", "SUPERSEDE", "APPEND"], ops
    lake.vacuum(dry_run=False, retention_hours=0, force=True)
    latest = _history(lake_path)[-1]

    for v in (0, 2):  # unreadable: the same line from all three commands, exit 1
        lines = []
        for cmd in (
            ["sql", "SELECT count(*) FROM docs", "--version", v],
            ["export", tmp_path / f"out{v}", "--version", v],
            ["restore", v],
        ):
            done = run_cli(*cmd, "--lake", lake_path)
            assert done.returncode == 1, (cmd, done.stdout, done.stderr)
            (line,) = done.stderr.splitlines()
            lines.append(line)
        assert len(set(lines)) == 1, lines
        assert lines[0].startswith(f"error: version {v} can no longer be read (")
        assert "removed by vacuum" in lines[0] and "the lake has versions 3 (" in lines[0]
    assert _history(lake_path)[-1] == latest  # no refused restore made a commit

    # readable: version 1 (before the gap) and 3 (the first of the newest run) read, export
    # and restore
    for v in (1, 3):
        done = run_cli("sql", "SELECT count(*) FROM documents", "--version", v, "--lake", lake_path)
        assert done.returncode == 0 and done.stdout.splitlines()[2].strip() == "0", done.stdout
        out = tmp_path / f"out{v}"
        done = run_cli("export", out, "--version", v, "--lake", lake_path)
        assert done.returncode == 0, done.stderr
        assert json.loads((out / "manifest.json").read_text())["version"] == v
    done = run_cli("restore", 1, "--lake", lake_path)
    assert done.returncode == 0, done.stderr
    assert Lake.open(lake_path).sql("SELECT count(*) FROM documents").rows == [(0,)]

    # the rule, from one pass over the log, is exactly "every file the version names (as
    # delta-rs lists them) is on disk" (the restore above added version latest + 1)
    rule = DeltaStore(lake_path / "documents").readability()
    for v in range(latest + 2):
        files = DeltaTable(str(lake_path / "documents"), version=v).file_uris()
        assert rule.readable(v) == all(os.path.exists(f) for f in files), v
    assert [v for v in range(latest + 2) if not rule.readable(v)] == [0, 2]
    assert DeltaStore(lake_path / "documents").readable_range() == (3, latest + 1)


def test_restoring_the_current_version_says_there_is_nothing_to_do(
    tmp_path: Path, config_file: Path, run_cli: Run
) -> None:
    data = tmp_path / "in"
    data.mkdir()
    _write(data / "a.jsonl", 0, 20, "a")
    lake_path = tmp_path / "lake"
    assert run_cli("ingest", data, "--lake", lake_path, "--config", config_file).returncode == 0
    done = run_cli("restore", 0, "--lake", lake_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "error: version 0 is already the current version; nothing to restore"
    ]
    assert _history(lake_path) == (0,)
