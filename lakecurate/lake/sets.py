"""A chunk's near-dedup sets and bands files: lists by row, apart from everything else.

With near-dedup verification on, a worker writes beside its staged Parquet file a *sets file*
(``<chunk_key>.<config_hash>.sets.arrow``): an uncompressed Arrow IPC file with the columns
``row`` (the document's rank in its chunk's line order, ascending) and ``signature`` (its
shingle set, or its MinHash signature with ``verify_on = "signature"``), one row per document
that has one. Its bytes are most of a chunk's keys (about 0.4 of the text with shingle sets),
so the driver never reads it whole: it reads the ``row`` column (memory-mapped) and the lists
of the chunk's candidates only (``pread``), and, once the chunk joins the band index, the same
bytes become ``index/signatures/<seq>.arrow`` (:meth:`SetsFile.place`: a hard link on local
disk, a copy otherwise), a document's key there being ``seq << 32 | row``. Written whole or
not at all, like every file of a lake.

With near dedup on, the worker writes the chunk's LSH band hashes the same way, whatever the
verification: a *bands file* (``<chunk_key>.<config_hash>.bands.arrow``, columns ``row`` and
``bands``) that the driver reads whole (it looks every band up) and that becomes
``index/bands/<seq>.arrow``, the lake's band index, without the driver writing a byte of it.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from lakecurate.lake import atomic
from lakecurate.lake.storage import Location

SUFFIX = ".sets.arrow"
"""The sets file of a staged file ``<name>.parquet`` is ``<name>.sets.arrow``."""
BANDS_SUFFIX = ".bands.arrow"
"""Its bands file is ``<name>.bands.arrow``."""

VALUES = {"signature": pa.uint32(), "bands": pa.uint64()}
"""The list columns a file of this kind holds: sets (or signatures), or band hashes."""
KEYS = ("row", "doc_seq")
_BLOCK = 1 << 20


def schema(column: str = "signature") -> pa.Schema:
    """A file's schema: the ``row`` key and one list column of :data:`VALUES`."""
    return pa.schema(
        [pa.field("row", pa.int64(), nullable=False), pa.field(column, pa.list_(VALUES[column]))]
    )


def beside(staged: str, suffix: str = SUFFIX) -> Location:
    """The sets file (or with ``BANDS_SUFFIX`` the bands file) that goes with the staged file
    at ``staged`` (a ``Location`` URI)."""
    loc = Location(staged)
    return Location(loc.uri.removesuffix(".parquet") + suffix)


def write(table: pa.Table, path: Location) -> str:
    """Write ``table`` (a :func:`schema`: ``row`` ascending, then the list column) at ``path``,
    whole or not at all; returns the sha256 of the file, for the staged file to seal it with
    its own."""
    wanted = schema(table.schema.names[1])
    table = table.select(wanted.names).cast(wanted)
    if not path.is_local:
        sink = pa.BufferOutputStream()
        _write_ipc(table, sink)
        data = sink.getvalue()
        path.write_bytes(data.to_pybytes())
        return hashlib.sha256(memoryview(data)).hexdigest()
    path.local.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(path.local) as tmp, open(tmp, "wb") as f:
        hashing = _Hashing(f)
        with pa.PythonFile(hashing, mode="w") as sink:
            _write_ipc(table, sink)
        return hashing.sha256.hexdigest()


class _Hashing(io.RawIOBase):
    """A file being written, hashed on the way: the worker no longer reads its own sets and
    bands files back (about 0.4 of the text with shingle sets) to seal them."""

    def __init__(self, f: BinaryIO) -> None:
        super().__init__()
        self.f = f
        self.sha256 = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        return self.f.write(data)

    def tell(self) -> int:
        return self.f.tell()

    def flush(self) -> None:
        self.f.flush()


def _write_ipc(table: pa.Table, sink: pa.NativeFile) -> None:
    with pa.ipc.new_file(sink, table.schema) as writer:
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
    """One sets file (or a signature file of the layout before, keyed by ``doc_seq``), opened
    for reading by row. On local disk only its key column and list offsets are read through a
    memory map; the lists asked for are read with one ``pread`` per run of rows, so the driver
    holds (and counts in its I/O) only the candidates' bytes: touching them through the map
    made the kernel map the pages around each one too, most of the file at candidates a few
    rows apart. From object storage the file is fetched whole (its bytes must come to the
    driver's disk anyway, to become the signature file of its commit)."""

    def __init__(self, path: Location) -> None:
        self.path = path
        self._data: pa.Buffer | None = None
        self._base = 0
        if path.is_local:
            whole = pa.memory_map(path.uri)
            self.table = pa.ipc.open_file(whole).read_all()
            self._base = whole.read_buffer(whole.size()).address if whole.size() else 0
        else:
            self._data = pa.py_buffer(path.read_bytes())
            self.table = pa.ipc.open_file(pa.BufferReader(self._data)).read_all()
        names = self.table.schema.names
        if len(names) != 2 or names[0] not in KEYS or names[1] not in VALUES:
            raise ValueError(f"{path} is not a sets or bands file (columns {names})")
        self._width = VALUES[names[1]].bit_width // 8

    @property
    def key(self) -> str:
        """``row`` (a sets file) or ``doc_seq`` (a signature file written before them)."""
        return str(self.table.schema.names[0])

    def keys(self) -> npt.NDArray[np.int64]:
        """The key column, ascending."""
        return np.asarray(self.table.column(0).to_numpy(), dtype=np.int64)

    @property
    def column(self) -> str:
        """``signature`` (a sets file) or ``bands`` (a bands file)."""
        return str(self.table.schema.names[1])

    def take(self, at: npt.NDArray[np.int64]) -> pa.Array:
        """The lists at positions ``at`` (ascending) of the file."""
        column = self.table.column(1)
        if self._data is not None or column.num_chunks != 1 or not len(at):
            return column.take(pa.array(at, pa.int64())).combine_chunks()
        lists = column.chunk(0)
        offsets = np.asarray(lists.offsets.to_numpy(), dtype=np.int64)
        values = lists.values
        w = self._width
        where = values.buffers()[1].address + values.offset * w - self._base
        starts, ends = offsets[at], offsets[at + 1]
        # Runs of rows whose lists touch: one read each.
        cut = np.flatnonzero(starts[1:] != ends[:-1]) + 1
        first, last = np.append(0, cut), np.append(cut, len(at)) - 1
        fd = os.open(self.path.uri, os.O_RDONLY)
        try:
            data = b"".join(
                os.pread(fd, int(ends[b] - starts[a]) * w, where + int(starts[a]) * w)
                for a, b in zip(first.tolist(), last.tolist(), strict=True)
            )
        finally:
            os.close(fd)
        if len(data) != int((ends - starts).sum()) * w:
            raise ValueError(f"{self.path} is shorter than its own index")
        out = np.zeros(len(at) + 1, dtype=np.int32)
        np.cumsum(ends - starts, out=out[1:])
        flat = pa.array(np.frombuffer(data, dtype=VALUES[self.column].to_pandas_dtype()))
        return pa.ListArray.from_arrays(pa.array(out), flat, type=lists.type)

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
