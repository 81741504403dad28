"""The lake-wide LSH band index in ``state.duckdb`` that each chunk is matched against.

Workers compute signatures and band hashes (``steps.near.signatures``); the driver, sequentially
in chunk order, matches each chunk against the band index of everything already in the lake and
within itself (:class:`NearDedupIndex`), then adds the chunk to the index (design section 7).

Determinism: every decision is a function of the documents in ``doc_seq`` order only. A document's
cluster is the smallest cluster among its *earlier* neighbours (or itself), so a later chunk never
changes an earlier decision and running chunk by chunk equals running everything as one chunk.
This module never opens a database: it is handed a connection (``engine.connect`` opens them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import duckdb
import duckdb.func
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from duckdb.func import FunctionNullHandling, PythonUDFType

from lakecurate import engine, faults
from lakecurate.config import NEAR_LINKS, Config, NearDedupConfig, NearLink
from lakecurate.errors import LakeError
from lakecurate.schema import BANDS_COLUMN, SIGNATURE_COLUMN
from lakecurate.steps.near import minhash
from lakecurate.steps.near.signatures import common_shingles
from lakecurate.store.band_cache import (
    BandCache,
    BandSource,
    RemoteHolder,
    Rows,
    band_rows,
    by_hash,
)
from lakecurate.store.band_shards import Shards
from lakecurate.store.doc_cache import DocCache
from lakecurate.store.signatures import ROW_BITS, ChunkSets, SignatureFiles, by_chunk

I64 = npt.NDArray[np.int64]
Tester = Callable[[tuple[I64, I64]], tuple[I64, I64]]
"""Which of some (chunk document, earlier document) pairs are near: decider processes' test."""

MAX_ROUNDS = 10_000

Link = NearLink
LINKS: tuple[Link, ...] = NEAR_LINKS
"""Clustering rules of :class:`NearDedupIndex` (``[near_dedup].link``): see docs/near-dedup.md."""

CHUNK_SCHEMA = pa.schema(
    [
        pa.field("doc_seq", pa.int64(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("bands", pa.list_(pa.uint64())),
        pa.field("signature", pa.list_(pa.uint32())),
    ]
)
"""What :meth:`NearDedupIndex.match_chunk` takes: NULL bands for a document without tokens."""

RESULT_SCHEMA = pa.schema(
    [
        pa.field("doc_seq", pa.int64(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("cluster_id", pa.int64()),
        pa.field("dup_of", pa.string()),
    ]
)


def make_doc_seq(chunk_ordinal: int, rows: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Global order keys of a chunk's rows; both parts can be read back with ``split_doc_seq``.

    ``chunk_ordinal`` must grow in the order the driver processes chunks (its commit order, not
    the chunk key's sort order: a crawl added later comes later); ``rows`` is each document's
    0-based rank in line order within the chunk.
    """
    r = np.asarray(rows, dtype=np.int64)
    if not 0 <= chunk_ordinal < 2**31 - 1:
        raise ValueError(f"chunk ordinal {chunk_ordinal} out of range")
    if len(r) and (r.min() < 0 or r.max() >= 2**ROW_BITS):
        raise ValueError("row numbers must be in [0, 2**32)")
    return (np.int64(chunk_ordinal) << np.int64(ROW_BITS)) | r


def split_doc_seq(doc_seq: int) -> tuple[int, int]:
    """(chunk ordinal, row in chunk) of an order key."""
    return doc_seq >> ROW_BITS, doc_seq & ((1 << ROW_BITS) - 1)


# -- signatures as Arrow ---------------------------------------------------------------------------
def _matrix(col: pa.Array | pa.ChunkedArray, width: int) -> minhash.U32:
    """A list column of signatures (NULL rows allowed) as an (n, width) matrix, NULL -> EMPTY."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    out: minhash.U32 = np.full((n, width), minhash.EMPTY, dtype=np.uint32)
    if n == 0:
        return out
    valid = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    offsets = np.asarray(col.offsets.to_numpy(), dtype=np.int64)
    values = col.values.to_numpy(zero_copy_only=False)
    lengths = np.diff(offsets)
    if (lengths[valid] != width).any():
        raise LakeError(
            f"signature rows must have {width} values: the config changed between "
            "the workers and the driver"
        )
    rows = np.flatnonzero(valid)
    idx = offsets[rows, None] + np.arange(width)[None, :]
    out[rows] = values[idx]
    return out


def _typed(docs: pa.Table) -> pa.Table:
    return docs.select(CHUNK_SCHEMA.names).cast(CHUNK_SCHEMA)


def _band_rows(docs: pa.Table) -> tuple[Rows, npt.NDArray[np.int64]]:
    """(band_hash, band, doc_seq) of every band of a :data:`CHUNK_SCHEMA` table's documents
    with tokens (the rows ``dedup.chunk_bands`` makes, as numpy arrays) sorted by band hash,
    and those documents' doc_seqs."""
    docs = docs.filter(pc.is_valid(docs["bands"]))
    seqs = np.asarray(docs["doc_seq"].to_numpy(), dtype=np.int64)
    return by_hash(band_rows(docs["doc_seq"], docs["bands"])), seqs


def chunk_table(
    doc_seq: npt.ArrayLike,
    doc_ids: Sequence[str] | pa.Array | pa.ChunkedArray,
    signature: pa.Array,
    bands: pa.Array,
) -> pa.Table:
    """The table :meth:`NearDedupIndex.match_chunk` takes, from the worker's columns."""
    if isinstance(doc_ids, pa.ChunkedArray):
        doc_ids = doc_ids.combine_chunks()
    return pa.table(
        [
            pa.array(np.asarray(doc_seq, dtype=np.int64)),
            # An Arrow array is cast; pa.array would convert it row by row (7 ms a chunk).
            doc_ids.cast(pa.string())
            if isinstance(doc_ids, pa.Array)
            else pa.array(doc_ids, pa.string()),
            bands,
            signature,
        ],
        schema=CHUNK_SCHEMA,
    )


def chunk_table_of(rows: pa.Table, seq: int) -> tuple[pa.Table, npt.NDArray[np.int64]]:
    """The match table of a chunk's rows (with the staged band column, and the signature
    column when the driver holds it) committed with ``seq``, and the row positions it covers:
    rows without bands (no tokens) take no part. Without a signature column the table's
    ``signature`` is NULL: the sets are the worker's file's (:class:`ChunkSets`)."""
    valid = pc.is_valid(rows[BANDS_COLUMN]).to_numpy(zero_copy_only=False)
    positions = np.flatnonzero(valid).astype(np.int64)
    take = pa.array(positions)
    signature = (
        rows[SIGNATURE_COLUMN].take(take)
        if SIGNATURE_COLUMN in rows.column_names
        else pa.nulls(len(positions), CHUNK_SCHEMA.field("signature").type)
    )
    table = chunk_table(
        make_doc_seq(seq, positions),
        rows["id"].take(take),
        signature,
        rows[BANDS_COLUMN].take(take),
    )
    return table, positions


def _install_common_shingles(con: duckdb.DuckDBPyConnection) -> None:
    """The Arrow UDF ``nd_common`` (shared shingles of two sets) that ``nd_near`` calls, once per
    connection: DuckDB refuses a second function of the same name."""
    ((present,),) = con.execute(engine.q("dedup.has_common_udf")).fetchall()
    if not present:
        con.create_function(
            "nd_common",
            common_shingles,
            ["UINTEGER[]", "UINTEGER[]"],
            "BIGINT",
            type=PythonUDFType.ARROW,
            null_handling=FunctionNullHandling.SPECIAL,
            side_effects=False,
        )


def _with_alone(result: pa.Table, alone: pa.Table) -> pa.Table:
    """``result`` (of the documents in a candidate pair) with the documents in none: each its
    own cluster when it has tokens (bands), as ``chunk_result`` would say, in doc_seq order."""
    if not alone.num_rows:
        return result
    own = pa.table(
        {
            "doc_seq": alone["doc_seq"],
            "doc_id": alone["doc_id"],
            "cluster_id": pc.if_else(pc.is_valid(alone["bands"]), alone["doc_seq"], None),
            "dup_of": pa.nulls(alone.num_rows, pa.string()),
        }
    )
    both = pa.concat_tables([result.cast(RESULT_SCHEMA), own.cast(RESULT_SCHEMA)])
    return both.sort_by("doc_seq")


class NearDedupIndex:
    """The LSH band index of a lake, and the chunk-by-chunk matching against it.

    Usage by the driver, once per chunk, in chunk order::

        idx = NearDedupIndex(con, cfg); idx.create_schema()
        result = idx.match_chunk(table)      # before the Delta commit: decides dup_of, cluster_id
        ...commit the chunk...
        idx.add_chunk(table, result)         # inside the transaction that marks the chunk done

    ``match_chunk`` reads the index but never writes it, and ignores index rows of this chunk or
    later ones, so retrying a chunk after a crash gives the same answer; ``add_chunk`` first
    forgets the chunk's rows, so it is idempotent too.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        cfg: NearDedupConfig,
        signatures: SignatureFiles | None = None,
        deciders: int | Shards = 0,
        decider_silence: float = 60.0,
    ) -> None:
        """``cfg.link`` is the clustering rule (docs/near-dedup.md): ``"any"`` (lakes made before
        issue 17) joins a document to the smallest cluster among its earlier neighbours, so
        chains through dropped documents merge; ``"kept"`` (the default) joins it only to a
        cluster whose kept document it is itself near (verified against the representative,
        never through a chain), which needs ``cfg.verify`` (the config checks that). A lake's
        index records its rule and refuses the other one. "Near" is ``nd_near``: the exact
        Jaccard of the shingle sets with ``cfg.verify_on = "shingles"``, equal signature
        positions with ``"signature"``. ``signatures`` holds what verification compares: the
        lake's ``index/signatures`` files, or in memory when not given (an index on a throw-away
        connection). ``deciders``: processes that hold the band cache's rows
        (``store.band_shards``; 0: this one), killed when silent ``decider_silence`` s."""
        self.con = con
        self.cfg = cfg
        self.link: Link = cfg.link
        self.signatures = signatures if signatures is not None else SignatureFiles(None)
        self.bands = self.signatures.bands()  # the band index itself: one file per commit
        holder = None
        if isinstance(deciders, Shards):  # a write session's, shared with the key caches
            holder = deciders
        elif deciders and self.bands.folder is not None:
            holder = Shards(deciders, decider_silence)
        self.cache = BandCache(con, self.bands, holder)  # a chunk's candidates in the lake
        self.docs = DocCache(con)  # those candidates' rows of minhash_docs
        self.rounds = 0  # propagation rounds of the last match, for tests and stats
        # The band rows of the last chunk matched, sorted by hash, for its add_chunk: sorting
        # them twice was a tenth of the driver's near-dedup work (issue 14).
        self._last_rows: tuple[pa.Table, tuple[Rows, npt.NDArray[np.int64]]] | None = None

    @classmethod
    def of_config(
        cls,
        con: duckdb.DuckDBPyConnection,
        cfg: Config,
        signatures: SignatureFiles,
        deciders: int | Shards = 0,
    ) -> NearDedupIndex:
        """The band index with the lake config's ``[near_dedup]`` settings, its tables made
        (``deciders``: as ``__init__`` takes them; a write session's, ``[ingest] deciders``)."""
        index = cls(con, cfg.near_dedup, signatures, deciders, cfg.ingest.heartbeat_timeout)
        index.create_schema()
        return index

    @property
    def reads_band_files(self) -> bool:
        """Decider processes hold the band index and read a chunk's band file themselves
        (its lake and in-chunk candidates): a chunk matched with its worker's bands file
        (``match_chunk``'s ``bands``) needs only empty band lists, one per document with
        tokens (``ingest.staging.read_keys``)."""
        return isinstance(self.cache.holder, RemoteHolder)

    @property
    def min_matches(self) -> int:
        """Equal signature positions a verified pair needs: ceil(threshold * num_perm)."""
        return math.ceil(self.cfg.threshold * self.cfg.num_perm - 1e-9)

    @property
    def near_params(self) -> dict[str, int]:
        """The parameters of the SQL test ``nd_near``: ``min_matches`` equal signature positions,
        or, with ``verify_on = "shingles"``, the threshold as ``num / den`` (``num = 0`` picks the
        signature test)."""
        num, den = 0, 1
        if self.cfg.verify_on == "shingles":
            num, den = minhash.threshold_fraction(self.cfg.threshold)
        return {"min_matches": self.min_matches, "num": num, "den": den}

    def create_schema(self) -> None:
        """Create the index tables, or check that an existing index was built with this config."""
        _install_common_shingles(self.con)
        for name in (
            "dedup.create_macros",
            "dedup.create_near_macro",
            "dedup.create_docs",
            "dedup.create_meta",
        ):
            self.con.execute(engine.q(name))
        rows = self.con.execute(engine.q("dedup.get_meta"), {"key": "fingerprint"}).fetchall()
        row = rows[0] if rows else None
        fp = minhash.fingerprint(self.cfg)
        links = self.con.execute(engine.q("dedup.get_meta"), {"key": "link"}).fetchall()
        if row is not None and row[0] != fp:
            raise LakeError(
                f"the lake's near-dedup index was built with MinHash settings {row[0]}, the config "
                f"now gives {fp} (num_perm, ngram, seed, unit, bands or rows changed, or another "
                "Python Unicode version): restore the old [near_dedup] settings, or rebuild the "
                "index with a full re-ingest"
            )
        # An index made before the rule was recorded used the only rule there was: "any".
        stored = links[0][0] if links else ("any" if row is not None else None)
        if stored is None:
            # The rule before the fingerprint: a fingerprint alone means a lake from before the
            # rule was recorded ("any"), so a kill between the two once left a new lake that
            # refused its own config on the next run (found by the chaos test).
            self.con.execute(engine.q("dedup.put_meta"), {"key": "link", "value": self.link})
            faults.hit("near_meta", "link")
        elif stored != self.link:
            raise LakeError(
                f'the lake\'s near-dedup index was built with [near_dedup].link = "{stored}", '
                f'the config now gives "{self.link}": the clusters of one rule cannot be extended '
                f'with the other. Restore link = "{stored}", or use a new lake for the new rule'
            )
        if row is None:
            self.con.execute(engine.q("dedup.put_meta"), {"key": "fingerprint", "value": fp})
        # Layouts before kept what is now in files in the database: move it out once (a kill
        # before the drop leaves it in, and the next open writes the same files again).
        self._move_out(
            "signature_column", "old_signature_seqs", "old_signatures_of_seq", self.signatures
        )
        self._move_out("bands_table", "indexed_seqs", "old_bands_of_seq", self.bands)

    def _move_out(self, what: str, seqs: str, rows_of_seq: str, files: SignatureFiles) -> None:
        """Write a part of the index the database held (``what``) to its files, one per commit
        seq, then drop it: the signatures, once a column of ``minhash_docs`` (about half of
        ``state.duckdb``), and the band rows, once the table ``minhash_bands`` (17 bytes per
        band: most of the state file and of the driver's writes)."""
        ((has,),) = self.con.execute(engine.q(f"dedup.has_{what}")).fetchall()
        if not has:
            return
        for (seq,) in self.con.execute(engine.q(f"dedup.{seqs}")).fetchall():
            rows = self.con.sql(engine.q(f"dedup.{rows_of_seq}"), params={"seq": seq})
            files.write(rows.to_arrow_table())
        self.con.execute(engine.q(f"dedup.drop_{what}"))

    def _register(self, docs: pa.Table) -> tuple[int, int]:
        docs = _typed(docs)
        self.con.register("nd_chunk", docs)
        if docs.num_rows == 0:
            return 0, -1
        seqs = docs["doc_seq"].to_numpy()
        return int(seqs.min()), int(seqs.max())

    def match_chunk(
        self, docs: pa.Table, sets: ChunkSets | None = None, bands: ChunkSets | None = None
    ) -> pa.Table:
        """Decide a chunk: ``match_chunks`` of a run of one."""
        return self.match_chunks(
            docs, [] if sets is None else [sets], [] if bands is None else [bands]
        )

    def match_chunks(
        self, docs: pa.Table, sets: Sequence[ChunkSets] = (), bands: Sequence[ChunkSets] = ()
    ) -> pa.Table:
        """Decide a run of consecutive chunks as one: (doc_seq, doc_id, cluster_id, dup_of) per
        row, ordered by doc_seq. A document's decision depends only on the documents before it
        (module docstring), so this equals matching and adding the chunks one by one, at one
        set of statements for the run (they were most of a small chunk's decision).

        ``docs`` follows :data:`CHUNK_SCHEMA`; every doc_seq must exceed those already indexed
        (rows of these chunks already in the index, from an interrupted earlier attempt, are
        ignored). ``cluster_id`` is the doc_seq of the cluster's kept document (its own for a
        kept one, NULL without tokens); ``dup_of`` is that document's id when it is another one.
        ``sets``: each chunk's sets (default: ``docs["signature"]``), of which only those of
        the documents in a candidate pair are read; ``bands``: each chunk's worker's bands
        file, which decider processes read themselves (``store.band_shards``). Add the chunks
        afterwards with ``add_run`` (this same ``docs`` table: its band rows are reused).
        """
        lo, _hi = self._register(docs)
        sources = []
        if docs.num_rows and bands and all(b.file is not None for b in bands):
            sources = [BandSource(b.seq, b.file.path.uri) for b in bands if b.file is not None]
        kept = self.link == "kept"
        try:
            params = {"chunk_min": lo}
            self.con.execute(engine.q("dedup.chunk_bands"))
            src, dst = self.cache.candidates(
                *self._rows_of(docs)[0], below=lo, ordered=True, sources=sources
            )
            self.con.register("nd_old_cand", pa.table({"src": src, "dst": dst}))
            self.con.register("nd_lake_docs", self.docs.lake_docs(dst))
            # With decider processes, the chunk's own pairs are theirs (``docs`` may then hold
            # empty band lists: the driver did not read them, see ``reads_band_files``).
            new_src, new_dst = (
                self.cache.chunk_pairs(sources)
                if sources and self.reads_band_files
                else (src[:0], dst[:0])
            )
            self.con.register("nd_new_cand", pa.table({"src": new_src, "dst": new_dst}))
            self.con.execute(engine.q("dedup.chunk_candidates"))
            # From here on only the documents in a candidate pair: any other is its own
            # cluster (``_with_alone``), and the statements' cost follows the candidates, not the
            # chunk's size.
            paired = self.con.sql(engine.q("dedup.chunk_paired")).fetchnumpy()["doc_seq"]
            if not len(paired):  # no pair at all: the statements below would say just that
                self.rounds = 0
                return _with_alone(RESULT_SCHEMA.empty_table(), docs).cast(RESULT_SCHEMA)
            in_pair = pc.is_in(docs["doc_seq"], pa.array(paired, pa.int64()))
            self.con.register("nd_chunk", _typed(docs).filter(in_pair))
            # With decider processes every pair is theirs to test, reading the sets themselves:
            # the driver reads none.
            tested = self._tested_by_deciders(sets) if kept else None
            self.con.register(
                "nd_chunk_sigs",
                self._chunk_signatures(docs, lo, sets)
                if tested is None
                else self.signatures.read([]),
            )
            if kept:
                self._settle_groups(tested)
            else:
                self.con.register("nd_old_sigs", self._old("old_signatures_needed"))
            if tested is not None:
                self._given(tested(self._pairs("chunk_pairs_asked")), "edges_given")
            else:
                self.con.execute(
                    engine.q("dedup.chunk_edges"),
                    {"verify": self.cfg.verify, "old_edges": not kept, **self.near_params},
                )
            if kept:
                self.con.execute(engine.q("dedup.init_labels_kept"))
                self.con.execute(engine.q("dedup.start_labels_kept"))
                self.con.execute(engine.q("dedup.kept_rounds_begin"))
            else:
                self.con.execute(engine.q("dedup.init_labels"))
            self.rounds = 0
            while True:
                self.rounds += 1
                if self.rounds > MAX_ROUNDS:
                    raise LakeError("near-dedup label propagation did not settle: report a bug")
                if kept:
                    self._kept_round(tested)
                else:
                    self.con.execute(engine.q("dedup.step_labels"))
                ((changed,),) = self.con.execute(engine.q("dedup.count_changed")).fetchall()
                if changed == 0:
                    break
                self.con.execute(engine.q("dedup.swap_labels"))
            result = self.con.sql(engine.q("dedup.chunk_result"), params=params).to_arrow_table()
            result = _with_alone(result, docs.filter(pc.invert(in_pair)))
        finally:
            self.con.unregister("nd_chunk")
            for name in (
                "nd_old_cand",
                "nd_new_cand",
                "nd_old_sigs",
                "nd_chunk_sigs",
                "nd_lake_docs",
            ):
                self.con.unregister(name)
        return result.cast(RESULT_SCHEMA)

    def _rows_of(self, docs: pa.Table) -> tuple[Rows, npt.NDArray[np.int64]]:
        """``_band_rows`` of a chunk table, once for its match and its add (the same table)."""
        if self._last_rows is None or self._last_rows[0] is not docs:
            self._last_rows = (docs, _band_rows(_typed(docs)))
        return self._last_rows[1]

    def _old(self, needed: str) -> pa.Table:
        """The signatures of the earlier documents the named query lists (none without
        verification)."""
        if not self.cfg.verify:
            return self.signatures.read([])
        return self.signatures.read(
            self.con.sql(engine.q(f"dedup.{needed}")).fetchnumpy()["doc_seq"]
        )

    def _settle_groups(self, tested: Tester | None = None) -> None:
        """Rule ``kept``: the chunk's (document, lake cluster) groups whose kept document the
        document is near (``dedup.kept_groups``), then the candidates that settle the rest:
        tested here on the kept documents' and the candidates' signatures (``nd_old_sigs``
        ends holding both), or by decider processes (``tested``), which read them."""
        self.con.execute(engine.q("dedup.kept_pairs"))
        self.con.execute(engine.q("dedup.kept_groups"))
        self.con.execute(engine.q("dedup.kept_group_pairs"))
        reps = self._test_asked(tested)
        self.con.execute(engine.q("dedup.kept_rep_check"))
        self.con.execute(engine.q("dedup.kept_edge_pairs"))
        self._test_asked(tested, reps)

    def _test_asked(self, tested: Tester | None, known: pa.Table | None = None) -> pa.Table:
        """Which of the pairs asked (``nd_asked``) are near, into ``nd_near_pairs``: here, on
        the signatures read (returned; ``nd_old_sigs`` holds them and ``known`` after, for
        the label rounds), or by decider processes (``tested``: none read)."""
        if tested is not None:
            self._given(tested(self._pairs("asked_pairs")))
            sigs = self.signatures.read([])
            self.con.register("nd_old_sigs", sigs)  # the label rounds read theirs later
            return sigs
        sigs = self._old("asked_needed")
        self.con.register("nd_old_sigs", sigs if known is None else pa.concat_tables([known, sigs]))
        self.con.execute(engine.q("dedup.asked_near"), self.near_params)
        return sigs

    def _kept_round(self, tested: Tester | None) -> None:
        """One label round of rule ``kept``: the (document, label) pairs no round tested yet
        are tested (here on the signatures the matching read, or by decider processes), then
        each document takes the smallest label whose kept document it is near."""
        self.con.execute(engine.q("dedup.kept_round_pairs"))
        self.con.execute(engine.q("dedup.kept_round_asked"))
        if tested is not None:
            self._given(tested(self._pairs("asked_pairs")))
        else:
            self.con.execute(engine.q("dedup.asked_near"), self.near_params)
        self.con.execute(engine.q("dedup.kept_round_tested"))
        self.con.execute(engine.q("dedup.step_labels_kept"))

    def _pairs(self, statement: str) -> tuple[I64, I64]:
        cols = self.con.sql(engine.q(f"dedup.{statement}")).fetchnumpy()
        return (
            np.asarray(cols["src"], dtype=np.int64),
            np.asarray(cols["dst"], dtype=np.int64),
        )

    def _given(self, near: tuple[I64, I64], statement: str = "asked_given") -> None:
        """The pairs decider processes found near (``nd_given``), into the table
        ``statement`` makes of them."""
        self.con.register("nd_given", pa.table({"src": near[0], "dst": near[1]}))
        try:
            self.con.execute(engine.q(f"dedup.{statement}"))
        finally:
            self.con.unregister("nd_given")

    def _tested_by_deciders(self, sets: Sequence[ChunkSets]) -> Tester | None:
        """What tests the run's pairs (with the lake's documents and its own) in decider
        processes, which read the sets themselves (the run's from its workers' sets files):
        None without deciders, without verification, or when the sets are in the driver's
        hands."""
        holder = self.cache.holder
        if not (self.reads_band_files and self.cfg.verify and isinstance(holder, Shards)):
            return None
        chunks = [(s.seq, s.file.path.uri) for s in sets if s.file is not None]
        if not chunks or len(chunks) != len(sets):
            return None
        params = self.near_params

        def tested(pairs: tuple[I64, I64]) -> tuple[I64, I64]:
            if not len(pairs[0]):
                return pairs
            near = self.cache.retried(lambda: holder.near(self.signatures, chunks, pairs, params))
            return pairs[0][near], pairs[1][near]

        return tested

    def _chunk_signatures(self, docs: pa.Table, lo: int, sets: Sequence[ChunkSets]) -> pa.Table:
        """The sets of the run's own documents that are in a candidate pair (``nd_cand``):
        all verification compares of the run here (a kept document a rule-``kept`` label
        names is in a pair too); none without verification."""
        if not self.cfg.verify:
            return self.signatures.read([])
        needed = self.con.sql(engine.q("dedup.chunk_signatures_needed")).fetchnumpy()["doc_seq"]
        if not sets:  # the signature column, keyed by doc_seq whichever chunk of the run
            return ChunkSets.of_docs(lo >> ROW_BITS, _typed(docs)).read(needed)
        of_seq = {s.seq: s for s in sets}
        parts = [of_seq[seq].read(mine) for seq, mine in by_chunk(needed)]
        return pa.concat_tables(parts) if parts else sets[0].read([])

    def add_chunk(
        self,
        docs: pa.Table,
        matched: pa.Table,
        sets: ChunkSets | None = None,
        bands: ChunkSets | None = None,
    ) -> None:
        """Index a decided chunk: ``add_run`` of a run of one."""
        self.add_run([docs], docs, matched, [sets] if sets else (), [bands] if bands else ())

    def add_run(
        self,
        chunks: Sequence[pa.Table],
        whole: pa.Table,
        matched: pa.Table,
        sets: Sequence[ChunkSets] = (),
        bands: Sequence[ChunkSets] = (),
    ) -> None:
        """Index a run of decided chunks (``chunks`` in commit order; ``whole``: them together,
        the table ``match_chunks`` decided; ``matched``: its result): the bands of all their
        documents with tokens, and their clusters. As indexing each chunk in turn, with one
        delete and one insert of the run's rows and one check of each cache (per chunk, those
        statements were most of a small chunk's indexing, issue 14).

        Dropped documents are indexed too: a later document that is near only to a dropped one
        joins that one's cluster, exactly as in one batch run over everything. Run it inside the
        caller's transaction (it issues plain statements, no BEGIN/COMMIT of its own).
        ``sets``, ``bands``: each chunk's sets and bands (default: its ``signature`` and
        ``bands`` columns), stored as its commit's signature and band files.
        """
        stored: list[BandSource] = []  # the band files stored below, for a remote holder
        # The files before the rows: no indexed document without its bands and signature.
        for i, docs in enumerate(chunks):
            typed = _typed(docs)
            seq = int(pc.min(typed["doc_seq"]).as_py()) >> ROW_BITS if typed.num_rows else 0
            if self.cfg.verify:
                (sets[i] if sets else ChunkSets.of_docs(seq, typed)).store(self.signatures)
            if typed.num_rows:
                (bands[i] if bands else ChunkSets.of_docs(seq, typed, "bands")).store(self.bands)
                stored.append(BandSource(seq))
        lo, hi = self._register(whole)
        self.con.register("nd_matched", matched)
        try:
            self.con.execute(engine.q("dedup.forget_docs_range"), {"lo": lo, "hi": hi})
            self.con.execute(engine.q("dedup.insert_docs"))
            indexed = matched.filter(pc.is_valid(matched["cluster_id"]))
            self.docs.add(
                np.asarray(indexed["doc_seq"].to_numpy(), dtype=np.int64),
                np.asarray(indexed["cluster_id"].to_numpy(), dtype=np.int64),
                indexed["doc_id"].combine_chunks(),
            )
            rows, seqs = self._rows_of(whole)  # the match's, when it is the same table
            self.cache.add(*rows, ordered=True, docs=seqs, sources=stored)
        finally:
            self.con.unregister("nd_chunk")
            self.con.unregister("nd_matched")

    def close(self) -> None:
        """Let go of the band cache's holder (stops its decider processes)."""
        self.cache.holder.close()

    def largest_clusters(self, limit: int = 10, samples: int = 5) -> pa.Table:
        """The biggest clusters: cluster_id, size, kept_id, sample_ids (a giant one means the
        threshold is too loose)."""
        return self.con.sql(
            engine.q("dedup.largest_clusters"), params={"limit": limit, "samples": samples}
        ).to_arrow_table()
