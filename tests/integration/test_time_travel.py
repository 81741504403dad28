"""Time travel on a lake built by several ingests: every old version returns exactly the rows it
had, `--as-of` finds the version current at a time, `history` accounts for every commit, `diff`
counts add up, `explain` traces a document, and a version that does not exist names the range.

The lake: the corpus's books + forum, then web_a, then web_a grown by three lines (its last
chunk is superseded) plus web_b, so there are appends from three runs and a supersede.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakecurate import Lake
from lakecurate.errors import LakeError

ROWS = (
    "SELECT chunk_key, source_line, id, content_hash, kept, reason, dup_of FROM documents "
    "ORDER BY chunk_key, source_line"
)


@dataclass
class Built:
    lake: Lake
    # the latest version after each ingest, and what the table held then
    snapshots: list[tuple[int, list[tuple[object, ...]]]]


def build_versioned_lake(root: Path, corpus: Path, first_part: tuple[Path, Path]) -> Built:
    """Three ingests: appends (the first: the session's ``first_part``, books + forum, its lake
    copied), a changed file (supersede), a new file."""
    part1, part2 = first_part[0], root / "part2"
    part2.mkdir(parents=True)
    shutil.copy(corpus / "web_a.jsonl", part2 / "web_a.jsonl")
    lake = Lake.open(shutil.copytree(first_part[1], root / "lake"))
    snapshots = []

    def ingest(*inputs: Path) -> None:
        report = lake.ingest(list(inputs))
        assert report.ok, report.dead
        snapshot()

    def snapshot() -> None:
        version = lake.history().rows[-1][0]
        snapshots.append((version, lake.sql(ROWS).rows))

    snapshot()  # the first ingest's
    ingest(part1, part2)
    with open(part2 / "web_a.jsonl", "rb") as f:  # the file has invalid UTF-8 on purpose
        first = json.loads(f.readline())
    grown = [
        json.dumps({"id": "late-1", "text": "A document that arrived late."}) + "\n",
        json.dumps({"id": "late-2", "text": first["text"]}) + "\n",  # exact dup of web_a-0
        json.dumps({"id": "late-3", "text": "Another late arrival, all new."}) + "\n",
    ]
    with open(part2 / "web_a.jsonl", "ab") as f:
        f.writelines(g.encode("utf-8") for g in grown)
    shutil.copy(corpus / "web_b.jsonl.gz", part2 / "web_b.jsonl.gz")
    ingest(part1, part2)
    return Built(lake, snapshots)


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory, corpus: Path, first_part: tuple[Path, Path]
) -> Built:
    return build_versioned_lake(tmp_path_factory.mktemp("time_travel"), corpus, first_part)


def _count(lake: Lake, version: int, view: str = "documents") -> int:
    return int(lake.at(version=version).sql(f"SELECT count(*) FROM {view}").rows[0][0])


def test_each_old_version_returns_exactly_the_rows_it_had(built: Built) -> None:
    lake = built.lake
    versions = [v for v, _ in built.snapshots]
    assert versions == sorted(versions) and len(set(versions)) == 3
    for version, rows in built.snapshots:
        assert lake.at(version=version).sql(ROWS).rows == rows
        assert lake.sql(ROWS, version=version).rows == rows
    # the views are bound too: docs and rejects of an old version partition its documents
    v0 = versions[0]
    assert _count(lake, v0, "docs") + _count(lake, v0, "rejects") == _count(lake, v0)
    assert _count(lake, v0, "docs") == sum(1 for r in built.snapshots[0][1] if r[4])


def test_every_version_is_the_sum_of_the_commits_before_it(built: Built) -> None:
    lake = built.lake
    history = lake.history().dicts()
    assert [h["version"] for h in history] == list(range(len(history)))
    total = 0
    for h in history:
        total += h["rows_added"] - h["rows_removed"]
        assert _count(lake, h["version"]) == total, h


def test_history_names_chunks_runs_and_config(built: Built) -> None:
    lake = built.lake
    history = lake.history().dicts()
    ops = Counter(h["operation"] for h in history)
    assert ops["SUPERSEDE"] == 1 and ops["APPEND"] == len(history) - 1
    config_hash = lake.config().hash
    assert {h["config_hash"] for h in history} == {config_hash}
    assert len({h["run_id"] for h in history}) == 3
    # every chunk commit agrees with the state: the commit of the chunk's Delta version names
    # it, and carries its seq (a group commit's seq is the last of its chunks' seqs)
    chunks = lake.sql(
        "SELECT chunk_key, commit_seq, delta_version FROM chunks WHERE status = 'SUCCESS'"
    ).rows
    by_version = {h["version"]: h for h in history if h["operation"] == "APPEND"}
    for key, seq, version in chunks:
        assert key in by_version[version]["chunk_keys"]
        group = by_version[version]["chunk_keys"]
        assert by_version[version]["seq"] == seq + len(group) - 1 - group.index(key)
    (superseded,) = [h for h in history if h["operation"] == "SUPERSEDE"]
    assert superseded["rows_removed"] > 0
    assert lake.sql(
        "SELECT status FROM chunks WHERE chunk_key = $k", params={"k": superseded["chunk_keys"][0]}
    ).rows == [("SUPERSEDED",)]
    assert [h["version"] for h in lake.history(limit=2).dicts()] == [
        h["version"] for h in history[-2:]
    ]


def test_diff_counts_add_up_to_the_change_of_count(built: Built) -> None:
    lake = built.lake
    latest = built.snapshots[-1][0]
    supersede = next(h["version"] for h in lake.history().dicts() if h["operation"] == "SUPERSEDE")
    pairs = [
        (built.snapshots[0][0], latest),
        (built.snapshots[1][0], latest),
        (supersede - 1, supersede),
        (latest, built.snapshots[0][0]),
    ]
    for a, b in pairs:
        summary = {r["change"]: r for r in lake.diff(a, b).dicts()}
        assert set(summary) == {"added", "removed", "changed"}
        assert summary["added"]["rows"] - summary["removed"]["rows"] == _count(lake, b) - _count(
            lake, a
        ), (a, b)
        kept_change = sum(r["kept_b"] - r["kept_a"] for r in summary.values())
        assert kept_change == _count(lake, b, "docs") - _count(lake, a, "docs"), (a, b)
        listed = Counter(r[0] for r in lake.diff(a, b, rows=True).rows)
        assert listed == Counter({k: r["rows"] for k, r in summary.items() if r["rows"]})
    # the supersede removed exactly the rows of the one chunk it names
    summary = {r["change"]: r for r in lake.diff(supersede - 1, supersede).dicts()}
    assert summary["added"]["rows"] == 0 and summary["removed"]["chunks"] == 1
    # backwards is the mirror image
    forward = {r["change"]: r["rows"] for r in lake.diff(pairs[0][0], latest).dicts()}
    back = {r["change"]: r["rows"] for r in lake.diff(latest, pairs[0][0]).dicts()}
    assert (forward["added"], forward["removed"]) == (back["removed"], back["added"])


def test_as_of_finds_the_version_current_at_a_time(built: Built) -> None:
    lake = built.lake
    history = lake.history().dicts()
    for h in history:
        stamp = h["timestamp"]
        assert lake.at(as_of=stamp).version == h["version"]
        # naive text is UTC; a time between two commits reads the earlier one
        text = stamp.strftime("%Y-%m-%d %H:%M:%S.%f")
        assert lake.at(as_of=text).version == h["version"]
    first = history[0]["timestamp"]
    with pytest.raises(
        LakeError,
        match=r"no version of the lake existed at .*: the lake has "
        r"versions 0 \(.* UTC\) to \d+",
    ):
        lake.at(as_of="2001-01-01 00:00")
    assert lake.at(as_of="2999-01-01").version == history[-1]["version"]
    assert (
        lake.sql("SELECT count(*) FROM documents", as_of=first.isoformat()).rows[0][0]
        == history[0]["rows_added"]
    )
    with pytest.raises(LakeError, match="is not a time"):
        lake.at(as_of="last tuesday")


def test_a_version_that_does_not_exist_names_the_range(built: Built, run_cli) -> None:  # type: ignore[no-untyped-def]
    lake = built.lake
    latest = built.snapshots[-1][0]
    with pytest.raises(
        LakeError,
        match=rf"version {latest + 1} does not exist: the lake has "
        rf"versions 0 \(.*\) to {latest} \(",
    ):
        lake.at(version=latest + 1)
    with pytest.raises(LakeError, match="does not exist"):
        lake.diff(0, latest + 5)
    proc = run_cli("sql", "--lake", lake.root, "--version", str(latest + 1), "SELECT 1")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and f"to {latest} (" in proc.stderr
    proc = run_cli(
        "sql",
        "--lake",
        lake.root,
        "--version",
        "0",
        "--format",
        "json",
        "SELECT count(*) AS n FROM docs",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"n": _count(lake, 0, "docs")}


def test_explain_traces_a_document_to_its_source(built: Built) -> None:
    lake = built.lake
    lake.explain("late-2")  # warm: the first read of a process imports pyarrow's pieces
    started = time.perf_counter()
    ex = lake.explain("late-2")
    elapsed = time.perf_counter() - started
    print(f"explain late-2: {elapsed * 1000:.0f} ms")
    assert elapsed < 2.0
    (row,) = ex.occurrences.dicts()
    assert (row["kept"], row["reason"], row["dup_of"]) == (False, "exact_dup", "web_a-0")
    assert row["source_path"].endswith("web_a.jsonl")
    assert row["chunk_status"] == "SUCCESS" and row["run_command"] == "ingest"
    assert row["config_hash"] == lake.config().hash
    history = {h["version"]: h for h in lake.history().dicts()}
    group = history[row["committed_in_version"]]["chunk_keys"]  # the commit names its chunks
    assert row["chunk_key"] in group
    assert history[row["committed_in_version"]]["seq"] == row["commit_seq"] + len(group) - 1 - (
        group.index(row["chunk_key"])
    )
    line = lake.sql("SELECT source_line FROM documents WHERE id = 'late-2'").rows[0][0]
    assert row["source_line"] == line
    assert [r[:3] for r in ex.related.rows] == [("original", "web_a-0", True)]
    original = lake.explain("web_a-0")
    assert ("duplicate", "late-2") in [r[:2] for r in original.related.rows]
    # in a version from before it arrived, it does not exist
    with pytest.raises(LakeError, match="no document with id 'late-2' in version"):
        lake.at(version=built.snapshots[1][0]).explain("late-2")
