"""Ingest end to end on real files, a real DuckDB state file and a real Delta table."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from helpers import lake_rows

from lakecurate import Lake


def delta_versions(lake: Path) -> int:
    return len(list((lake / "documents" / "_delta_log").glob("*.json")))


@pytest.fixture(scope="module")
def reference(small_lake: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clean, uninterrupted ingest of the corpus with two workers (the session's
    ``small_lake``, copied)."""
    return Path(shutil.copytree(small_lake, tmp_path_factory.mktemp("ref") / "lake"))


def test_clean_ingest_accounts_for_every_record(reference: Path, corpus: Path) -> None:
    lake = Lake.open(reference)
    (n_chunks,) = lake.sql("SELECT count(*) FROM chunks WHERE status = 'SUCCESS'").rows[0]
    assert n_chunks >= 6  # web_a is cut into several chunks
    # every chunk: rows in = kept + dropped + malformed, and the table agrees with the state
    bad = lake.sql("""
        SELECT c.chunk_key FROM chunks c
        LEFT JOIN (SELECT chunk_key, count(*) n, count(*) FILTER (WHERE kept) k
                   FROM documents GROUP BY chunk_key) d USING (chunk_key)
        WHERE c.rows_in <> c.rows_kept + c.rows_dropped + c.rows_malformed
           OR c.rows_in <> coalesce(d.n, 0) OR c.rows_kept <> coalesce(d.k, 0)""").rows
    assert bad == []
    # no record counted twice: (chunk, line) is unique, and kept contents are unique lake-wide
    dup = lake.sql("SELECT count(*) - count(DISTINCT (chunk_key, source_line)) FROM documents")
    assert dup.rows[0][0] == 0
    (kept_dups,) = lake.sql("SELECT count(*) - count(DISTINCT content_hash) FROM docs").rows[0]
    assert kept_dups == 0
    # every input line that is not blank is in the table
    lines = 0
    for path in corpus.glob("*.jsonl"):
        lines += sum(1 for line in path.read_bytes().split(b"\n") if line.strip())
    for path in corpus.glob("*.jsonl.gz"):
        lines += sum(1 for line in gzip.decompress(path.read_bytes()).split(b"\n") if line.strip())
    (n_jsonl,) = lake.sql(
        "SELECT count(*) FROM documents WHERE source_path LIKE '%.jsonl' "
        "OR source_path LIKE '%.jsonl.gz'"
    ).rows[0]
    assert n_jsonl == lines


def test_every_bad_record_kind_is_a_reject_with_its_raw_bytes(
    reference: Path, corpus: Path
) -> None:
    lake = Lake.open(reference)
    rows = lake.sql(
        "SELECT reason, raw, source_path, source_line FROM rejects WHERE reason LIKE 'malformed:%'"
    ).rows
    reasons = {r[0] for r in rows}
    assert {
        "malformed:bad_json",
        "malformed:invalid_utf8",
        "malformed:missing_text",
        "malformed:text_not_string",
    } <= reasons
    web_a = (corpus / "web_a.jsonl").read_bytes().split(b"\n")
    for _reason, raw, source_path, line in rows:
        assert raw
        if source_path.endswith("web_a.jsonl"):
            assert web_a[line - 1].rstrip(b"\r") == raw
    empties = lake.sql("SELECT count(*) FROM rejects WHERE reason = 'filter:empty'").rows[0][0]
    assert empties > 0
    dups = lake.sql(
        "SELECT count(*) FROM rejects r JOIN docs d ON r.dup_of = d.id "
        "AND r.content_hash = d.content_hash WHERE r.reason = 'exact_dup'"
    ).rows[0][0]
    total_dups = lake.sql("SELECT count(*) FROM rejects WHERE reason = 'exact_dup'").rows[0][0]
    assert total_dups > 0 and dups == total_dups  # every duplicate points at the kept original


def test_rerun_on_unchanged_input_does_nothing(
    reference: Path, corpus: Path, tmp_path: Path
) -> None:
    lake_dir = tmp_path / "lake"
    shutil.copytree(reference, lake_dir)
    before = delta_versions(lake_dir)
    report = Lake.open(lake_dir).ingest([corpus])
    assert report.outcome == "NOTHING_TO_DO"
    assert report.chunks_todo == 0 and report.chunks_committed == 0
    assert report.files_read == 0  # the stat cache answered: no input byte re-read
    assert delta_versions(lake_dir) == before
    verified = Lake.open(lake_dir).ingest([corpus], verify=True)
    assert verified.files_read == verified.files > 0
    assert verified.chunks_todo == 0 and delta_versions(lake_dir) == before


def test_one_worker_gives_the_same_lake_as_two(
    reference: Path, corpus: Path, config_file: Path, tmp_path: Path
) -> None:
    lake_dir = tmp_path / "lake"
    assert Lake.open(lake_dir).ingest([corpus], config=config_file, workers=1).ok
    assert lake_rows(lake_dir) == lake_rows(reference)


def test_changed_input_reprocesses_only_its_chunks(
    corpus: Path, config_file: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    lake_dir = tmp_path / "lake"
    lake = Lake.open(lake_dir)
    assert lake.ingest([data], config=config_file).ok
    old_keys = {
        r[0]
        for r in lake.sql(
            "SELECT chunk_key FROM chunks WHERE source_path LIKE '%web_b.jsonl.gz'"
        ).rows
    }
    (total_before,) = lake.sql("SELECT count(*) FROM documents").rows[0]
    (old_rows,) = lake.sql(
        "SELECT count(*) FROM documents WHERE source_path LIKE '%web_b.jsonl.gz'"
    ).rows[0]
    # rewrite web_b: drop its first record, add a brand-new one
    lines = gzip.decompress((data / "web_b.jsonl.gz").read_bytes()).split(b"\n")
    lines = [line for line in lines[1:] if line]
    new_doc = {"id": "fresh-1", "text": "An entirely new document about lakes and ducks."}
    lines.append(json.dumps(new_doc).encode())
    (data / "web_b.jsonl.gz").write_bytes(gzip.compress(b"\n".join(lines) + b"\n", mtime=0))

    report = lake.ingest([data])
    assert report.ok
    (new_chunks,) = lake.sql(
        "SELECT count(*) FROM chunks WHERE source_path LIKE '%web_b.jsonl.gz' "
        "AND status = 'SUCCESS'"
    ).rows[0]
    assert report.chunks_todo == new_chunks > 0  # only web_b's chunks (every line moved up)
    assert report.files_read == 1  # the other files came from the stat cache
    assert report.rows_superseded == old_rows
    stale = lake.sql(
        "SELECT count(*) FROM documents WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]))",
        params={"keys": sorted(old_keys)},
    )
    assert stale.rows[0][0] == 0
    (total_after,) = lake.sql("SELECT count(*) FROM documents").rows[0]
    assert total_after == total_before - old_rows + len(lines)
    assert lake.sql("SELECT count(*) FROM docs WHERE id = 'fresh-1'").rows[0][0] == 1
    statuses = dict(lake.sql("SELECT status, count(*) FROM chunks GROUP BY status").rows)
    assert statuses["SUPERSEDED"] == len(old_keys)
    # and a third run has nothing left to do
    assert lake.ingest([data]).outcome == "NOTHING_TO_DO"


def test_failing_chunk_goes_dead_others_succeed_and_retry_requeues(
    corpus: Path, config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake_dir = tmp_path / "lake"
    lake = Lake.open(lake_dir)
    monkeypatch.setenv("LAKECURATE_FAULT", "worker:raise:web_a_00001")
    report = lake.ingest([corpus], config=config_file)
    assert not report.ok
    assert [k for k, _ in report.dead] and all("web_a_00001" in k for k, _ in report.dead)
    (key, status, attempts, error, tb) = lake.sql(
        "SELECT chunk_key, status, attempts, last_error, traceback FROM chunks "
        "WHERE chunk_key LIKE 'web_a_00001%'"
    ).rows[0]
    assert status == "DEAD" and attempts == 3
    assert "InjectedFaultError" in error and "Traceback" in tb and "faults.py" in tb
    others = lake.sql(
        "SELECT DISTINCT status FROM chunks WHERE chunk_key <> $k", params={"k": key}
    ).rows
    assert others == [("SUCCESS",)]
    events = lake.sql(
        "SELECT to_status, message FROM chunk_events WHERE chunk_key = $k ORDER BY event_id",
        params={"k": key},
    ).rows
    # small chunks go many to a task, and a chunk's own failure there is its own
    tries = [e[0] for e in events]
    assert tries == ["RUNNING", "FAILED", "RUNNING", "FAILED", "RUNNING", "DEAD"]

    monkeypatch.delenv("LAKECURATE_FAULT")
    assert lake.retry() == [key]
    assert lake.sql("SELECT status FROM chunks WHERE chunk_key = $k", params={"k": key}).rows == [
        ("PENDING",)
    ]
    again = lake.ingest([corpus])
    assert again.ok and again.chunks_committed == 1
    assert lake.sql("SELECT DISTINCT status FROM chunks").rows == [("SUCCESS",)]


def test_dead_chunk_makes_the_cli_exit_nonzero_and_name_it(
    corpus: Path, config_file: Path, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    lake_dir = tmp_path / "lake"
    proc = run_cli(
        "ingest",
        corpus,
        "--lake",
        lake_dir,
        "--config",
        config_file,
        env={"LAKECURATE_FAULT": "worker:raise:forum"},
    )
    assert proc.returncode == 2, proc.stderr
    assert "DEAD: forum_00000_" in proc.stdout and "lakecurate retry" in proc.stdout
    proc = run_cli("retry", "--lake", lake_dir)
    assert proc.returncode == 0 and "forum_00000_" in proc.stdout
    proc = run_cli("ingest", corpus, "--lake", lake_dir)
    assert proc.returncode == 0, proc.stderr


def test_overlapping_snapshot_ids_are_skipped_and_counted(
    tmp_path: Path, config_file: Path
) -> None:
    """The same document id arriving again (an overlapping crawl) is skipped, whatever its text."""

    def write(path: Path, docs: list[tuple[str, str]]) -> None:
        path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in docs))

    first, second = tmp_path / "in1", tmp_path / "in2"
    first.mkdir()
    second.mkdir()
    write(first / "snap1.jsonl", [("a", "alpha text"), ("b", "beta text"), ("c", "gamma text")])
    write(
        second / "snap2.jsonl",
        [
            ("b", "beta text"),
            ("c", "gamma, revised"),
            ("d", "delta text"),
            ("d", "delta again"),
            ("e", "alpha text"),
        ],
    )
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([first], config=config_file).ok
    assert lake.ingest([second]).ok
    rows = dict(
        ((i, line), (k, r, d))
        for i, line, k, r, d in lake.sql(
            "SELECT id, source_line, kept, reason, dup_of FROM documents "
            "WHERE source_path LIKE '%snap2.jsonl'"
        ).rows
    )
    assert rows[("b", 1)] == (False, "duplicate_id", "b")
    assert rows[("c", 2)] == (False, "duplicate_id", "c")
    assert rows[("d", 3)] == (True, None, None)
    assert rows[("d", 4)] == (False, "duplicate_id", "d")  # a repeat inside the chunk too
    assert rows[("e", 5)] == (False, "exact_dup", "a")  # new id, known content
    funnel = dict(
        (s, (i, d))
        for s, i, d in lake.sql(
            "SELECT step, docs_in, docs_dropped "
            "FROM filter_stats f JOIN chunks c USING (chunk_key) "
            "WHERE c.source_path LIKE '%snap2.jsonl'"
        ).rows
    )
    assert funnel["duplicate_id"] == (5, 3)
    assert funnel["exact_dup"] == (2, 1)
    (n_ids,) = lake.sql("SELECT count(*) FROM doc_ids").rows[0]
    # one row per (id, chunk): a b c from the first chunk, b c d e from the second; an id that
    # two chunks carry is indexed for both, so superseding one of them keeps it known
    assert n_ids == 3 + 4
