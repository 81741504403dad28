"""MinHash signatures of the band index's documents, kept outside ``state.duckdb`` (issue 14).

Verification compares a candidate pair's full signatures (``num_perm`` uint32 each, 512 bytes at
128), or with ``[near_dedup].verify_on = "shingles"`` (the default since issue 17) their shingle
sets (sorted uint32 hashes, 4 bytes per distinct shingle: the same column type, stored here the
same way), and only candidates are ever looked at: in ``state.duckdb`` the signatures were
about half the file and grew with every document. They live instead in one uncompressed Arrow IPC
file per commit seq, ``LAKE/index/signatures/<seq>.arrow`` (columns ``doc_seq``, sorted, and
``signature``), written once when the chunk joins the band index and memory-mapped on read, so a
lookup touches only the pages of the candidates it asks for.

Invariant: ``minhash_docs`` holds a document of seq ``s`` only after the file of ``s`` was written
with its signature (:meth:`SignatureFiles.write` runs before the rows are inserted, and rewrites
the whole file, so a retried chunk overwrites an earlier attempt). Files of seqs that left the
index are harmless leftovers: nothing asks for their documents. A document the index holds but no
file has is an error, never a silent "not near": ``verify --repair`` rebuilds both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate.errors import LakeError
from lakecurate.lake import atomic

ROW_BITS = 32
"""doc_seq = (commit seq << ROW_BITS) | row (``band_index.make_doc_seq``)."""

SCHEMA = pa.schema(
    [
        pa.field("doc_seq", pa.int64(), nullable=False),
        pa.field("signature", pa.list_(pa.uint32())),
    ]
)
"""What :meth:`SignatureFiles.write` takes and :meth:`SignatureFiles.read` returns."""


class SignatureFiles:
    """The signature files of one lake (``folder``), or an in-memory set of them (``None``:
    an index on a throw-away connection, as the SQL tests use)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._memory: dict[int, pa.Table] = {}

    def _path(self, seq: int) -> Path:
        assert self.folder is not None
        return self.folder / f"{seq}.arrow"

    def write(self, docs: pa.Table) -> None:
        """Store the signatures of ``docs`` (:data:`SCHEMA`, non-NULL signatures), replacing
        whatever an earlier attempt stored for their seqs."""
        docs = docs.select(SCHEMA.names).cast(SCHEMA).sort_by("doc_seq")
        seqs = np.asarray(docs["doc_seq"].to_numpy(), dtype=np.int64) >> ROW_BITS
        for seq in np.unique(seqs).tolist():
            part = docs.filter(pa.array(seqs == seq))
            if self.folder is None:
                self._memory[seq] = part
                continue
            self.folder.mkdir(parents=True, exist_ok=True)
            with (
                atomic.replacing(self._path(seq)) as tmp,
                pa.OSFile(str(tmp), "wb") as sink,
                pa.ipc.new_file(sink, SCHEMA) as writer,
            ):
                writer.write_table(part)

    def _load(self, seq: int) -> pa.Table | None:
        if self.folder is None:
            return self._memory.get(seq)
        path = self._path(seq)
        if not path.exists():
            return None
        try:
            return pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        except (OSError, pa.ArrowInvalid) as exc:
            raise _missing(f"{path} is unreadable ({exc})") from exc

    def read(self, doc_seqs: npt.ArrayLike) -> pa.Table:
        """The signatures of ``doc_seqs`` (:data:`SCHEMA`, in the order asked); every one must
        be stored."""
        wanted = np.unique(np.asarray(doc_seqs, dtype=np.int64))
        parts = []
        for seq in np.unique(wanted >> ROW_BITS).tolist():
            asked = wanted[(wanted >> ROW_BITS) == seq]
            stored = self._load(seq)
            if stored is None:
                raise _missing(f"no signatures of commit seq {seq}")
            have = np.asarray(stored["doc_seq"].to_numpy(), dtype=np.int64)
            at = np.minimum(np.searchsorted(have, asked), max(len(have) - 1, 0))
            if len(have) == 0 or (have[at] != asked).any():
                raise _missing(f"commit seq {seq} lacks signatures of indexed documents")
            parts.append(stored.take(pa.array(at)))
        if not parts:
            return SCHEMA.empty_table()
        return pa.concat_tables(parts)

    def doc_seqs(self) -> npt.NDArray[np.int64]:
        """Every stored doc_seq (for ``verify``)."""
        if self.folder is None:
            cols = [t["doc_seq"] for t in self._memory.values()]
        elif self.folder.is_dir():
            paths = [p for p in self.folder.glob("*.arrow") if p.stem.isdigit()]
            cols = [t["doc_seq"] for p in paths if (t := self._load(int(p.stem))) is not None]
        else:
            cols = []
        if not cols:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.asarray(c.to_numpy(), dtype=np.int64) for c in cols])

    def clear(self) -> None:
        """Forget every signature (the band index was cleared)."""
        self._memory.clear()
        if self.folder is not None and self.folder.is_dir():
            for path in self.folder.iterdir():
                path.unlink()

    @staticmethod
    def of_docs(
        doc_seq: pa.Array | pa.ChunkedArray, signature: pa.Array | pa.ChunkedArray
    ) -> pa.Table:
        """A :data:`SCHEMA` table of the rows that have a signature."""
        table = pa.table({"doc_seq": doc_seq, "signature": signature})
        return table.filter(pc.is_valid(table["signature"])).cast(SCHEMA)


def _missing(what: str) -> LakeError:
    return LakeError(
        f"the near-dedup signature files are incomplete: {what}; run `lakecurate verify "
        "--repair` to rebuild the near-dedup index from the table"
    )
