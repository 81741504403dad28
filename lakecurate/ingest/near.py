"""The driver's side of near-duplicate removal: a decided chunk against the lake's band index.

Workers stage MinHash signatures and band hashes (``steps.near.signatures``); here, in commit
order, each chunk is matched against everything committed before it and within itself
(``store.band_index.NearDedupIndex``), kept documents near an earlier one become ``near_dup``
of that cluster's kept document, and the chunk's bands join the index in the same state
transaction as its SUCCESS. Order keys are ``commit seq << 32 | row``, so decisions depend
only on commit order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import engine
from lakecurate.lake.delta import DeltaStore
from lakecurate.steps.near.minhash import MinHashConfig
from lakecurate.steps.near.signatures import add_signatures
from lakecurate.store import band_index
from lakecurate.store.state import StateStore
from lakecurate.types import BANDS_COLUMN, SIGNATURE_COLUMN

NEAR_DUP = "near_dup"


class NearDedup:
    """Near dedup for one lake; ``None`` in the committer when ``[near_dedup]`` is off."""

    def __init__(self, index: band_index.NearDedupIndex, cfg: MinHashConfig) -> None:
        self.index = index
        self.cfg = cfg

    def _chunk_table(self, rows: pa.Table, seq: int) -> tuple[pa.Table, np.ndarray]:
        valid = pc.is_valid(rows[SIGNATURE_COLUMN]).to_numpy(zero_copy_only=False)
        positions = np.flatnonzero(valid)
        take = pa.array(positions)
        table = band_index.chunk_table(
            band_index.make_doc_seq(seq, positions),
            rows["id"].take(take),
            rows[SIGNATURE_COLUMN].take(take),
            rows[BANDS_COLUMN].take(take),
        )
        return table, positions

    def apply(self, rows: pa.Table, seq: int) -> tuple[pa.Table, int, Callable[[], None]]:
        """Decide a chunk (rows sorted by source_line, with signature columns).

        Returns the rows (signature columns dropped), the number of near duplicates, and the
        index writer to call inside the state transaction.
        """
        table, positions = self._chunk_table(rows, seq)
        matched = self.index.match_chunk(table)
        n = rows.num_rows
        cluster = np.full(n, -1, dtype=np.int64)
        has_cluster = np.zeros(n, dtype=bool)
        near_of: list[str | None] = [None] * n
        m_cluster = matched["cluster_id"].to_numpy(zero_copy_only=False)
        m_valid = pc.is_valid(matched["cluster_id"]).to_numpy(zero_copy_only=False)
        cluster[positions[m_valid]] = m_cluster[m_valid].astype(np.int64)
        has_cluster[positions[m_valid]] = True
        kept = rows["kept"].to_pylist()
        dups = 0
        for pos, dup in zip(positions.tolist(), matched["dup_of"].to_pylist(), strict=True):
            if dup is not None and kept[pos]:
                near_of[pos] = dup
                dups += 1
        is_near = pa.array([d is not None for d in near_of], pa.bool_())  # typed: 0 rows too
        # An exact copy of a document that just became a near duplicate follows it to the
        # cluster's kept document: its dup_of must name a row the lake keeps.
        demoted = {i: d for i, d in zip(rows["id"].to_pylist(), near_of, strict=True) if d}
        if demoted:
            follow = [
                demoted.get(d) if r == "exact_dup" else None
                for d, r in zip(rows["dup_of"].to_pylist(), rows["reason"].to_pylist(), strict=True)
            ]
            rows = rows.set_column(
                rows.schema.get_field_index("dup_of"),
                "dup_of",
                pc.coalesce(pa.array(follow, pa.string()), rows["dup_of"]),
            )
        out = rows.drop_columns([SIGNATURE_COLUMN, BANDS_COLUMN])
        out = out.set_column(
            out.schema.get_field_index("kept"), "kept", pc.and_(out["kept"], pc.invert(is_near))
        )
        out = out.set_column(
            out.schema.get_field_index("reason"),
            "reason",
            pc.if_else(is_near, pa.scalar(NEAR_DUP), out["reason"]),
        )
        out = out.set_column(
            out.schema.get_field_index("dup_of"),
            "dup_of",
            pc.if_else(is_near, pa.array(near_of, pa.string()), out["dup_of"]),
        )
        out = out.set_column(
            out.schema.get_field_index("cluster_id"),
            "cluster_id",
            pa.array(cluster, mask=~has_cluster),
        )
        return out, dups, lambda: self.index.add_chunk(table, matched)

    def catch_up(self, state: StateStore, delta: DeltaStore) -> str | None:
        """Index every committed chunk the band index lacks, from its committed text, in
        commit order; returns a note when it did. Commands that do not run near dedup
        (`compact`, `verify --repair`) may finalise an interrupted commit, and a state
        rebuilt from the log has no band index: the next ingest must not match against a
        partial index."""
        chunks = state.con.execute(engine.q("dedup.unindexed_chunks")).fetchall()
        if not chunks:
            return None
        table = delta.rows_of_chunks([key for key, _ in chunks])
        by_chunk = table["chunk_key"]
        indexed = 0
        for key, seq in chunks:
            rows = table.filter(pc.equal(by_chunk, key))
            writer = self.writer_from_committed(rows, int(seq))
            with state.transaction():
                writer()
            indexed += rows.num_rows > 0
        return f"added {indexed} committed chunk(s) to the near-dedup index" if indexed else None

    def writer_from_committed(self, rows: pa.Table, seq: int) -> Callable[[], None]:
        """The index writer for a chunk already in the table (recovery, rebuild): signatures
        are recomputed from the committed text, decisions read back from the rows."""
        rows = rows.sort_by("source_line")
        with_sig = add_signatures(rows, self.cfg)
        table, positions = self._chunk_table(with_sig, seq)
        take = pa.array(positions)
        matched = pa.table(
            {
                "doc_seq": table["doc_seq"],
                "doc_id": table["doc_id"],
                "cluster_id": rows["cluster_id"].take(take),
                "dup_of": rows["dup_of"].take(take),
            }
        )
        return lambda: self.index.add_chunk(table, matched)
