"""The worker: pure functions from one chunk to files and a small result.

``process_chunk`` reads only its chunk and writes only ``staging/<chunk_key>.<config_hash>.parquet``
(through ``staging.write_atomic_parquet``) and, with near-dedup verification on, its sets file
beside it (``lake.sets``: what verification compares, kept apart so the driver reads only the
candidates' of it). ``finalise_chunk`` applies the driver's verdicts to
that staged file and writes the chunk's data files into the table folder, under names its
commit seq makes unique, for the driver to commit. Neither touches DuckDB state or the Delta
log, so both run in any process, on any machine, any number of times. Only the executor
imports this module.
"""

from __future__ import annotations

import json
import os
import socket
import time
import tomllib
import traceback
from dataclasses import asdict
from functools import cache
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import config as configuration
from lakecurate import engine, faults, memory
from lakecurate.config import Config
from lakecurate.ingest.cutting import plan_file
from lakecurate.ingest.reader import read_chunk
from lakecurate.ingest.staging import (
    BANDS_KEY,
    RESULT_KEY,
    SETS_KEY,
    apply_patch,
    count_true,
    iter_staged,
    read_patch,
    staged_name,
    without_rejected_text,
    write_atomic_parquet,
)
from lakecurate.lake.files import write_data_files
from lakecurate.lake.sets import BANDS_SUFFIX
from lakecurate.lake.sets import beside as sets_file
from lakecurate.lake.sets import write as write_sets
from lakecurate.lake.storage import Location
from lakecurate.schema import BANDS_COLUMN, DOCUMENT_SCHEMA, PARTITION_COLUMN
from lakecurate.steps.filters import pipeline as filters
from lakecurate.steps.near.signatures import add_signatures, split_sets
from lakecurate.types import (
    ChunkResult,
    ChunkSpec,
    DataFile,
    FinaliseOrder,
    PlanOrder,
    TaskOrder,
    WorkOrder,
)


class ChunkProgress:
    """How far this worker process is into its chunk, for its heartbeat (``fraction``): a
    share per phase, and inside the SQL of filters and dedup, DuckDB's own query progress."""

    # The phases' shares of a chunk's time (measured on the default and fineweb pipelines:
    # the SQL of filters and dedup dominates; reading and signatures share the rest).
    READ, DECIDE, SIGN = 0.15, 0.65, 0.15

    def __init__(self) -> None:
        self.start(0.0)

    def start(self, at: float, con: duckdb.DuckDBPyConnection | None = None) -> None:
        """A phase begins at ``at`` of the chunk; ``con``: a query to follow inside it."""
        self.at, self.con = at, con

    def fraction(self) -> float:
        if self.con is None:
            return self.at
        try:
            done = max(self.con.query_progress(), 0.0) / 100
        except duckdb.Error:  # between queries, or closed under us
            done = 0.0
        return self.at + self.DECIDE * min(done, 1.0)


progress = ChunkProgress()
"""This process's chunk progress (one chunk at a time per worker process)."""


@cache
def _config_from_text(text: str) -> Config:
    return configuration.from_dict(tomllib.loads(text))


def pipeline_config(order: WorkOrder) -> Config:
    """The decision config of a work order (its TOML text; empty: the default pipeline)."""
    return _config_from_text(order.decisions) if order.decisions else Config()


def process_chunk(spec: ChunkSpec, order: WorkOrder) -> ChunkResult:
    """Parse, normalise, filter, hash and dedup one chunk; stage it; return its counts."""
    (result,) = process_chunks([spec], order)
    assert isinstance(result, ChunkResult)  # alone, a chunk's failure is raised
    return result


def process_chunks(specs: list[ChunkSpec], order: WorkOrder) -> list[ChunkResult | Exception]:
    """Process several chunks as one task (a *bundle* of small ones, issue 14): one filter
    query over all their records, then each chunk staged on its own, exactly as alone. The
    query's fixed cost (binding the pipeline's statement and compiling its regular
    expressions: ~190 ms with the default preset on no rows at all) was most of a small
    chunk's time. Every step of the query is row by row, so a chunk's rows come out the same
    whatever shares its query. A chunk that fails on its own (reading it, its gates, staging
    it) comes back as its error in its place (``noted``) and the others go on; alone, its
    error is raised. ``seconds`` of a result: the task's time up to its staging."""
    started = time.perf_counter()
    cfg = pipeline_config(order)
    pipeline = filters.build(cfg.filters)
    progress.start(0.0)
    out: list[ChunkResult | Exception | None] = [None] * len(specs)
    tables: list[pa.Table] = []
    read: list[tuple[int, int]] = []  # (index in specs, blank lines) of the chunks read
    for n, spec in enumerate(specs):
        try:
            faults.hit("worker", spec.chunk_key)
            recs = read_chunk(spec, cfg.ingest.max_compressed_chunk_bytes, cfg.input)
        except Exception as exc:
            if len(specs) == 1:
                raise
            out[n] = noted(exc)
            continue
        table = recs.table()
        chunk_no = pa.array(np.full(table.num_rows, len(read) + 1, dtype=np.int32))
        tables.append(table.append_column("chunk_no", chunk_no))
        read.append((n, recs.blank_lines))
        del recs, table  # freed once decided: a chunk's text is held about twice at most
    if read:
        records = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        del tables
        decided = _decide(records, pipeline, [specs[n] for n, _ in read], order, cfg)
        del records
        chunk_no = decided["chunk_no"].to_numpy()
        assert (np.diff(chunk_no) >= 0).all(), "the worker's query reordered its chunks' rows"
        ends = np.searchsorted(chunk_no, np.arange(1, len(read) + 1), "right")
        starts = [0, *ends[:-1]]
        rows = [
            decided.slice(a, b - a).drop_columns(["chunk_no"])
            for a, b in zip(starts, ends, strict=True)
        ]
        del decided  # each chunk's rows are dropped once it is staged (popped, not kept here)
        for i, (n, blanks) in enumerate(read):
            try:
                out[n] = _stage(specs[n], order, cfg, pipeline, rows.pop(0), blanks, started)
            except Exception as exc:
                if len(specs) == 1:
                    raise
                out[n] = noted(exc)
            progress.start(
                ChunkProgress.READ + ChunkProgress.DECIDE + ChunkProgress.SIGN * (i + 1) / len(read)
            )
    done = [r for r in out if r is not None]
    assert len(done) == len(specs), "a chunk of the task has neither a result nor an error"
    return done


def noted(exc: Exception) -> Exception:
    """A chunk's or an input's own failure, to be returned in its place by a task of several:
    with the worker's traceback as a note (a returned exception travels without one)."""
    exc.add_note("In the worker:\n" + "".join(traceback.format_exception(exc)).rstrip())
    return exc


def _decide(
    records: pa.Table,
    pipeline: filters.Pipeline,
    specs: list[ChunkSpec],
    order: WorkOrder,
    cfg: Config,
) -> pa.Table:
    """The worker's one query over the records of ``specs`` (``chunk_no``: which, from 1; its
    rows come out in the records' order, so a chunk's are contiguous)."""
    con = engine.cursor(
        threads=1, track_progress=True, setup=filters.install if cfg.filters.steps else None
    )
    progress.start(ChunkProgress.READ, con)
    try:
        con.register("records", records)
        query = (
            f"WITH normalised AS ({engine.q('worker.normalise')}), {pipeline.sql} "
            f"SELECT * FROM ({engine.q('worker.decide')})"
        )
        decided = con.sql(
            query,
            params={
                **pipeline.params,
                "chunk_keys": [s.chunk_key for s in specs],
                "source_paths": [s.source_path for s in specs],
                "input_sha256s": [s.input_sha256 for s in specs],
                "run_id": order.run_id,
                "config_hash": order.config_hash,
            },
        ).to_arrow_table()
        con.unregister("records")
    finally:
        progress.start(ChunkProgress.READ + ChunkProgress.DECIDE)
        con.close()
    return decided


def _stage(
    spec: ChunkSpec,
    order: WorkOrder,
    cfg: Config,
    pipeline: filters.Pipeline,
    decided: pa.Table,
    blank_lines: int,
    started: float,
) -> ChunkResult:
    """One chunk's decided rows: its exact duplicates within it, its funnel and gates, its
    signatures, and its staged file."""
    if order.exact_dedup and repeats_content(decided):
        con = engine.cursor(threads=1)
        try:
            con.register("decided", decided)
            dups = con.sql(engine.q("worker.exact_dups")).to_arrow_table()
        finally:
            con.close()
        decided = mark_exact_dups(decided, dups)
    steps = filters.funnel(pipeline, decided)
    dropped_by_filters = sum(d for _, _, d in steps)
    parse, (_, empty_in, empty), (_, dup_in, dups) = chunk_funnel(decided)
    funnel = [
        parse,
        *steps,
        ("filter:empty", empty_in - dropped_by_filters, empty),
        ("exact_dup:chunk", dup_in - dropped_by_filters, dups),
    ]
    violations = filters.check_gates(cfg.gates, steps)
    filters.enforce_gates(cfg.gates, violations, spec.chunk_key)
    redactions = filters.redactions(pipeline, decided)
    decided = decided.select(DOCUMENT_SCHEMA.names).cast(DOCUMENT_SCHEMA)
    if decided.nbytes >= memory.LARGE_BYTES:
        memory.release()  # the records, the query's buffers, the columns before the cast
    if cfg.near_dedup.enabled:
        decided = add_signatures(decided, cfg.near_dedup)
    kept = int(pc.sum(decided["kept"]).as_py() or 0)
    malformed = funnel[0][2]
    path = Location(order.staging_dir) / staged_name(spec.chunk_key, order.config_hash)
    result = ChunkResult(
        chunk_key=spec.chunk_key,
        staged_path=path.uri,
        input_sha256=spec.input_sha256,
        config_hash=order.config_hash,
        rows_in=decided.num_rows,
        rows_kept=kept,
        rows_dropped=decided.num_rows - kept - malformed,
        rows_malformed=malformed,
        blank_lines=blank_lines,
        filter_stats=funnel,
        worker=f"{socket.gethostname()}:{os.getpid()}",
        redactions=redactions,
        gate_violations=violations,
    )
    result.seconds = time.perf_counter() - started
    meta = {RESULT_KEY: json.dumps(asdict(result)).encode()}
    if cfg.near_dedup.enabled:  # written first: the staged file seals them by their digests
        decided, chunk_sets = split_sets(decided)
        if cfg.near_dedup.verify:
            meta[SETS_KEY] = write_sets(chunk_sets, sets_file(path.uri)).encode()
        del chunk_sets
        decided, chunk_bands = split_sets(decided, BANDS_COLUMN)
        meta[BANDS_KEY] = write_sets(chunk_bands, sets_file(path.uri, BANDS_SUFFIX)).encode()
    write_atomic_parquet(decided.replace_schema_metadata(meta), path)
    return result


def repeats_content(decided: pa.Table) -> bool:
    """Whether two kept documents of the chunk may share a content hash: only then is the
    chunk's exact dedup asked of DuckDB (a query costs more than a small chunk's counting)."""
    hashes = pc.filter(decided["content_hash"], decided["kept"])
    return bool(pc.count_distinct(hashes, mode="all").as_py() < len(hashes))


def chunk_funnel(decided: pa.Table) -> list[tuple[str, int, int]]:
    """The worker's own steps (parse, the empty-text filter, exact dedup within the chunk)
    as (step, docs_in, docs_dropped), counted with Arrow kernels over the decided rows."""
    reason = decided["reason"]
    n = decided.num_rows
    malformed = count_true(pc.starts_with(reason, "malformed:"))
    empty = count_true(pc.equal(reason, "filter:empty"))
    dups = count_true(pc.equal(reason, "exact_dup"))
    return [
        ("parse", n, malformed),
        ("filter:empty", n - malformed, empty),
        ("exact_dup:chunk", n - malformed - empty, dups),
    ]


def mark_exact_dups(decided: pa.Table, dups: pa.Table) -> pa.Table:
    """``decided`` with the rows ``worker.exact_dups`` found (by source line, unique in a
    chunk) made exact duplicates of their first copy: not kept, reason ``exact_dup``,
    ``dup_of`` that copy's id. The decision is the SQL's; this only writes it in."""
    if dups.num_rows == 0:
        return decided
    lines = decided["source_line"].to_numpy()
    by_line = np.argsort(lines, kind="stable")
    wanted = dups["source_line"].to_numpy()
    rows = by_line[np.searchsorted(lines, wanted, sorter=by_line)]
    assert np.array_equal(lines[rows], wanted), "exact_dups named a line the chunk lacks"
    where = np.full(decided.num_rows, -1, dtype=np.int64)
    where[rows] = np.arange(len(rows))
    hit = pa.array(where >= 0)
    columns = {
        "kept": pc.and_(decided["kept"], pc.invert(hit)),
        "reason": pc.if_else(hit, pa.scalar("exact_dup"), decided["reason"]),
        "dup_of": dups["first_id"].take(pa.array(where, mask=where < 0)),
    }
    for name, column in columns.items():
        i = decided.schema.get_field_index(name)
        decided = decided.set_column(i, name, column.cast(decided.schema.field(name).type))
    return decided


def finalise_chunk(order: FinaliseOrder) -> list[DataFile]:
    """Write a decided chunk's data files: its staged rows with the driver's verdicts (and
    without the text of filtered-out documents, if the config says so). Run
    again after a failure, it overwrites what the failed attempt left (the names depend only
    on the order and the partition)."""
    faults.hit("delta_write", order.chunk_key)  # tests: ENOSPC, a kill while writing
    changes = read_patch(order.patch)
    # The table's columns only: the near-dedup lists were the driver's (as large as a third
    # of the text with shingle sets). A row group at a time: a chunk is never held whole.
    pieces = (
        without_rejected_text(
            apply_patch(rows, changes, offset).cast(DOCUMENT_SCHEMA), order.rejected_text
        )
        for offset, rows in iter_staged(order.staged_path, DOCUMENT_SCHEMA.names)
    )
    return write_data_files(Location(order.table_dir), pieces, PARTITION_COLUMN, order.name)


def plan_input(order: PlanOrder) -> tuple[str, list[ChunkSpec]]:
    """Read and cut one input (its source sha256 and chunks): the planning the driver does not
    do, so that it only lists and stats inputs (issue 14)."""
    faults.hit("plan", order.path)
    return plan_file(order.path, order.format, order.chunk_size)


def plan_inputs(orders: list[PlanOrder]) -> list[tuple[str, list[ChunkSpec]] | Exception]:
    """Plan several inputs (small files, many to a task): each one's cut, or the error that
    input alone met (one unreadable file is not its neighbours' failure)."""
    out: list[tuple[str, list[ChunkSpec]] | Exception] = []
    for order in orders:
        try:
            out.append(plan_input(order))
        except Exception as exc:  # returned: the driver decides what it means
            out.append(noted(exc))
    return out


def run_order(order: TaskOrder, specs: list[ChunkSpec] | None) -> Any:
    """The one entry point every executor ships: the processing of chunks (``specs``, one or
    a bundle, with their ``WorkOrder``: a list of results), a chunk's finalise, or the
    planning of inputs (a list of ``PlanOrder``: a list of cuts or errors)."""
    if isinstance(order, FinaliseOrder):
        return finalise_chunk(order)
    if isinstance(order, list):
        return plan_inputs(order)
    assert specs
    return process_chunks(specs, order)
