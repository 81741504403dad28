"""Lakes on S3-compatible object storage (issue 15), against a real S3 server on loopback
(moto's, started by the tests: tests/s3server.py): the same lake as on local disk, every
command on it, and a lake taken over from object storage alone."""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest
from helpers import (
    NEAR_CONFIG,
    assert_lake_consistent,
    kill_then_finish,
    lake_rows,
    near_decisions,
    run_lakecurate,
)
from s3server import S3Server

from lakecurate import Lake
from lakecurate.errors import LakeError


def test_an_s3_lake_equals_a_local_one(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    s3: S3Server,
) -> None:
    bucket = s3.bucket()
    uri = f"s3://{bucket}/lakes/one"
    report = Lake.open(uri).ingest([corpus], config=small_cfg, workers=2)
    assert report.ok and report.chunks_committed == len({r[0] for r in small_reference})
    assert_lake_consistent(uri, small_reference)
    keys = s3.keys(bucket)
    assert any(k.startswith("lakes/one/documents/_delta_log/") for k in keys)
    assert any(k.startswith("lakes/one/documents/kept=true/") for k in keys)
    # staged files are gone once committed (Arrow leaves an empty folder marker)
    assert [k for k in keys if "/staging/" in k] == ["lakes/one/staging/"]
    # A re-run changes nothing.
    again = Lake.open(uri).ingest([corpus], config=small_cfg, workers=2)
    assert again.ok and again.chunks_committed == 0
    assert lake_rows(uri) == small_reference


@pytest.mark.slow  # the default run keeps deciders on local disk (test_near_dedup.py)
def test_decider_processes_read_the_band_files_on_s3(
    corpus: Path, tmp_path: Path, s3: S3Server
) -> None:
    """``[ingest] deciders``: the decider processes read each chunk's bands file where the
    worker staged it, in the bucket, and decide as the driver does on local disk."""
    local, shared = tmp_path / "local.toml", tmp_path / "deciders.toml"
    local.write_text(NEAR_CONFIG)
    shared.write_text(NEAR_CONFIG.replace("[ingest]\n", "[ingest]\ndeciders = 2\n"))
    assert Lake.open(tmp_path / "lake").ingest([corpus], config=local, workers=2).ok
    uri = f"s3://{s3.bucket()}/lake"
    assert Lake.open(uri).ingest([corpus], config=shared, workers=2).ok
    assert near_decisions(uri) == near_decisions(tmp_path / "lake")


@pytest.mark.slow  # see docs/reliability.md: the S3 cases of the default run
def test_the_state_is_recovered_from_the_lake(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    s3: S3Server,
    tmp_path: Path,
) -> None:
    """Another machine (another state folder) takes over the lake from object storage alone:
    from the state copied to the lake (the stat cache too: nothing is read again), or, with
    no copy, re-derived from the Delta log. Either way a re-run commits nothing twice."""
    bucket = s3.bucket()
    uri = f"s3://{bucket}/lake"
    first = tmp_path / "machine-a"
    assert Lake.open(uri, state_dir=first).ingest([corpus], config=small_cfg, workers=2).ok
    assert "lake/_state/MANIFEST.json" in s3.keys(bucket)
    shutil.rmtree(first)

    lake = Lake.open(uri, state_dir=tmp_path / "machine-b")  # takes the copy
    (how,) = lake.sql("SELECT message FROM runs WHERE command = 'take-over'").rows[0]
    assert how.startswith(f"state copied from {uri}/_state")
    report = lake.ingest([corpus], workers=2)  # the config came along too
    assert report.ok and report.chunks_committed == 0 and report.files_read == 0

    for key in s3.keys(bucket, "lake/_state/"):
        s3.client().delete_object(Bucket=bucket, Key=key)
    lake = Lake.open(uri, state_dir=tmp_path / "machine-c")  # derives it from the log
    (how,) = lake.sql("SELECT message FROM runs WHERE command = 'take-over'").rows[0]
    assert how == f"state derived from the Delta log of {uri}"
    report = lake.ingest([corpus], workers=2)
    assert report.ok and report.chunks_committed == 0
    assert_lake_consistent(uri, small_reference)  # from yet another (the default) folder


@pytest.mark.parametrize(
    "point",
    [
        "after_delta_commit:kill:web_a_00002",  # the group is in the log, not in the state
        # a staged file being uploaded (the default run kills there on local disk: test_crash)
        pytest.param("staged_write:kill:web_a_00003", marks=pytest.mark.slow),
        pytest.param("before_delta_commit:kill:web_a_00001", marks=pytest.mark.slow),
    ],
)
def test_a_killed_driver_resumes_against_the_s3_lake(
    point: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    s3: S3Server,
    tmp_path: Path,
) -> None:
    """SIGKILL the whole ingest (driver and workers) while its lake is on S3, then run the same
    command again: nothing lost, nothing doubled, no commit in the log made twice."""
    uri = f"s3://{s3.bucket()}/lake"
    cfg = tmp_path / "groups.toml"
    cfg.write_text(small_cfg.read_text().replace("[ingest]\n", "[ingest]\ncommit_chunks = 3\n"))
    env = {**s3.env, "LAKECURATE_STATE_DIR": str(tmp_path / "state")}
    args = ("ingest", corpus, "--lake", uri, "--config", cfg, "--workers", "2")
    kill_then_finish(args, point, uri, small_reference, env)


def test_a_bad_uri_says_what_is_supported(tmp_path: Path) -> None:
    with pytest.raises(LakeError, match="only local folders and s3://"):
        Lake.open("gs://bucket/lake")
    with pytest.raises(LakeError, match="name a bucket"):
        Lake.open("s3:///lake")


def test_an_unreachable_store_says_what_to_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with pytest.raises(
        LakeError, match=r"cannot reach the lake s3://bucket/lake: .*AWS_ENDPOINT_URL"
    ):
        Lake.open("s3://bucket/lake", state_dir=tmp_path)


@pytest.mark.slow  # see docs/reliability.md: the S3 cases of the default run
def test_every_command_works_on_an_s3_lake(
    corpus: Path, small_cfg: Path, s3: S3Server, tmp_path: Path
) -> None:
    """status, sql with time travel, history, diff, explain, export, report, retry, restore,
    compact, checkpoint, vacuum and verify on a lake that lives on object storage."""
    uri = f"s3://{s3.bucket()}/lake"
    lake = Lake.open(uri)
    books = corpus / "web_a.jsonl"
    assert lake.ingest([books], config=small_cfg, workers=1).ok
    first = lake.sql("SELECT max(delta_version) FROM chunks").rows[0][0]
    assert lake.ingest([corpus], workers=2).ok
    latest = lake.sql("SELECT count(*) FROM documents").rows[0][0]
    assert lake.sql("SELECT count(*) FROM documents", version=first).rows[0][0] < latest

    status = lake.status()
    assert status.by_status.rows and status.storage.rows  # the data files' footers, on S3
    assert sum(r[1] for r in status.storage.rows) == latest
    history = lake.history()
    assert len(history.rows) >= 2
    assert lake.diff(first, first + 1).rows
    (doc_id,) = lake.sql("SELECT id FROM docs ORDER BY id LIMIT 1").rows[0]
    assert lake.explain(doc_id).occurrences.rows
    manifest = lake.export(None, tmp_path / "export")
    assert manifest.rows == lake.sql("SELECT count(*) FROM docs").rows[0][0]
    assert lake.report(tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert lake.retry() == []  # nothing DEAD

    compacted = lake.compact()
    assert compacted.files_after < compacted.files_before and compacted.rows == latest
    assert lake.checkpoint() == compacted.version_after
    dry = lake.vacuum(dry_run=True, retention_hours=0, force=True)
    assert dry.files and dry.bytes > 0  # the files compaction replaced
    done = lake.vacuum(dry_run=False, retention_hours=0, force=True)
    assert sorted(done.files) == sorted(dry.files)
    report = lake.verify(deep=True)
    assert report.problems == [] and report.files_checked > 0
    restored = lake.restore(compacted.version_after)
    assert lake.sql("SELECT count(*) FROM documents").rows[0][0] == latest
    assert restored > compacted.version_after


def _upload(s3: S3Server, bucket: str, folder: Path, prefix: str) -> None:
    client = s3.client()
    for path in sorted(folder.iterdir()):
        client.put_object(Bucket=bucket, Key=f"{prefix}/{path.name}", Body=path.read_bytes())


def _contents(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """``lake_rows`` without what names the input's path: the chunk key, and the id of a
    malformed line (``<path>:<line>``)."""
    return sorted(((r[1], *r[3:]) for r in rows), key=repr)


@pytest.mark.slow  # see docs/reliability.md: the S3 cases of the default run
def test_inputs_on_s3_are_read_and_mirrored(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    s3: S3Server,
    tmp_path: Path,
) -> None:
    """An s3:// prefix is read as a folder is: the same documents as the local corpus; hidden
    and unsupported objects are passed over and said; a replaced object re-does its chunks
    only, a deleted one leaves the lake; the end equals a clean run of the final inputs."""
    bucket = s3.bucket()
    _upload(s3, bucket, corpus, "corpus")
    client = s3.client()
    client.put_object(Bucket=bucket, Key="corpus/.hidden.jsonl", Body=b'{"text": "no"}\n')
    client.put_object(Bucket=bucket, Key="corpus/notes.txt", Body=b"not an input\n")
    inputs = [f"s3://{bucket}/corpus/"]
    lake = tmp_path / "lake"
    report = Lake.open(lake).ingest(inputs, config=small_cfg, workers=2)
    assert report.ok
    assert _contents(lake_rows(lake)) == _contents(small_reference)
    assert any(".hidden.jsonl" in line for line in report.skipped)
    assert any("notes.txt" in line for line in report.skipped)
    again = Lake.open(lake).ingest(inputs, workers=2)
    assert again.chunks_committed == 0 and again.files_read == 0  # the stat cache vouches

    web_a = (corpus / "web_a.jsonl").read_bytes().splitlines(keepends=True)
    client.put_object(Bucket=bucket, Key="corpus/web_a.jsonl", Body=b"".join(web_a[:-40]))
    client.delete_object(Bucket=bucket, Key="corpus/forum.jsonl.zst")
    changed = Lake.open(lake).ingest(inputs, workers=2)
    assert changed.ok and changed.files_read == 1
    clean = tmp_path / "clean"
    assert Lake.open(clean).ingest(inputs, config=small_cfg, workers=2).ok
    assert lake_rows(lake) == lake_rows(clean)


@pytest.mark.slow  # see docs/reliability.md: the S3 cases of the default run
def test_verify_repairs_an_s3_lake(corpus: Path, small_cfg: Path, s3: S3Server) -> None:
    """An orphan data file (a write no commit names) and a stale staged file left on the
    bucket are found by verify and removed by --repair; the documents stay."""
    bucket = s3.bucket()
    uri = f"s3://{bucket}/lake"
    lake = Lake.open(uri)
    assert lake.ingest([corpus / "web_a.jsonl"], config=small_cfg, workers=1).ok
    rows = lake_rows(uri)
    client = s3.client()
    (live,) = [k for k in s3.keys(bucket, "lake/documents/kept=true/")][:1]
    body = client.get_object(Bucket=bucket, Key=live)["Body"].read()
    client.put_object(Bucket=bucket, Key="lake/documents/kept=true/part-orphan.parquet", Body=body)
    (key,) = lake.sql("SELECT chunk_key FROM chunks ORDER BY chunk_key LIMIT 1").rows[0]
    stale = f"lake/staging/{key}.{lake.config().hash}.parquet"
    client.put_object(Bucket=bucket, Key=stale, Body=body)
    found = lake.verify()
    assert any("orphan data file" in p and "part-orphan" in p for p in found.problems)
    assert any("staged file of a committed chunk" in p for p in found.problems)
    repaired = lake.verify(repair=True)
    assert repaired.repaired
    assert lake.verify().problems == []
    keys = s3.keys(bucket)
    assert "lake/documents/kept=true/part-orphan.parquet" not in keys and stale not in keys
    assert lake_rows(uri) == rows


def _lease_key(s3: S3Server, bucket: str) -> bool:
    return "lake/_state/LEASE" in s3.keys(bucket, "lake/_state/")


def _lease_written(s3: S3Server, bucket: str) -> datetime.datetime:
    """When the lease object was last written (taken or renewed), by the server's clock."""
    head = s3.client().head_object(Bucket=bucket, Key="lake/_state/LEASE")
    return head["LastModified"]  # type: ignore[no-any-return]


@pytest.mark.slow  # the default run keeps the lease taken from a writer (the test below)
def test_two_machines_never_write_one_lake_at_once(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    s3: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A driver on another machine (another state folder) is refused while the lake's writer
    runs, and while the lease of a SIGKILLed writer has not expired; then it takes over and
    finishes the lake. The killed writer's own machine takes over at once."""
    from helpers import start_lakecurate

    from lakecurate.errors import LockedError

    ttl = 3.0  # the writer renews its lease every second
    monkeypatch.setenv("LAKECURATE_LEASE_SECONDS", str(ttl))
    bucket = s3.bucket()
    uri = f"s3://{bucket}/lake"
    env = {**s3.env, "LAKECURATE_LEASE_SECONDS": str(ttl), "LAKECURATE_FAULT": "worker:sleep"}
    args = ("ingest", corpus, "--lake", uri, "--config", small_cfg, "--workers", "1")
    writer = start_lakecurate(*args, env={**env, "LAKECURATE_STATE_DIR": str(tmp_path / "a")})
    deadline = time.monotonic() + 60
    while not _lease_key(s3, bucket) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _lease_key(s3, bucket), writer.communicate()
    with pytest.raises(LockedError, match=r"is being written by `ingest` on .* \(pid"):
        Lake.open(uri, state_dir=tmp_path / "b").ingest([corpus], config=small_cfg)
    # It renews its lease, then a power cut mid-run, just after a renewal: the lease is then
    # surely unexpired when the other machine tries below.
    taken = _lease_written(s3, bucket)
    while _lease_written(s3, bucket) == taken and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _lease_written(s3, bucket) > taken, "the writer never renewed its lease"
    os.killpg(writer.pid, signal.SIGKILL)
    writer.communicate()
    assert _lease_key(s3, bucket)  # left behind by the kill
    started = time.monotonic()
    with pytest.raises(LockedError, match="its lease expires"):
        Lake.open(uri, state_dir=tmp_path / "b").ingest([corpus], config=small_cfg)
    time.sleep(max(0.0, ttl + 0.5 - (time.monotonic() - started)))
    report = Lake.open(uri, state_dir=tmp_path / "b").ingest([corpus], config=small_cfg)
    assert report.ok
    assert not _lease_key(s3, bucket)  # given back
    assert_lake_consistent(uri, small_reference)

    # The killed writer's own machine: its local lock proves the lease's holder dead.
    again = start_lakecurate(*args, env={**env, "LAKECURATE_STATE_DIR": str(tmp_path / "a")})
    while not _lease_key(s3, bucket) and again.poll() is None:
        time.sleep(0.05)
    os.killpg(again.pid, signal.SIGKILL)
    again.communicate()
    done = run_lakecurate(*args, env={**s3.env, "LAKECURATE_STATE_DIR": str(tmp_path / "a")})
    assert done.returncode == 0, done.stderr
    assert lake_rows(uri) == small_reference


def test_a_writer_whose_lease_was_taken_commits_nothing_more(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from lakecurate.errors import LockedError
    from lakecurate.lake.lease import Lease
    from lakecurate.lake.storage import Location

    monkeypatch.setenv("LAKECURATE_LEASE_SECONDS", "0.3")
    lake = Location(f"s3://{s3.bucket()}/lake")
    with Lease.acquire(lake, "ingest", str(tmp_path)) as lease:
        lease.check()  # held
        lease.etag = '"not-the-current-etag"'  # as if another machine had overwritten it
        time.sleep(0.5)  # a renewal fails its condition
        with pytest.raises(LockedError, match="taken over by another machine"):
            lease.check()
