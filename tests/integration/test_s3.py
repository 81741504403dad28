"""Lakes on S3-compatible object storage (issue 15), against a real S3 server on loopback
(moto's, started by the tests: tests/s3server.py): the same lake as on local disk, every
command on it, and a lake taken over from object storage alone."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from helpers import assert_lake_consistent, lake_rows
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


def test_the_state_is_recovered_from_the_lake(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    s3: S3Server,
    tmp_path: Path,
) -> None:
    """Another machine (another state folder) takes over the lake from object storage: the
    state is re-derived from the Delta log, and a re-run commits nothing twice."""
    uri = f"s3://{s3.bucket()}/lake"
    first = tmp_path / "machine-a"
    assert Lake.open(uri, state_dir=first).ingest([corpus], config=small_cfg, workers=2).ok
    shutil.rmtree(first)
    lake = Lake.open(uri, state_dir=tmp_path / "machine-b")  # derives the state
    assert lake.sql("SELECT command, outcome, message FROM runs").rows == [
        ("take-over", "OK", f"state derived from the Delta log of {uri}")
    ]
    report = lake.ingest([corpus], workers=2)  # the config came back from the log too
    assert report.ok and report.chunks_committed == 0
    assert_lake_consistent(uri, small_reference)  # the default state folder: machine c
    assert lake.sql("SELECT count(*) FROM chunks WHERE status = 'SUCCESS'").rows == [
        (len({r[0] for r in small_reference}),)
    ]


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
