"""A chunk's near-dedup sets file: what verification compares, by row, apart from everything else.

With near-dedup verification on, a worker writes beside its staged Parquet file a *sets file*
(``<chunk_key>.<config_hash>.sets.arrow``): an uncompressed Arrow IPC file with the columns
``row`` (the document's rank in its chunk's line order, ascending) and ``signature`` (its
shingle set, or its MinHash signature with ``verify_on = "signature"``), one row per document
that has one. Its bytes are most of a chunk's keys (about 0.4 of the text with shingle sets),
so the driver never reads it whole: it memory-maps it, reads the ``row`` column and the pages of
the chunk's candidates only, and, once the chunk joins the band index, the same bytes become
``index/signatures/<seq>.arrow`` (:func:`place`: a hard link on local disk, a copy otherwise), a
document's key there being ``seq << 32 | row``. Written whole or not at all, like every file of
a lake.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pyarrow as pa

from lakecurate.lake import atomic
from lakecurate.lake.storage import Location

SUFFIX = ".sets.arrow"
"""The sets file of a staged file ``<name>.parquet`` is ``<name>.sets.arrow``."""

SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),
        pa.field("signature", pa.list_(pa.uint32())),
    ]
)
_BLOCK = 1 << 20


def beside(staged: str) -> Location:
    """The sets file that goes with the staged file at ``staged`` (a ``Location`` URI)."""
    loc = Location(staged)
    return Location(loc.uri.removesuffix(".parquet") + SUFFIX)


def write(table: pa.Table, path: Location) -> str:
    """Write ``table`` (:data:`SCHEMA`, rows ascending) at ``path``, whole or not at all;
    returns the sha256 of the file, for the staged file to seal it with its own."""
    table = table.select(SCHEMA.names).cast(SCHEMA)
    if not path.is_local:
        sink = pa.BufferOutputStream()
        _write_ipc(table, sink)
        data = sink.getvalue()
        path.write_bytes(data.to_pybytes())
        return hashlib.sha256(memoryview(data)).hexdigest()
    path.local.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(path.local) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink:
            _write_ipc(table, sink)
        return digest(Location(str(tmp)))


def _write_ipc(table: pa.Table, sink: pa.NativeFile) -> None:
    with pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_table(table)


def digest(path: Location) -> str:
    """sha256 of the file at ``path`` (read in blocks: checked only when a staged chunk from an
    earlier run is reused)."""
    h = hashlib.sha256()
    with path.open() as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


class SetsFile:
    """One sets file, opened for reading: memory-mapped on local disk, so only the pages that
    are looked at are read; fetched whole from object storage (its bytes must come to the
    driver's disk anyway, to become the signature file of its commit)."""

    def __init__(self, path: Location) -> None:
        self.path = path
        self._data: pa.Buffer | None = None
        if path.is_local:
            self.table = pa.ipc.open_file(pa.memory_map(path.uri)).read_all()
        else:
            self._data = pa.py_buffer(path.read_bytes())
            self.table = pa.ipc.open_file(pa.BufferReader(self._data)).read_all()
        if self.table.schema.names != SCHEMA.names:
            raise ValueError(f"{path} is not a sets file (columns {self.table.schema.names})")

    def place(self, dest: Path) -> None:
        """Make ``dest`` hold this file's bytes, replacing what it held: a hard link to the
        same (immutable) file when both are on one local disk, else a copy; either way through
        a temp name, so a kill leaves the old file or the new one."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic.replacing(dest) as tmp:
            if self._data is not None:
                tmp.write_bytes(memoryview(self._data))
                return
            try:
                os.link(self.path.uri, tmp)
            except OSError:  # another file system, or one without hard links
                shutil.copyfile(self.path.uri, tmp)
