"""Where a lake's shared files live: a local folder or a prefix on S3-compatible storage.

A ``Location`` is one folder of that storage (the Delta table, the staging folder): every
file operation the lake makes outside DuckDB goes through it, so the same code serves a lake
on local disk and one at ``s3://bucket/prefix``. It is a small frozen value (a URI and the
storage options), so it travels to the workers with their orders.

On local disk a write is a temp file, fsync and rename (``lake.atomic``); on object storage a
single PUT is already whole or absent, so the file is written once under its final name.
Credentials, region and endpoint come from the usual AWS environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_SESSION_TOKEN``), read on the machine that does the I/O; delta-rs commits with
conditional puts (never an unsafe rename, design section 13).
"""

from __future__ import annotations

import functools
import io
import os
import posixpath
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

from lakecurate.errors import LakeError
from lakecurate.lake import atomic

if TYPE_CHECKING:
    import pyarrow.fs as pafs

# `s3://b/x` as a Path is `s3:/b/x`; a scheme has two letters or more (`C:/` is a drive).
URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+(.*)$", re.DOTALL)
SCHEMES = ("s3",)


def is_uri(text: str | os.PathLike[str]) -> bool:
    """Whether ``text`` names object storage (or another URL) rather than a local path."""
    return URI.match(os.fspath(text)) is not None


def check_uri(text: str) -> str:
    """``text`` as a normalised ``s3://bucket/prefix`` (no trailing slash), or one
    ``LakeError`` saying what is supported."""
    m = URI.match(text)
    assert m is not None
    scheme, rest = m.group(1).lower(), m.group(2).strip("/")
    if scheme == "file":
        raise LakeError(f"file:///{rest} is a URL: pass the folder as a path: /{rest}")
    if scheme not in SCHEMES:
        raise LakeError(
            f"{scheme}://{rest}: only local folders and s3:// (S3-compatible storage) are supported"
        )
    after = text.split(":", 1)[1]
    if not after.startswith("//") or after[2:3] in ("", "/"):
        raise LakeError(f"{text}: name a bucket, e.g. s3://my-bucket/lake")
    return f"s3://{rest}"


def s3_settings() -> dict[str, str]:
    """The storage options delta-rs gets: what the AWS environment variables say, plus
    plain HTTP allowed when the endpoint is an ``http://`` URL (a local S3 server)."""
    opts = {
        k: v
        for k in (
            "AWS_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
        )
        if (v := os.environ.get(k))
    }
    if "AWS_REGION" not in opts and (region := os.environ.get("AWS_DEFAULT_REGION")):
        opts["AWS_REGION"] = region
    if opts.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        opts["AWS_ALLOW_HTTP"] = "true"
    return opts


@functools.cache
def _s3(options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    """One Arrow S3 filesystem per set of options (per process)."""
    import pyarrow.fs as pafs

    opts = dict(options)
    endpoint = opts.get("AWS_ENDPOINT_URL", "")
    scheme, _, host = endpoint.partition("://") if "://" in endpoint else ("https", "", endpoint)
    return pafs.S3FileSystem(
        access_key=opts.get("AWS_ACCESS_KEY_ID"),
        secret_key=opts.get("AWS_SECRET_ACCESS_KEY"),
        session_token=opts.get("AWS_SESSION_TOKEN"),
        region=opts.get("AWS_REGION"),
        endpoint_override=host or None,
        scheme=scheme,
    )


@dataclass(frozen=True)
class Entry:
    """One file found by ``Location.files``: its path relative to the location."""

    rel: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Location:
    """One folder of a lake's storage: an absolute local path or ``s3://bucket/prefix``."""

    uri: str

    @classmethod
    def of(cls, where: Location | str | os.PathLike[str]) -> Location:
        """A local path (made absolute) or an object-store URI (checked); a ``Location`` as
        it is."""
        if isinstance(where, Location):
            return where
        text = os.fspath(where)
        if is_uri(text):
            return cls(check_uri(text))
        return cls(os.path.abspath(text))  # normalised: ".." and "//" collapsed

    def __truediv__(self, rel: str) -> Location:
        if self.is_local:
            return Location(str(Path(self.uri) / rel))
        return Location(posixpath.join(self.uri, rel))

    def __str__(self) -> str:
        return self.uri

    @property
    def is_local(self) -> bool:
        return not is_uri(self.uri)

    @property
    def local(self) -> Path:
        """The local folder (only for a local location)."""
        assert self.is_local, self.uri
        return Path(self.uri)

    @property
    def name(self) -> str:
        return posixpath.basename(self.uri)

    def delta_options(self) -> dict[str, str] | None:
        """``storage_options`` for delta-rs (None on local disk)."""
        return None if self.is_local else s3_settings()

    @property
    def fs(self) -> pafs.FileSystem:
        """The Arrow filesystem of this location's storage."""
        if self.is_local:
            import pyarrow.fs as pafs

            return pafs.LocalFileSystem()
        return _s3(tuple(sorted(s3_settings().items())))

    @property
    def fs_path(self) -> str:
        """This location's path inside ``fs`` (``bucket/prefix`` on S3)."""
        return self.uri if self.is_local else self.uri.removeprefix("s3://")

    # -- file operations -------------------------------------------------------------------

    def makedirs(self) -> None:
        """Create the folder (object storage has no folders: nothing to do there)."""
        if self.is_local:
            Path(self.uri).mkdir(parents=True, exist_ok=True)

    def exists(self) -> bool:
        if self.is_local:
            return Path(self.uri).exists()
        import pyarrow.fs as pafs

        return cast(bool, self.fs.get_file_info(self.fs_path).type != pafs.FileType.NotFound)

    def files(self, suffix: str = "", recursive: bool = True) -> list[Entry]:
        """The files below this location whose names end in ``suffix`` (none when absent)."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.fs_path, allow_not_found=True, recursive=recursive)
        base = self.fs_path.rstrip("/") + "/"
        return sorted(
            (
                Entry(i.path.removeprefix(base), i.size or 0, i.mtime_ns or 0)
                for i in self.fs.get_file_info(selector)
                if i.type == pafs.FileType.File and i.path.endswith(suffix)
            ),
            key=lambda e: e.rel,
        )

    def kind(self) -> str | None:
        """``file``, ``folder`` (on object storage: a prefix that has objects), or None."""
        import pyarrow.fs as pafs

        found = self.fs.get_file_info(self.fs_path).type
        return {pafs.FileType.File: "file", pafs.FileType.Directory: "folder"}.get(found)

    def stat(self) -> Entry | None:
        """Size and modification time of the file here, None when absent."""
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(self.fs_path)
        if info.type == pafs.FileType.NotFound:
            return None
        return Entry(self.name, info.size or 0, info.mtime_ns or time.time_ns())

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.fs_path) as f:
            return cast(bytes, f.read())

    def write_bytes(self, data: bytes) -> None:
        """Write the file here whole or not at all (a kill leaves the old one or none)."""
        if self.is_local:
            path = Path(self.uri)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(path, data)
            return
        with self.fs.open_output_stream(self.fs_path) as f:
            f.write(data)

    def open(self) -> BinaryIO:
        """A seekable, buffered binary reader of the file here (``readline`` included)."""
        if self.is_local:
            return open(self.uri, "rb")
        raw = self.fs.open_input_file(self.fs_path)
        return cast(BinaryIO, io.BufferedReader(raw, 1 << 20))

    def delete(self) -> bool:
        """Remove the file here; False when it was not there."""
        if self.is_local:
            try:
                Path(self.uri).unlink()
            except FileNotFoundError:
                return False
            return True
        try:
            self.fs.delete_file(self.fs_path)
        except FileNotFoundError:
            return False
        return True


def open_input(path: str) -> BinaryIO:
    """An input file given as a local path or an object-store URI, opened for reading."""
    return Location(path).open() if is_uri(path) else open(path, "rb")
