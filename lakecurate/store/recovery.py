"""Bring the state in line with the Delta log after a crash, one commit at a time.

The protocol (design section 6): each chunk's intent (COMMITTING, seq) is recorded in DuckDB
and, once the chunk is decided, its membership-index rows and near-dedup bands are written
ahead (the next chunk of the same group is decided against them); one Delta commit carries a
group of chunks, its app transaction the group's last seq; then one DuckDB transaction marks
them SUCCESS. The log is the linearisation point: ``reconcile`` finalises every open intent the
log has (seq <= watermark) with ``finalise`` and abandons the others, taking their index rows
out and deleting any data file their interrupted write left. ``finalise`` is the one way a
committed entry becomes state, its index rows and bands re-derived from the table, whichever
command finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import engine
from lakecurate.lake import atomic
from lakecurate.lake.delta import DeltaStore
from lakecurate.lake.record import CHUNK_KINDS, RESTORE, SUPERSEDE, CommitRecord
from lakecurate.lake.storage import Location
from lakecurate.schema import SIGNATURE_COLUMN
from lakecurate.steps.near.signatures import add_signatures
from lakecurate.store.band_index import NearDedupIndex, chunk_table_of
from lakecurate.store.index import MembershipIndex
from lakecurate.store.rebuild import resync
from lakecurate.store.state import FinishedChunk, StateStore
from lakecurate.types import ChunkResult

Writer = Callable[[], None]


def index_writer(
    index: MembershipIndex, rows: pa.Table, seq: int, bands: Writer | None = None
) -> Writer:
    """What indexes a decided chunk, called inside a state transaction: its content hashes
    (``content_rows``), its given ids, and (``bands``) its near-dedup bands."""
    kept = content_rows(rows)
    not_malformed = pc.invert(pc.fill_null(pc.starts_with(rows["reason"], "malformed:"), False))
    given = rows.filter(pc.and_(rows["id_given"], not_malformed)).select(["id"])

    def write() -> None:
        index.add(kept, given, seq)
        if bands is not None:
            bands()

    return write


def content_rows(rows: pa.Table) -> pa.Table:
    """(content_hash, id, chunk_key) the content index takes from a decided chunk: each kept
    document, and each near duplicate under the id of the kept document it is near.

    A later exact copy of a near duplicate is then an ``exact_dup`` of that kept document
    whichever chunk it lands in, as it is when the two copies share a chunk (issue 17, item 5);
    without the near duplicate in the index it went to near dedup and came out ``near_dup``.
    The first copy of a content is the only one indexed: a later one is an ``exact_dup``.
    """
    columns = ["content_hash", "id", "chunk_key"]
    kept = rows.filter(rows["kept"]).select(columns)
    near = pc.and_(pc.equal(rows["reason"], "near_dup"), pc.is_valid(rows["dup_of"]))
    if not pc.any(pc.fill_null(near, False)).as_py():
        return kept
    dups = rows.filter(near).select(["content_hash", "dup_of", "chunk_key"])
    return pa.concat_tables([kept, dups.rename_columns(columns).cast(kept.schema)])


def forget_written_ahead(state: StateStore, index: MembershipIndex, seq: int) -> Writer:
    """What takes out the index rows and bands commit ``seq`` wrote for its chunk ahead of its
    Delta commit (inside the caller's transaction)."""

    def forget() -> None:
        index.remove_commits([seq])
        forget_near(state, [seq])

    return forget


def forget_leaving(state: StateStore, index: MembershipIndex) -> Callable[[Sequence[str]], None]:
    """What takes chunks leaving the table (a supersede's ``keys``) and every chunk queued for a
    new decision out of the index and the band index, inside the caller's transaction:
    decisions made against them next would point at documents that are leaving, or at a
    chunk's own old copy. The one path both the supersede and its ``finalise`` after a crash
    take (a finalise that forgot only the index left the band rows behind, and the next
    ingest decided documents near duplicates of documents no longer in the lake)."""

    def forget(keys: Sequence[str]) -> None:
        seqs = state.commit_seqs(sorted({*keys, *state.redecide_queue()}))
        forget_near(state, seqs)
        index.remove_commits(seqs)

    return forget


def bands_of_committed(near: NearDedupIndex, rows: pa.Table, seq: int) -> Writer:
    """The band-index writer of a chunk already in the table: signatures recomputed from the
    committed text, decisions (cluster, dup_of) read back from the rows."""
    rows = rows.sort_by("source_line")
    table, positions = chunk_table_of(add_signatures(rows, near.cfg), seq)
    take = pa.array(positions)
    matched = pa.table(
        {
            "doc_seq": table["doc_seq"],
            "doc_id": table["doc_id"],
            "cluster_id": rows["cluster_id"].take(take),
            "dup_of": rows["dup_of"].take(take),
        }
    )
    return lambda: near.add_chunk(table, matched)


def index_missing_bands(state: StateStore, delta: DeltaStore, near: NearDedupIndex) -> str | None:
    """Add every committed chunk the band index lacks, from its committed text, in commit
    order; returns a note when it did. A state rebuilt from the log has no band index, and an
    ingest must never match against a partial one."""
    chunks = state.con.execute(engine.q("dedup.unindexed_chunks")).fetchall()
    if not chunks:
        return None
    table = delta.rows_of_chunks([key for key, _ in chunks])
    # Each chunk's rows as one slice of the table sorted by chunk (a filter per chunk read
    # the whole table once per chunk).
    table = table.sort_by("chunk_key")
    keys = table["chunk_key"].cast(pa.string()).to_numpy(zero_copy_only=False)
    indexed = 0
    for key, seq in chunks:
        lo, hi = np.searchsorted(keys, key, side="left"), np.searchsorted(keys, key, side="right")
        rows = table.slice(int(lo), int(hi - lo))
        writer = bands_of_committed(near, rows, int(seq))
        with state.transaction():
            writer()
        indexed += rows.num_rows > 0
    return f"added {indexed} committed chunk(s) to the near-dedup index" if indexed else None


CONTENT_RULE = ("content_index", "near_dups")
"""The state meta key and value of a content index that holds near duplicates too."""


def index_near_duplicates(state: StateStore, delta: DeltaStore) -> bool:
    """Index the near duplicates of a lake whose content index predates them (kept documents
    only, before issue 17), once; returns True when rows were added. They come in with their
    chunks' old seqs, so the caller must rebuild the Bloom tier (its files would miss them).
    Chunk by chunk the content rows are replaced by those ``content_rows`` makes, so a run cut
    short and run again, or a chunk indexed since, ends the same."""
    key, value = CONTENT_RULE
    if state.con.execute(engine.q("state.get_meta"), {"key": key}).fetchall() == [(value,)]:
        return False
    ds = delta.dataset()
    if ds is not None:
        near = ds.to_table(
            columns=["chunk_key"], filter=pc.field("reason").cast(pa.string()) == "near_dup"
        )
        keys = pc.unique(near["chunk_key"].cast(pa.string())).to_pylist()
        if keys:
            rows = content_rows(delta.rows_of_chunks(keys))
            with state.transaction():
                state.con.register("index_rows", rows)
                try:
                    seqd = state.con.sql(
                        engine.q("index.content_of_committed_chunks")
                    ).to_arrow_table()
                finally:
                    state.con.unregister("index_rows")
                index = MembershipIndex(state.con)
                index.files.forget(state.commit_seqs(keys), "content")
                index.add_content(seqd)
                state.put_meta(key, value)
            return True
    state.put_meta(key, value)
    return False


def chunks_missing_bands(state: StateStore, rows: pa.Table, near: NearDedupIndex) -> list[str]:
    """Committed chunks with a document that has a signature but no band-index row (``rows``:
    the table's id, chunk_key, reason, text and source_line columns)."""
    missing = []
    chunk = rows["chunk_key"].cast(pa.string())
    for key, _seq in state.con.execute(engine.q("dedup.unindexed_chunks")).fetchall():
        signed = add_signatures(rows.filter(pc.equal(chunk, key)), near.cfg)[SIGNATURE_COLUMN]
        if pc.any(pc.is_valid(signed)).as_py():
            missing.append(key)
    return missing


def forget_near(state: StateStore, seqs: Sequence[int]) -> None:
    """Drop the band-index rows of these commits, whether or not this command runs near dedup
    (a `compact` finalising a crashed supersede must not leave them behind)."""
    if seqs and state.con.execute(engine.q("state.has_near_index")).fetchall()[0][0]:
        state.con.execute(engine.q("dedup.forget_docs_seqs"), {"seqs": list(seqs)})


def finalise(
    state: StateStore,
    delta: DeltaStore,
    index: MembershipIndex,
    near: NearDedupIndex | None,
    seq: int,
    kind: str,
    keys: list[str],
    run_id: str,
) -> None:
    """Complete the state of a commit the Delta log has, from what the log and table hold."""
    entry = delta.find_commit(seq)
    version = int(entry["version"]) if entry else delta.version()
    if kind == SUPERSEDE:
        state.finish_supersede(seq, keys, version, 0, run_id, forget_leaving(state, index))
        return
    if kind == RESTORE:
        finish_restore(state, delta, seq, version)
        return
    (key,) = keys  # an APPEND, or a REDECIDE (the rows it wrote are the chunk's rows now)
    rows = delta.rows_of_chunks([key])
    chunk = CommitRecord.parse(entry).chunk(seq) if entry else None
    record = (chunk.result if chunk else None) or {}
    kept = int(pc.sum(rows["kept"]).as_py() or 0)
    malformed = int(record.get("rows_malformed", 0))
    result = ChunkResult(
        chunk_key=key,
        staged_path="",
        input_sha256="",
        config_hash="",
        rows_in=rows.num_rows,
        rows_kept=kept,
        rows_dropped=rows.num_rows - kept - malformed,
        rows_malformed=malformed,
        blank_lines=0,
        worker=str(record.get("worker", "")),
        gate_violations=list(record.get("gate_violations", [])),
        redactions=dict(record.get("redactions", {})),
    )
    funnel = [tuple(s) for s in record.get("funnel", [])]
    bands = bands_of_committed(near, rows, seq) if near is not None else None
    forget = forget_written_ahead(state, index, seq)
    add = index_writer(index, rows, seq, bands)

    def reindex() -> None:  # what was written ahead (if anything), then from the table
        forget()
        add()

    state.finish_chunks(version, run_id, [FinishedChunk(seq, result, kept, funnel)], reindex)


def finish_restore(state: StateStore, delta: DeltaStore, seq: int, version: int) -> None:
    """The state after a RESTORE commit: re-derived from the restored table."""
    resync(state, delta)
    state.finish_commit(seq, version)


def reconcile(
    state: StateStore,
    delta: DeltaStore,
    index: MembershipIndex,
    near: NearDedupIndex | None,
    staging_dir: Location,
    run_id: str,
) -> list[str]:
    """Finish or abandon every open intent, then clean the staging folder and the index's
    unregistered key files; returns notes."""
    notes: list[str] = []
    watermark = delta.watermark()
    for seq, kind, keys, intent_ns, _version_before in state.open_intents():
        if seq <= watermark:
            finalise(state, delta, index, near, seq, kind, keys, run_id)
            notes.append(f"finalised commit {seq} ({kind} {', '.join(keys)}) found in Delta")
        else:
            removed = delta.remove_unreferenced(intent_ns)
            forget = forget_written_ahead(state, index, seq) if kind in CHUNK_KINDS else None
            state.abandon_intent(seq, kind, keys, run_id, forget)
            notes.append(
                f"commit {seq} ({kind}) never reached Delta; will redo it"
                + (f"; removed {removed} orphan data file(s)" if removed else "")
            )
    temps = [
        staging_dir / e.rel for e in staging_dir.files(recursive=False) if atomic.is_temp(e.rel)
    ]
    for path in temps + committed_staged_files(staging_dir, state):
        path.delete()
    index.files.sweep()  # key files of abandoned intents and forgotten commits
    return notes


def committed_staged_files(staging_dir: Location, state: StateStore) -> list[Location]:
    """Staged files of chunks already committed: nothing needs them any more (those of
    pending chunks are what a resumed run commits without redoing the work)."""
    done = {r[0] for r in state.con.execute(engine.q("state.success_keys")).fetchall()}
    return [
        staging_dir / e.rel
        for e in staging_dir.files(recursive=False)
        if not atomic.is_temp(e.rel) and e.rel.split(".", 1)[0] in done
    ]
