"""The band index's documents in the driver's memory: a candidate's cluster by binary search.

Matching a chunk joined its lake candidates with ``minhash_docs`` (each candidate's cluster,
that cluster's kept document, the kept document's id) in DuckDB: hash joins that read the whole
table, whose rows are spread over the lake's whole range of doc_seqs by the candidates (about
0.1 s a chunk at 2 M documents, 0.45 s at 20 M: most of how the driver's work per chunk grew at
16x, issue 14). Here ``minhash_docs``' rows are sorted runs by doc_seq (``store.runs``), and a
chunk's matching gets the few rows it needs as a small table, ``nd_lake_docs``, that the SQL
joins instead.

The truth stays the table: this is a cache of it, about 24 bytes a document plus its id, read
on first use, kept up by the index's inserts (``add``), and checked before every use against
the table's row count and largest doc_seq, the band cache's rule: any other change (documents
forgotten, a chunk indexed again, a rolled-back transaction) makes it read the table again.
"""

from __future__ import annotations

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from lakecurate import engine
from lakecurate.store.runs import SortedRun, StringPool, push_run

I64 = npt.NDArray[np.int64]

SCHEMA = pa.schema(
    [
        pa.field("doc_seq", pa.int64(), nullable=False),
        pa.field("cluster_id", pa.int64(), nullable=False),
        pa.field("doc_id", pa.string()),
    ]
)
"""``nd_lake_docs``: the rows of ``minhash_docs`` a chunk's matching reads."""


class _DocRun(SortedRun):
    """Documents sorted by doc_seq: (doc_seq, cluster_id, ref), ``ref`` its id's place in
    the cache's pool."""

    __slots__ = ()

    def find(self, doc_seqs: I64) -> tuple[npt.NDArray[np.bool_], I64, I64]:
        """Which of ``doc_seqs`` are here, and the cluster_id and ref of each found."""
        seqs = self.cols[0]
        at = np.minimum(np.searchsorted(seqs, doc_seqs), max(len(seqs) - 1, 0))
        found = (seqs[at] == doc_seqs) if len(seqs) else np.zeros(len(doc_seqs), dtype=bool)
        return found, self.cols[1][at[found]], self.cols[2][at[found]]


class DocCache:
    """The rows of ``minhash_docs`` on ``con`` (see the module docstring)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self._runs: list[_DocRun] = []
        self._ids = StringPool()  # the documents' ids
        self._loaded = False  # False: not read yet, or stale
        self._fingerprint: tuple[int, int] = (0, -1)  # (rows, largest doc_seq) held
        self.loads = 0  # times the table was read, for tests

    def _table_fingerprint(self) -> tuple[int, int]:
        ((rows, top),) = self.con.execute(engine.q("dedup.bands_fingerprint")).fetchall()
        return int(rows), -1 if top is None else int(top)

    def _current(self) -> list[_DocRun]:
        fingerprint = self._table_fingerprint()
        if self._loaded and fingerprint == self._fingerprint:
            return self._runs
        self.forget()
        table = self.con.sql(engine.q("dedup.docs_entries")).to_arrow_table()
        self._push(
            np.asarray(table["doc_seq"].to_numpy(), dtype=np.int64),
            np.asarray(table["cluster_id"].to_numpy(), dtype=np.int64),
            table["doc_id"].combine_chunks(),
        )
        self._fingerprint = fingerprint
        self._loaded = True
        self.loads += 1
        return self._runs

    def _push(self, doc_seq: I64, cluster_id: I64, ids: pa.Array) -> None:
        if not len(doc_seq):
            return
        push_run(self._runs, _DocRun([doc_seq, cluster_id, self._ids.add(ids)]))

    @staticmethod
    def _rows(runs: list[_DocRun], doc_seqs: I64) -> tuple[I64, I64, I64]:
        """(doc_seq, cluster_id, ref) of those of ``doc_seqs`` (distinct) ``runs`` hold."""
        out_seq, out_cluster, out_ref = [], [], []
        for run in runs:
            found, cluster, ref = run.find(doc_seqs)
            out_seq.append(doc_seqs[found])
            out_cluster.append(cluster)
            out_ref.append(ref)
        if not out_seq:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return np.concatenate(out_seq), np.concatenate(out_cluster), np.concatenate(out_ref)

    def lake_docs(self, doc_seqs: I64) -> pa.Table:
        """``nd_lake_docs`` (:data:`SCHEMA`) for a chunk whose lake candidates are
        ``doc_seqs``: the rows of those the table holds, and of their clusters' kept documents
        (their label; ``dup_of`` names one)."""
        runs = self._current()
        seq, cluster, ref = self._rows(runs, np.unique(np.asarray(doc_seqs, dtype=np.int64)))
        kept = np.setdiff1d(cluster, seq)  # the kept documents not among the candidates
        k_seq, k_cluster, k_ref = self._rows(runs, kept)
        seq = np.concatenate([seq, k_seq])
        cluster = np.concatenate([cluster, k_cluster])
        ref = np.concatenate([ref, k_ref])
        return pa.table([seq, cluster, self._ids.take(ref)], schema=SCHEMA)

    def add(self, doc_seq: I64, cluster_id: I64, ids: pa.Array) -> None:
        """After the index inserted these documents (in the caller's transaction): hold them
        too, unless the cache is stale or the table changed otherwise."""
        if not self._loaded:
            return
        before = self._fingerprint
        top = int(doc_seq.max()) if len(doc_seq) else -1
        after = (before[0] + len(doc_seq), max(before[1], top))
        if self._table_fingerprint() != after:  # e.g. rows an earlier attempt left replaced
            self._loaded = False
            return
        self._push(doc_seq, cluster_id, ids)
        self._fingerprint = after

    def forget(self) -> None:
        """Read the table again on the next use."""
        self._loaded = False
        self._runs, self._ids = [], StringPool()
