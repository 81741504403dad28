"""Maintenance keeps the lake's bookkeeping true: `compact` changes no document, no watermark and
no old version, and a later ingest (with a supersede) gives the same table as without it;
`vacuum` is a dry run by default, refuses a retention below Delta's unless forced, and then old
versions give a clear error naming the ones still readable; `checkpoint` writes one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import SMALL_CONFIG, lake_rows

from lakecurate import Lake
from lakecurate.errors import LakeError
from lakecurate.lake.delta import DeltaStore
from lakecurate.store import key_files

ROWS = "SELECT chunk_key, source_line, id, content_hash, kept, reason FROM documents ORDER BY ALL"
KEYS = (
    "SELECT 'content', hash, doc_id, seq FROM content_hashes "
    "UNION ALL SELECT 'ids', hash, NULL, seq FROM doc_ids ORDER BY ALL"
)


def _key_files(lake: Lake) -> list[str]:
    return sorted(p.name for p in (lake.root / "index" / "keys").iterdir())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """A lake of two ingests (many small files: one per chunk and partition, and key files
    of the index: a decision per chunk, ``commit_seconds = 0``, as small chunks finishing
    apart would make)."""
    root = tmp_path_factory.mktemp("maintenance")
    data = root / "data"
    data.mkdir()
    for name in ("books.parquet", "forum.jsonl.zst"):
        shutil.copy(corpus / name, data / name)
    config = SMALL_CONFIG.replace("[ingest]\n", "[ingest]\ncommit_seconds = 0\n")
    (root / "lakecurate.toml").write_text(config, encoding="utf-8")
    lake = Lake.open(root / "lake")
    assert lake.ingest([data], config=root / "lakecurate.toml").ok
    shutil.copy(corpus / "web_a.jsonl", data / "web_a.jsonl")
    assert lake.ingest([data]).ok
    return root


def _copy(built: Path, tmp_path: Path) -> tuple[Lake, Path]:
    shutil.copytree(built / "lake", tmp_path / "lake")
    return Lake.open(tmp_path / "lake"), built / "data"


def _grow(data: Path) -> None:
    """Change web_a: its last chunk is superseded by the next ingest."""
    with open(data / "web_a.jsonl", "ab") as f:
        f.write(json.dumps({"id": "grown-1", "text": "A line added later."}).encode() + b"\n")


def test_compact_changes_no_document_watermark_or_old_version(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index's key files too: merged in runs of a few keys (so that several files come
    out), the same keys, and the later ingest decides as the twin's never merged ones."""
    lake, data = _copy(built, tmp_path / "a")
    twin, _ = _copy(built, tmp_path / "b")
    versions = [h["version"] for h in lake.history().dicts()]
    before = {v: lake.at(version=v).sql(ROWS).rows for v in versions}
    store = DeltaStore(lake.root / "documents")
    watermark, files = store.watermark(), len(store.referenced_files())
    chunk_versions = lake.sql(
        "SELECT chunk_key, commit_seq, delta_version FROM chunks ORDER BY ALL"
    ).rows

    keys, named = lake.sql(KEYS).rows, _key_files(lake)
    monkeypatch.setattr(key_files, "KEY_FILE_ROWS", len(keys) // 3)
    report = lake.compact()
    assert report.files_before == files and report.files_after < files
    assert report.key_files_before == len(named) > report.key_files_after > 2
    assert len(_key_files(lake)) == report.key_files_after  # the merged ones swept
    assert lake.sql(KEYS).rows == keys
    assert report.version_after == versions[-1] + 1 and report.watermark == watermark
    store = DeltaStore(lake.root / "documents")
    assert store.watermark() == watermark
    assert lake.sql(ROWS).rows == before[versions[-1]]
    for v, rows in before.items():  # every old version still reads what it had
        assert lake.at(version=v).sql(ROWS).rows == rows
    assert (
        lake.sql("SELECT chunk_key, commit_seq, delta_version FROM chunks ORDER BY ALL").rows
        == chunk_versions
    )
    last = lake.history().dicts()[-1]
    assert (last["operation"], last["seq"], last["rows_added"], last["rows_removed"]) == (
        "COMPACT",
        None,
        0,
        0,
    )
    assert last["command"] == "compact"

    # a later ingest with a changed file: same table as the twin that was never compacted
    _grow(data)
    report_a, report_b = lake.ingest([data]), twin.ingest([data])
    assert report_a.ok and report_b.ok and report_a.rows_superseded > 0
    assert lake_rows(lake.root) == lake_rows(twin.root)


def test_a_kill_while_key_files_are_merged_leaves_the_index_as_it_was(
    built: Path, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    """Killed with the merged file written but not registered: the index still reads the old
    files; the next compact merges them (without the keys of the commit a changed input
    superseded, still in its file) and deletes the leftover."""
    lake, data = _copy(built, tmp_path)
    was = (data / "web_a.jsonl").read_bytes()
    try:  # the lake knows its inputs by path: the module's, changed for this ingest only
        _grow(data)
        assert lake.ingest([data]).rows_superseded > 0
    finally:
        (data / "web_a.jsonl").write_bytes(was)
    keys, named = lake.sql(KEYS).rows, _key_files(lake)
    killed = run_cli(
        "compact", "--lake", lake.root, env={"LAKECURATE_FAULT": "key_file_written:kill:content-"}
    )
    assert killed.returncode == -9, killed.stderr
    assert len(_key_files(lake)) == len(named) + 1  # the merged file, not registered
    assert lake.sql(KEYS).rows == keys
    done = run_cli("compact", "--lake", lake.root)
    assert done.returncode == 0, done.stderr
    assert f"key files {len(named)} -> 2" in done.stdout
    assert lake.sql(KEYS).rows == keys and len(_key_files(lake)) == 2
    assert lake.verify().ok


def test_vacuum_is_safe_by_default_and_old_versions_say_what_is_left(
    built: Path, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    lake, _ = _copy(built, tmp_path)
    lake.compact()
    latest_rows = lake.sql(ROWS).rows
    first_rows = lake.at(version=0).sql(ROWS).rows
    dry = lake.vacuum()  # a dry run with Delta's 7-day retention: files removed now are kept
    assert dry.dry_run and dry.files == [] and dry.retention_hours == 168
    with pytest.raises(LakeError, match="below the table's deleted-file retention of 168 h"):
        lake.vacuum(dry_run=False, retention_hours=0)
    planned = lake.vacuum(dry_run=True, retention_hours=0, force=True)
    assert planned.files and planned.bytes > 0
    assert lake.at(version=0).sql(ROWS).rows == first_rows  # a dry run deletes nothing

    done = lake.vacuum(dry_run=False, retention_hours=0, force=True)
    assert sorted(done.files) == sorted(planned.files)
    assert done.readable is not None
    earliest, latest = done.readable
    assert lake.sql(ROWS).rows == latest_rows
    assert lake.at(version=earliest).sql(ROWS).rows == latest_rows
    with pytest.raises(
        LakeError,
        match=rf"version 0 can no longer be read .*: the lake has "
        rf"versions {earliest} \(.*\) to {latest} \(",
    ):
        lake.at(version=0).sql("SELECT count(*) FROM documents")
    proc = run_cli("vacuum", "--lake", lake.root, "--retention-hours", "1")
    assert proc.returncode == 1 and "--force" in proc.stderr


def test_checkpoint_is_written_and_reads_the_same(built: Path, tmp_path: Path) -> None:
    lake, _ = _copy(built, tmp_path)
    rows = lake.sql(ROWS).rows
    version = lake.checkpoint()
    log = lake.root / "documents" / "_delta_log"
    assert (log / f"{version:020d}.checkpoint.parquet").exists()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == version
    assert lake.sql(ROWS).rows == rows
    assert lake.at(version=0).sql("SELECT count(*) FROM documents").rows[0][0] > 0


def test_a_reader_of_a_writers_snapshot_whose_key_files_were_merged_takes_the_state_again(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader copies a running writer's snapshot, which may name key files the writer has
    retired since (a compact merged them and swept the old ones): not damage. The reader
    takes the state again once the writer is gone, with the same keys; while the writer
    stays, it says to try again, never to repair."""
    import fcntl
    import threading

    from lakecurate.errors import BusyError
    from lakecurate.lake.paths import LakePaths
    from lakecurate.read import query

    lake, _ = _copy(built, tmp_path)
    paths = LakePaths(lake.root)
    keys, named = lake.sql(KEYS).rows, _key_files(lake)
    shutil.copy(paths.state, paths.snapshot)  # published before the compact: the old files
    assert lake.compact().key_files_after < len(named)
    assert not set(named) & set(_key_files(lake))  # every file the snapshot names is gone
    monkeypatch.setattr(query, "RETIRED_WAIT_SECONDS", 0.05)
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer holds the lake: readers read the snapshot
        with pytest.raises(BusyError, match="try again") as raised:
            lake.sql(KEYS)
        assert "repair" not in str(raised.value)
        threading.Timer(0.3, lambda: fcntl.flock(fd, fcntl.LOCK_UN)).start()
        assert lake.sql(KEYS).rows == keys  # the writer gone: the state, the merged file
    finally:
        os.close(fd)
