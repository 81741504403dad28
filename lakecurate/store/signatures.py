"""MinHash signatures and band hashes of the band index's documents, outside ``state.duckdb``.

Verification compares a candidate pair's full signatures (``num_perm`` uint32 each, 512 bytes at
128), or with ``[near_dedup].verify_on = "shingles"`` (the default since issue 17) their shingle
sets (sorted uint32 hashes, 4 bytes per distinct shingle: the same column type, stored here the
same way), and only candidates are ever looked at: in ``state.duckdb`` the signatures were
about half the file and grew with every document. They live instead in one uncompressed Arrow IPC
file per commit seq, ``LAKE/index/signatures/<seq>.arrow``, written once when the chunk joins the
band index; a lookup reads the key column through a memory map and only the lists of the
candidates it asks for (``lake.sets.SetsFile.take``). A file is a worker's sets file
(``lake.sets``: columns ``row``, ascending, and ``signature``; a document's key is
``seq << 32 | row``) put in place as bytes (:meth:`SignatureFiles.place`), so the driver never
reads a chunk's sets whole (issue 14); files written before that hold
``doc_seq`` instead of ``row`` and are read as they are.

The band hashes, the band index itself, are kept the same way in ``LAKE/index/bands/<seq>.arrow``
(``SignatureFiles(folder, "bands")``, :meth:`SignatureFiles.bands`): a worker's bands file put in
place, read whole by the band cache (``store.band_cache``) for the commits the index holds.

Invariant: ``minhash_docs`` holds a document of seq ``s`` only after the files of ``s`` were
written with its signature and bands (:meth:`ChunkSets.store` runs before the rows are inserted,
and replaces the whole file, so a retried chunk overwrites an earlier attempt). Files of seqs
that left the index are harmless leftovers: nothing asks for their documents. A document the
index holds but no file has is an error, never a silent "not near": ``verify --repair``
rebuilds both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate.errors import IndexFilesError
from lakecurate.lake import sets
from lakecurate.lake.storage import Location

ROW_BITS = 32
"""doc_seq = (commit seq << ROW_BITS) | row (``band_index.make_doc_seq``): a chunk holds fewer
than 2**32 documents. Defined here only; the band index, its cache and its shards use it."""
_ROW_MASK = (1 << ROW_BITS) - 1


def keyed_schema(column: str = "signature") -> pa.Schema:
    """What :meth:`SignatureFiles.write` takes and :meth:`SignatureFiles.read` returns:
    ``doc_seq`` and the list column (``signature``, or ``bands`` for the band files)."""
    return pa.schema(
        [
            pa.field("doc_seq", pa.int64(), nullable=False),
            pa.field(column, pa.list_(sets.VALUES[column])),
        ]
    )


KINDS = {"signature": ("signature", "signatures"), "bands": ("band", "band hashes")}
"""Per list column: what its files are called in messages, and what they hold."""


@dataclass
class _Keyed:
    """Stored lists by ``doc_seq`` (ascending): a table in memory, or a file read by row."""

    doc_seq: npt.NDArray[np.int64]
    lists: Callable[[npt.NDArray[np.int64]], pa.Array]  # the lists at these positions
    column: str = "signature"

    @classmethod
    def of_table(cls, table: pa.Table) -> _Keyed:
        """From a :func:`keyed_schema` table, ``doc_seq`` ascending."""
        name = table.schema.names[1]
        column = table[name]
        return cls(
            np.asarray(table["doc_seq"].to_numpy(), dtype=np.int64),
            lambda at: column.take(pa.array(at, pa.int64())).combine_chunks(),
            name,
        )

    @classmethod
    def of_file(cls, file: sets.SetsFile, seq: int) -> _Keyed:
        """From a sets file of commit ``seq`` (``row`` keys), or a file written before sets
        files (``doc_seq`` keys)."""
        keys = file.keys()
        if file.key == "row":
            keys = (np.int64(seq) << np.int64(ROW_BITS)) | keys
        return cls(keys, file.take, file.column)

    def table(self) -> pa.Table:
        """Everything, as :func:`keyed_schema` (an in-memory store's copy; a whole band file)."""
        at = np.arange(len(self.doc_seq), dtype=np.int64)
        return pa.table([pa.array(self.doc_seq), self.lists(at)], schema=keyed_schema(self.column))

    def read(self, asked: npt.NDArray[np.int64], what: str) -> pa.Table:
        """The rows for ``asked`` (ascending, unique) as :func:`keyed_schema`; every one must
        be there."""
        have = self.doc_seq
        at = np.minimum(np.searchsorted(have, asked), max(len(have) - 1, 0)).astype(np.int64)
        if len(asked) and (len(have) == 0 or (have[at] != asked).any()):
            raise _missing(
                f"{what} lacks {KINDS[self.column][1]} of indexed documents", self.column
            )
        return pa.table(
            [pa.array(asked, pa.int64()), self.lists(at)], schema=keyed_schema(self.column)
        )


class SignatureFiles:
    """The signature files of one lake (``folder``), or an in-memory set of them (``None``:
    an index on a throw-away connection, as the SQL tests use). With ``column = "bands"``
    the band files instead (``index/bands``: the lake's LSH band index, one file per commit
    seq, kept out of ``state.duckdb`` for the same reason, issue 14)."""

    def __init__(self, folder: Path | None, column: str = "signature") -> None:
        self.folder = folder
        self.column = column
        self.schema = keyed_schema(column)
        self.kind = KINDS[column][0]  # "signature" or "band", as messages name the files
        self._memory: dict[int, _Keyed] = {}

    def bands(self) -> SignatureFiles:
        """The band files beside these signature files (in memory when these are)."""
        return SignatureFiles(
            None if self.folder is None else self.folder.parent / "bands", "bands"
        )

    def _path(self, seq: int) -> Path:
        assert self.folder is not None
        return self.folder / f"{seq}.arrow"

    def write(self, docs: pa.Table) -> None:
        """Store the lists of ``docs`` (:attr:`schema`, non-NULL lists), replacing whatever an
        earlier attempt stored for their seqs."""
        docs = docs.select(self.schema.names).cast(self.schema).sort_by("doc_seq")
        doc_seqs = np.asarray(docs["doc_seq"].to_numpy(), dtype=np.int64)
        seqs = doc_seqs >> ROW_BITS
        for seq in np.unique(seqs).tolist():
            mine = pa.array(seqs == seq)
            if self.folder is None:
                self._memory[seq] = _Keyed.of_table(docs.filter(mine))
                continue
            rows = pa.array(doc_seqs & _ROW_MASK)
            part = pa.table({"row": rows, self.column: docs[self.column]}).filter(mine)
            sets.write(part, Location(str(self._path(seq))))

    def place(self, seq: int, file: sets.SetsFile) -> None:
        """Store a worker's sets file as the signatures of commit ``seq``, as bytes (a hard
        link when it can): the driver reads none of it."""
        if self.folder is None:
            self._memory[seq] = _Keyed.of_table(_Keyed.of_file(file, seq).table())
            return
        file.place(self._path(seq))

    def _load(self, seq: int) -> _Keyed | None:
        if self.folder is None:
            return self._memory.get(seq)
        path = self._path(seq)
        if not path.exists():
            return None
        try:
            return _Keyed.of_file(sets.SetsFile(Location(str(path))), seq)
        except (OSError, ValueError, pa.ArrowInvalid) as exc:
            raise _missing(f"{path} is unreadable ({exc})", self.column) from exc

    def whole(self, seq: int) -> pa.Table:
        """Every row stored for commit ``seq`` (:attr:`schema`): a band file, read whole."""
        stored = self._load(seq)
        if stored is None:
            raise _missing(f"no {KINDS[self.column][1]} of commit seq {seq}", self.column)
        return stored.table()

    def read(self, doc_seqs: npt.ArrayLike) -> pa.Table:
        """The signatures of ``doc_seqs`` (:attr:`schema`, ascending); every one must be
        stored. Only their bytes are read (``lake.sets.SetsFile.take``)."""
        wanted = np.unique(np.asarray(doc_seqs, dtype=np.int64))
        parts = []
        for seq in np.unique(wanted >> ROW_BITS).tolist():
            stored = self._load(seq)
            if stored is None:
                raise _missing(f"no {KINDS[self.column][1]} of commit seq {seq}", self.column)
            asked = wanted[(wanted >> ROW_BITS) == seq]
            parts.append(stored.read(asked, f"commit seq {seq}"))
        if not parts:
            return self.schema.empty_table()
        return pa.concat_tables(parts)

    def doc_seqs(self) -> npt.NDArray[np.int64]:
        """Every stored doc_seq (for ``verify``)."""
        if self.folder is None:
            cols = [k.doc_seq for k in self._memory.values()]
        elif self.folder.is_dir():
            paths = [p for p in self.folder.glob("*.arrow") if p.stem.isdigit()]
            cols = [k.doc_seq for p in paths if (k := self._load(int(p.stem))) is not None]
        else:
            cols = []
        if not cols:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(cols)

    def clear(self) -> None:
        """Forget every signature (the band index was cleared)."""
        self._memory.clear()
        if self.folder is not None and self.folder.is_dir():
            for path in self.folder.iterdir():
                path.unlink()

    @staticmethod
    def of_docs(
        doc_seq: pa.Array | pa.ChunkedArray,
        lists: pa.Array | pa.ChunkedArray,
        column: str = "signature",
    ) -> pa.Table:
        """A :func:`keyed_schema` table of the rows that have a list."""
        table = pa.table({"doc_seq": doc_seq, column: lists})
        return table.filter(pc.is_valid(table[column])).cast(keyed_schema(column))


def by_chunk(doc_seqs: npt.ArrayLike) -> list[tuple[int, npt.NDArray[np.int64]]]:
    """Documents of a run of chunks split by chunk: (commit seq, its doc_seqs ascending) for
    each chunk with any, in seq order (a run's sets are read chunk file by chunk file)."""
    asked = np.unique(np.asarray(doc_seqs, dtype=np.int64))
    cuts = np.flatnonzero(np.diff(asked >> ROW_BITS)) + 1
    return [(int(part[0] >> ROW_BITS), part) for part in np.split(asked, cuts) if len(part)]


class ChunkSets:
    """The sets (or signatures) of the chunk being decided, commit ``seq``: a column the driver
    holds (it signed the committed text itself: recovery, a re-decision, the SQL tests), or the
    worker's sets file, of which only the rows asked for are read (issue 14)."""

    def __init__(
        self, seq: int, keyed: _Keyed, table: pa.Table | None, file: sets.SetsFile | None
    ) -> None:
        self.seq = seq
        self._keyed = keyed
        self._table = table  # the in-memory sets (keyed_schema), when there is no file
        self.file = file

    @classmethod
    def of_docs(cls, seq: int, docs: pa.Table, column: str = "signature") -> ChunkSets:
        """From a match table's ``doc_seq`` and ``signature`` (or ``bands``) columns (NULL:
        no set)."""
        table = SignatureFiles.of_docs(docs["doc_seq"], docs[column], column).sort_by("doc_seq")
        return cls(seq, _Keyed.of_table(table), table, None)

    @classmethod
    def of_file(cls, seq: int, path: Location | sets.SetsFile) -> ChunkSets:
        """From the worker's sets (or bands) file at ``path``, or already opened."""
        file = path if isinstance(path, sets.SetsFile) else sets.SetsFile(path)
        return cls(seq, _Keyed.of_file(file, seq), None, file)

    def whole(self) -> pa.Table:
        """Every set of the chunk (:func:`keyed_schema`): a bands file, read whole."""
        return self._table if self._table is not None else self._keyed.table()

    def rows(self) -> npt.NDArray[np.int64]:
        """The rows (in the chunk's line order) that have a set."""
        return self._keyed.doc_seq & _ROW_MASK

    def read(self, doc_seqs: npt.ArrayLike) -> pa.Table:
        """The sets of these documents of the chunk (:func:`keyed_schema`, ascending)."""
        wanted = np.unique(np.asarray(doc_seqs, dtype=np.int64))
        return self._keyed.read(wanted, f"the sets of commit seq {self.seq}")

    def store(self, files: SignatureFiles) -> None:
        """Make these the stored signatures of the chunk's commit (replacing an earlier
        attempt's): the sets file's bytes when there is one."""
        if self.file is not None:
            files.place(self.seq, self.file)
        elif self._table is not None and self._table.num_rows:
            files.write(self._table)


def _missing(what: str, column: str) -> IndexFilesError:
    return IndexFilesError(
        f"the near-dedup {KINDS[column][0]} files are incomplete: {what}; run `lakecurate verify "
        "--repair` to rebuild the near-dedup index from the table"
    )
