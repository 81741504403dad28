"""One writer per object-store lake across machines: a lease object in the bucket.

The lake lock (``lake.lock``) is a ``flock`` in the local state folder: it keeps two writers on
one machine apart, not two drivers on two machines writing the same ``s3://`` lake, whose
commits delta-rs would not refuse (an app-transaction version is checked by us, against a state
each driver keeps apart). So a writer of an object-store lake also holds ``LAKE/_state/LEASE``:

- taken with a conditional put (``If-None-Match: *``): of two machines only one gets it;
- renewed every third of its time to live by a conditional overwrite (``If-Match`` its own
  ETag), by a thread, while the command runs; a renewal that fails means another machine took
  the lease over, and every Delta commit checks first (``check``): that writer stops before it
  commits anything more;
- given back at the end (a conditional delete);
- taken over, with a conditional overwrite of the ETag read, when its holder is this machine's
  own state folder (the local lock just proved that holder dead) or when it was not renewed for
  its time to live (by the server's clock: the object's age against the response's date).

S3 (and S3-compatible servers) answer 412 to a failed condition; moto's check is not atomic,
so the tests prove the protocol's logic, not the server's atomicity (design section 13).
"""

from __future__ import annotations

import email.utils
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lakecurate.errors import LockedError, UsageError
from lakecurate.lake.storage import Location, s3_settings

LEASE_NAME = "_state/LEASE"
TTL_ENV = "LAKECURATE_LEASE_SECONDS"
DEFAULT_TTL = 120.0


def _client() -> Any:
    """A boto3 S3 client from the AWS environment (only boto3 does conditional writes here:
    Arrow's filesystem and delta-rs do not expose them)."""
    try:
        import boto3  # type: ignore[import-untyped]
    except ImportError as exc:
        raise UsageError(
            "a lake on S3 needs boto3 for its writer lease: pip install 'lakecurate[s3]'"
        ) from exc
    opts = s3_settings()
    return boto3.client(
        "s3",
        endpoint_url=opts.get("AWS_ENDPOINT_URL"),
        region_name=opts.get("AWS_REGION"),
        aws_access_key_id=opts.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=opts.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=opts.get("AWS_SESSION_TOKEN"),
    )


def _refused(exc: Exception) -> bool:
    """A failed condition (412), or a write that raced another (409)."""
    status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status in (409, 412)


@dataclass
class Lease:
    """The lease of one command; ``with Lease.acquire(...)``. ``check`` raises once it is lost."""

    bucket: str
    key: str
    holder: dict[str, Any]
    etag: str
    ttl: float
    client: Any
    lost: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def acquire(cls, lake: Location, command: str, state_dir: str) -> Lease:
        bucket, _, prefix = lake.fs_path.partition("/")
        key = f"{prefix}/{LEASE_NAME}" if prefix else LEASE_NAME
        ttl = float(os.environ.get(TTL_ENV) or DEFAULT_TTL)
        holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": command,
            "state_dir": state_dir,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        client = _client()
        body = json.dumps(holder).encode()
        try:
            etag = client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")["ETag"]
        except Exception as exc:
            if not _refused(exc):
                raise
            etag = _take_over(client, bucket, key, body, holder, ttl, str(lake))
        lease = cls(bucket, key, holder, etag, ttl, client)
        lease._thread = threading.Thread(target=lease._renew_loop, daemon=True)
        lease._thread.start()
        return lease

    def check(self) -> None:
        """Raise if another machine took the lease over: nothing more may be committed."""
        if self.lost:
            raise LockedError(self.lost)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                body = json.dumps(self.holder).encode()
                self.etag = self.client.put_object(
                    Bucket=self.bucket, Key=self.key, Body=body, IfMatch=self.etag
                )["ETag"]
            except Exception as exc:
                if _refused(exc):
                    self.lost = (
                        f"this writer's lease on the lake was taken over by another machine "
                        f"(it was not renewed within {self.ttl:.0f} s); nothing more was "
                        "committed: run the command again once the other writer is done"
                    )
                    return
                # a network error: try again at the next renewal; the lease outlives it by 2/3

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost is None:
            try:
                self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
            except Exception as exc:
                if not _refused(exc):
                    raise

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _take_over(
    client: Any, bucket: str, key: str, body: bytes, holder: dict[str, Any], ttl: float, lake: str
) -> str:
    """Overwrite a lease whose holder is gone (see the module docstring), or say who holds it."""
    got = client.get_object(Bucket=bucket, Key=key)
    previous = json.loads(got["Body"].read() or b"{}")
    now = email.utils.parsedate_to_datetime(got["ResponseMetadata"]["HTTPHeaders"]["date"])
    age = (now - got["LastModified"]).total_seconds()
    mine = (
        previous.get("host") == holder["host"] and previous.get("state_dir") == holder["state_dir"]
    )
    if not mine and age < ttl:
        raise LockedError(
            f"{lake} is being written by `{previous.get('command')}` on "
            f"{previous.get('host')} (pid {previous.get('pid')}, since {previous.get('since')}, "
            f"renewed {age:.0f} s ago): wait for it to finish; if that machine is gone, its "
            f"lease expires {ttl - age:.0f} s from now"
        )
    try:
        return str(
            client.put_object(Bucket=bucket, Key=key, Body=body, IfMatch=got["ETag"])["ETag"]
        )
    except Exception as exc:
        if _refused(exc):
            raise LockedError(f"{lake}: another writer took the lake's lease just now") from exc
        raise
