"""The worker: a pure function from one chunk to one staged Parquet file and a small result.

It reads only its chunk, writes only ``staging/<chunk_key>.<config_hash>.parquet`` (through a temp
file, fsync and an atomic rename), and touches neither DuckDB state nor Delta, so it can run in
any process, on any machine, any number of times.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
import tomllib
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate import config as configuration
from lakecurate import engine, faults, filters
from lakecurate.config import Config
from lakecurate.dedup import lsh
from lakecurate.dedup.minhash import MinHashConfig
from lakecurate.errors import ConfigError, PermanentChunkError
from lakecurate.io import read_chunk
from lakecurate.types import DOCUMENT_SCHEMA, ChunkResult, ChunkSpec, WorkOrder

RESULT_KEY = b"lakecurate.result"
SIGNATURE_COLUMN = "nd_signature"  # staged-only columns for near dedup
BANDS_COLUMN = "nd_bands"
NEAR_DEDUP_REASONS = ("exact_dup", "duplicate_id", "near_dup")


def staged_name(chunk_key: str, config_hash: str) -> str:
    """The staged file of a chunk under one config; the name says what it holds."""
    return f"{chunk_key}.{config_hash}.parquet"


def write_atomic_parquet(table: pa.Table, path: Path) -> None:
    """Write, seal with a checksum, fsync and rename, so a reader never sees a partial file
    and a file damaged later (a bit flip, a truncation) is found by ``read_staged_result``."""
    tmp = path.with_name(f"{path.name}.tmp_{os.getpid()}_{time.time_ns()}")
    try:
        with pq.ParquetWriter(tmp, table.schema, compression="zstd") as writer:
            writer.write_table(table)
            writer.add_key_value_metadata({CHECKSUM_KEY: _CHECKSUM_HOLE})
        _seal(tmp)
        faults.hit("staged_write", path.name)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@cache
def _config_from_text(text: str) -> Config:
    return configuration.from_dict(tomllib.loads(text))


def pipeline_config(order: WorkOrder) -> Config:
    """The decision config of a work order: its own text, else the lake's lakecurate.toml."""
    if order.decisions:
        return _config_from_text(order.decisions)
    path = Path(order.staging_dir).parent / "lakecurate.toml"
    if not path.exists():
        return Config()
    cfg = _config_from_text(path.read_text(encoding="utf-8"))
    if cfg.hash != order.config_hash:
        raise PermanentChunkError(
            f"{path} has config hash {cfg.hash} but this work order is for {order.config_hash}: "
            "the lake's config changed during the run; re-run ingest")
    return cfg


def minhash_config(cfg: Config) -> MinHashConfig:
    """The MinHash settings of a pipeline config (ranges checked here, named in the error)."""
    try:
        return MinHashConfig(**cfg.near_dedup.minhash_params())  # type: ignore[arg-type]
    except ValueError as exc:
        raise ConfigError(f"[near_dedup]: {exc}") from exc


def near_dedup_candidates(rows: pa.Table) -> pa.Array:
    """Rows that take part in near dedup: everything that passed the filters."""
    reason = rows["reason"]
    return pc.or_(pc.is_null(reason), pc.is_in(reason, pa.array(NEAR_DEDUP_REASONS)))


def add_signatures(rows: pa.Table, mh: MinHashConfig) -> pa.Table:
    """Append the MinHash signature and band hashes of every candidate row (NULL elsewhere).

    The driver matches them against the lake's band index; they never reach the Delta table.
    """
    candidate = near_dedup_candidates(rows).to_numpy(zero_copy_only=False)
    positions = np.flatnonzero(candidate)
    texts = rows["text"].take(pa.array(positions)).to_pylist()
    sig, bands = lsh.chunk_signatures([t or "" for t in texts], mh)
    full_sig = pa.array([None] * rows.num_rows, sig.type)
    full_bands = pa.array([None] * rows.num_rows, bands.type)
    if len(positions):
        index = np.full(rows.num_rows, -1, dtype=np.int64)
        index[positions] = np.arange(len(positions))
        take = pa.array(index, mask=index < 0)
        full_sig, full_bands = sig.take(take), bands.take(take)
    return rows.append_column(SIGNATURE_COLUMN, full_sig).append_column(BANDS_COLUMN,
                                                                        full_bands)


def process_chunk(spec: ChunkSpec, order: WorkOrder) -> ChunkResult:
    """Parse, normalise, filter, hash and dedup one chunk; stage it; return its counts."""
    started = time.perf_counter()
    faults.hit("worker", spec.chunk_key)
    cfg = pipeline_config(order)
    pipeline = filters.build(cfg.filters)
    recs = read_chunk(spec, cfg.ingest.max_compressed_chunk_bytes)
    con = engine.connect(threads=1)
    try:
        if cfg.filters.steps:
            filters.install(con)
        con.register("records", recs.table())
        query = (f"WITH normalised AS ({engine.q('worker.normalise')}), {pipeline.sql} "
                 f"SELECT * FROM ({engine.q('worker.decide')})")
        decided = con.sql(query, params={
            **pipeline.params,
            "exact": order.exact_dedup, "chunk_key": spec.chunk_key,
            "source_path": spec.source_path, "input_sha256": spec.input_sha256,
            "run_id": order.run_id, "config_hash": order.config_hash,
        }).to_arrow_table()
        con.register("decided", decided)
        base = [tuple(r) for r in con.execute(engine.q("worker.funnel")).fetchall()]
    finally:
        con.close()
    steps = filters.funnel(pipeline, decided)
    dropped_by_filters = sum(d for _, _, d in steps)
    parse, (_, empty_in, empty), (_, dup_in, dups) = base
    funnel = [parse, *steps, ("filter:empty", empty_in - dropped_by_filters, empty),
              ("exact_dup:chunk", dup_in - dropped_by_filters, dups)]
    violations = filters.check_gates(cfg.gates, steps)
    filters.enforce_gates(cfg.gates, violations, spec.chunk_key)
    redactions = filters.redactions(pipeline, decided)
    decided = decided.select(DOCUMENT_SCHEMA.names).cast(DOCUMENT_SCHEMA)
    if cfg.near_dedup.enabled:
        decided = add_signatures(decided, minhash_config(cfg))
    kept = int(pc.sum(decided["kept"]).as_py() or 0)
    malformed = funnel[0][2]
    path = Path(order.staging_dir) / staged_name(spec.chunk_key, order.config_hash)
    result = ChunkResult(
        chunk_key=spec.chunk_key, staged_path=str(path), input_sha256=spec.input_sha256,
        config_hash=order.config_hash, rows_in=decided.num_rows, rows_kept=kept,
        rows_dropped=decided.num_rows - kept - malformed, rows_malformed=malformed,
        blank_lines=recs.blank_lines, filter_stats=funnel,  # type: ignore[arg-type]
        worker=f"{socket.gethostname()}:{os.getpid()}",
        redactions=redactions, gate_violations=violations,
    )
    result.seconds = time.perf_counter() - started
    meta = {RESULT_KEY: json.dumps(asdict(result)).encode()}
    write_atomic_parquet(decided.replace_schema_metadata(meta), path)
    return result


def read_staged_result(path: Path) -> ChunkResult | None:
    """The result stored in a staged file, or None if the file is absent, not ours, or fails
    its checksum. A damaged file (or one from before checksums) is deleted: the caller redoes
    the chunk instead of committing what the file now says."""
    try:
        md = pq.read_metadata(path).metadata or {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, pa.ArrowException):  # a torn or garbled footer
        _discard(path)
        return None
    if RESULT_KEY not in md:
        return None  # not a staged file of ours: leave it alone
    try:
        sealed = _sealed(path, md.get(CHECKSUM_KEY))
        data = json.loads(md[RESULT_KEY])
        data["filter_stats"] = [tuple(x) for x in data["filter_stats"]]
        result = ChunkResult(**data)
    except (OSError, ValueError, TypeError, KeyError):
        sealed, result = False, None
    if not sealed:
        _discard(path)
        return None
    return result


# The staged file's checksum: sha256 of the whole file with the 64 hex digits of the digest
# itself left out. It is written as a placeholder of the same length, hashed, then overwritten
# in place, so no offset in the Parquet footer moves.
CHECKSUM_KEY = b"lakecurate.sha256"
_CHECKSUM_HOLE = b"0" * 64
_BLOCK = 1 << 20


def _footer(f: BinaryIO) -> tuple[int, bytes]:
    """(offset, bytes) of a Parquet file's footer: its last 8 bytes are its length + PAR1."""
    size = f.seek(0, os.SEEK_END)
    if size < 12:
        raise ValueError("too short to be a Parquet file")
    f.seek(size - 8)
    length = int.from_bytes(f.read(4), "little")
    if length > size - 12:
        raise ValueError("footer length out of range")
    f.seek(size - 8 - length)
    return size - 8 - length, f.read(length)


def _digest(f: BinaryIO, hole: int) -> bytes:
    """sha256 of the file without the 64 bytes at ``hole``."""
    h = hashlib.sha256()
    f.seek(0)
    pos = 0
    while block := f.read(_BLOCK):
        end = pos + len(block)
        if end <= hole or pos >= hole + len(_CHECKSUM_HOLE):
            h.update(block)
        else:
            h.update(block[:max(0, hole - pos)])
            h.update(block[max(0, hole + len(_CHECKSUM_HOLE) - pos):])
        pos = end
    return h.hexdigest().encode()


def _seal(path: Path) -> None:
    """Replace the checksum placeholder in the footer with the file's digest."""
    with open(path, "r+b") as f:
        start, footer = _footer(f)
        hole = start + footer.rindex(_CHECKSUM_HOLE)
        digest = _digest(f, hole)
        f.seek(hole)
        f.write(digest)


def _sealed(path: Path, digest: bytes | None) -> bool:
    """Whether the file still has the digest it was sealed with (False when it has none)."""
    if not digest or len(digest) != len(_CHECKSUM_HOLE):
        return False
    with open(path, "rb") as f:
        start, footer = _footer(f)
        at = footer.rfind(digest)
        return at >= 0 and _digest(f, start + at) == digest


def _discard(path: Path) -> None:
    """Delete a damaged staged file (the chunk is redone and written again)."""
    with contextlib.suppress(OSError):
        path.unlink()
