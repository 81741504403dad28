"""A real S3-compatible server on loopback for the object-storage tests: moto's server on
127.0.0.1, started by the tests themselves (design section 13).

It runs in a process of its own, not as a ``ThreadedMotoServer`` thread of the test process:
some delta-rs calls (``DeltaTable.history``) block on HTTP while holding the GIL, and a server
thread of the same interpreter can then never answer them (the test hung for delta-rs's 180 s
retry timeout).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class S3Server:
    """The server's endpoint and the environment a lakecurate process needs to reach it."""

    endpoint: str

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, **_credentials(self.env))

    def bucket(self) -> str:
        """A new empty bucket: one per test, so tests share the server, not their lakes."""
        name = f"lake-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _credentials(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_REGION"],
    }


@contextmanager
def running_s3() -> Iterator[S3Server]:
    """Start the server and check that it refuses a second conditional put of one key with
    412, as S3 does: delta-rs's commit protocol relies on that, and some moto versions
    answered 500."""
    pytest.importorskip(
        "moto.server", reason="the test extra installs moto: pip install -e '.[test]'"
    )
    from botocore.exceptions import ClientError

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(port, server)
        s3 = S3Server(f"http://127.0.0.1:{port}")
        client, bucket = s3.client(), s3.bucket()
        client.put_object(Bucket=bucket, Key="probe", Body=b"1", IfNoneMatch="*")
        try:
            client.put_object(Bucket=bucket, Key="probe", Body=b"2", IfNoneMatch="*")
        except ClientError as exc:
            status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
            assert status == 412, f"the S3 server refused a conditional put with {status}"
        else:
            raise AssertionError("the S3 server accepted a second conditional put of one key")
        yield s3
    finally:
        server.kill()
        server.wait()


def _wait_for(port: int, server: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the S3 server exited with {server.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"the S3 server did not listen on port {port} within {timeout} s")


def use(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point this process (and the worker processes it starts) at ``s3``."""
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    assert os.environ["AWS_ENDPOINT_URL"] == s3.endpoint
