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

from lakecurate.errors import LakeError
from lakecurate.lake.sets import SetsFile
from lakecurate.lake.storage import Location
from lakecurate.schema import BANDS_COLUMN, SIGNATURE_COLUMN
from lakecurate.store import band_index
from lakecurate.store.signatures import ChunkSets

NEAR_DUP = "near_dup"


class NearDedup:
    """Near dedup for one lake; ``None`` in the committer when ``[near_dedup]`` is off."""

    def __init__(self, index: band_index.NearDedupIndex) -> None:
        self.index = index
        self.cfg = index.cfg

    def apply(
        self,
        rows: pa.Table,
        seq: int,
        sets_file: Location | None = None,
        bands_file: SetsFile | None = None,
    ) -> tuple[pa.Table, int, Callable[[], None]]:
        """Decide a chunk (rows sorted by source_line, with the band column, and the signature
        column unless ``sets_file``, the worker's sets file of the chunk, holds the sets;
        ``bands_file``: the worker's bands file the band column was read from, which becomes
        the commit's band file).

        Returns the rows (near-dedup columns dropped), the number of near duplicates, and the
        index writer to call inside the state transaction.
        """
        table, positions = band_index.chunk_table_of(rows, seq)
        sets = None
        if sets_file is not None and self.cfg.verify:
            sets = ChunkSets.of_file(seq, sets_file)
            if not np.array_equal(sets.rows(), positions):
                raise LakeError(
                    f"the sets file {sets_file} does not match its staged chunk's documents"
                )
        bands = None if bands_file is None else ChunkSets.of_file(seq, bands_file)
        matched = self.index.match_chunk(table, sets, bands)
        n = rows.num_rows
        cluster = np.full(n, -1, dtype=np.int64)
        has_cluster = np.zeros(n, dtype=bool)
        m_cluster = matched["cluster_id"].to_numpy(zero_copy_only=False)
        m_valid = pc.is_valid(matched["cluster_id"]).to_numpy(zero_copy_only=False)
        cluster[positions[m_valid]] = m_cluster[m_valid].astype(np.int64)
        has_cluster[positions[m_valid]] = True
        # A kept row with a dup_of in the match becomes near_dup of it (Arrow columns, no loop
        # over rows: this ran once per document in the driver).
        kept = np.asarray(rows["kept"].to_numpy(zero_copy_only=False), dtype=bool)
        has_dup = np.asarray(pc.is_valid(matched["dup_of"]).to_numpy(zero_copy_only=False))
        near = has_dup & kept[positions]
        dups = int(near.sum())
        which = np.full(n, -1, dtype=np.int64)  # row -> its row of `matched`, when near
        which[positions[near]] = np.flatnonzero(near)
        near_of = matched["dup_of"].take(pa.array(which, mask=which < 0))
        is_near = pa.array(which >= 0, pa.bool_())
        # An exact copy of a document that just became a near duplicate follows it to the
        # cluster's kept document: its dup_of must name a row the lake keeps.
        if dups:
            # (id -> the kept document) of the demoted rows; an id given twice maps to its
            # last row, and an empty dup_of to nothing, as the dict this replaces did.
            demoted = pc.and_(is_near, pc.not_equal(near_of, ""))
            demoted_ids = pc.filter(rows["id"], demoted)[::-1]
            demoted_to = pc.filter(near_of, demoted)[::-1]
            at = pc.index_in(rows["dup_of"], value_set=demoted_ids.combine_chunks())
            follow = pc.if_else(
                pc.fill_null(pc.equal(rows["reason"], "exact_dup"), False),
                demoted_to.take(at),
                pa.scalar(None, pa.string()),
            )
            rows = rows.set_column(
                rows.schema.get_field_index("dup_of"),
                "dup_of",
                pc.coalesce(follow, rows["dup_of"]),
            )
        out = rows.drop_columns(
            [c for c in (SIGNATURE_COLUMN, BANDS_COLUMN) if c in rows.column_names]
        )
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
            pc.if_else(is_near, near_of.cast(pa.string()), out["dup_of"]),
        )
        out = out.set_column(
            out.schema.get_field_index("cluster_id"),
            "cluster_id",
            pa.array(cluster, mask=~has_cluster),
        )
        return out, dups, lambda: self.index.add_chunk(table, matched, sets, bands)
