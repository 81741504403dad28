"""The driver's side of near-duplicate removal: decided chunks against the lake's band index.

Workers stage MinHash signatures and band hashes (``steps.near.signatures``); here, in commit
order, each chunk is matched against everything committed before it and within itself
(``store.band_index.NearDedupIndex``; a run of consecutive chunks as one), kept documents near
an earlier one become ``near_dup`` of that cluster's kept document, and the chunk's bands join
the index in the same state transaction as its SUCCESS. Order keys are
``commit seq << 32 | row``, so decisions depend only on commit order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate.errors import LakeError
from lakecurate.lake.sets import SetsFile
from lakecurate.lake.storage import Location
from lakecurate.schema import BANDS_COLUMN, SIGNATURE_COLUMN
from lakecurate.store import band_index
from lakecurate.store.signatures import ChunkSets

NEAR_DUP = "near_dup"


@dataclass(frozen=True)
class RunChunk:
    """A decided chunk of a run matched as one: its rows (sorted by source_line, with the band
    column, and the signature column unless ``sets_file``, the worker's sets file of the
    chunk, holds the sets), its commit seq, and ``bands_file``, the worker's bands file the
    band column was read from, which becomes the commit's band file."""

    rows: pa.Table
    seq: int
    sets_file: Location | None = None
    bands_file: SetsFile | None = None


class Applied(NamedTuple):
    """A chunk after near dedup: its rows (near-dedup columns dropped), its number of near
    duplicates, and what indexes it (inside the state transaction, after the chunks before
    it in its run)."""

    rows: pa.Table
    near_dups: int
    write: Callable[[], None]


class NearDedup:
    """Near dedup for one lake; ``None`` in the committer when ``[near_dedup]`` is off."""

    def __init__(self, index: band_index.NearDedupIndex) -> None:
        self.index = index
        self.cfg = index.cfg

    def apply_run(self, run: Sequence[RunChunk]) -> list[Applied]:
        """Decide a run of consecutive chunks (in commit order, each decided against the lake
        and the chunks before it) with one match (``NearDedupIndex.match_chunks``): a small
        chunk's decision was mostly the fixed cost of its statements.

        Per chunk: its rows (near-dedup columns dropped), its number of near duplicates, and
        its index writer, to call in order inside the state transaction: the last chunk's
        indexes the whole run (``NearDedupIndex.add_run``), the others' only check the order.
        """
        tables, positions, sets, bands = [], [], [], []
        for chunk in run:
            table, at = band_index.chunk_table_of(chunk.rows, chunk.seq)
            tables.append(table)
            positions.append(at)
            if chunk.sets_file is not None and self.cfg.verify:
                chunk_sets = ChunkSets.of_file(chunk.seq, chunk.sets_file)
                if not np.array_equal(chunk_sets.rows(), at):
                    raise LakeError(
                        f"the sets file {chunk.sets_file} does not match its staged chunk's "
                        "documents"
                    )
                sets.append(chunk_sets)
            if chunk.bands_file is not None:
                bands.append(ChunkSets.of_file(chunk.seq, chunk.bands_file))
        # A run whose chunks do not all have their files is matched without them (each
        # chunk's sets then come from its signature column).
        sets = sets if len(sets) == len(run) else []
        bands = bands if len(bands) == len(run) else []
        whole = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        matched = self.index.match_chunks(whole, sets, bands)
        out: list[Applied] = []
        demoted = _Demoted()
        start = 0
        written = [0]  # the chunks whose writer ran

        def write(i: int) -> None:
            assert written[0] == i, "a run's chunks are indexed in order, each once"
            written[0] += 1
            if i == len(run) - 1:
                self.index.add_run(tables, whole, matched, sets, bands)

        for i, chunk in enumerate(run):
            mine = matched.slice(start, tables[i].num_rows)
            start += tables[i].num_rows
            rows, dups = _decided(chunk.rows, positions[i], mine, demoted)
            out.append(Applied(rows, dups, functools.partial(write, i)))
        return out


class _Demoted:
    """The kept documents of a run that became near duplicates so far: (id, the cluster's kept
    document's id), in order. An exact copy decided in the same run points at the demoted
    document (the batch's one decision saw it kept), and must follow it to the kept one, as
    it would through the content index were the chunks decided one by one."""

    def __init__(self) -> None:
        self.ids = pa.array([], pa.string())
        self.to = pa.array([], pa.string())

    def add(self, ids: pa.Array | pa.ChunkedArray, to: pa.Array | pa.ChunkedArray) -> None:
        self.ids = pa.concat_arrays([self.ids, *pa.chunked_array(ids).cast(pa.string()).chunks])
        self.to = pa.concat_arrays([self.to, *pa.chunked_array(to).cast(pa.string()).chunks])


def _decided(
    rows: pa.Table, positions: npt.NDArray[np.int64], matched: pa.Table, demoted: _Demoted
) -> tuple[pa.Table, int]:
    """A chunk's rows with its match applied (``positions``: the rows ``matched`` covers, in
    order), and its number of near duplicates; ``demoted`` (of the run's chunks before it)
    takes its own."""
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
    # An exact copy of a document that just became a near duplicate (in this chunk or one
    # before it in the run) follows it to the cluster's kept document: its dup_of must name a
    # row the lake keeps.
    if dups:
        mine = pc.and_(is_near, pc.not_equal(near_of, ""))
        demoted.add(pc.filter(rows["id"], mine), pc.filter(near_of, mine))
    if len(demoted.ids):
        # (id -> the kept document); an id given twice maps to its last row, and an empty
        # dup_of to nothing, as the dict this replaces did.
        at = pc.index_in(rows["dup_of"], value_set=demoted.ids[::-1])
        follow = pc.if_else(
            pc.fill_null(pc.equal(rows["reason"], "exact_dup"), False),
            demoted.to[::-1].take(at),
            pa.scalar(None, pa.string()),
        )
        rows = rows.set_column(
            rows.schema.get_field_index("dup_of"), "dup_of", pc.coalesce(follow, rows["dup_of"])
        )
    out = rows.drop_columns([c for c in (SIGNATURE_COLUMN, BANDS_COLUMN) if c in rows.column_names])
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
    return out, dups
