"""Plain data passed between the planner, the workers and the driver.

Everything here is small and picklable: workers get file references, never data (pickling an
Arrow slice would ship its whole parent buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import pyarrow as pa

SIGNATURE_COLUMN = "nd_signature"
"""Staged-only column: a candidate's MinHash signature (never reaches the Delta table)."""
BANDS_COLUMN = "nd_bands"
"""Staged-only column: a candidate's LSH band hashes."""


class Status(StrEnum):
    """Chunk states (design section 5)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMMITTING = "COMMITTING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    DEAD = "DEAD"
    SUPERSEDED = "SUPERSEDED"


class Format(StrEnum):
    """Input formats lakecurate reads."""

    JSONL = "jsonl"
    JSONL_GZ = "jsonl.gz"
    JSONL_ZST = "jsonl.zst"
    PARQUET = "parquet"


@dataclass(frozen=True)
class ChunkSpec:
    """A deterministic slice of one input, named by its content."""

    chunk_key: str
    source_path: str
    source_sha256: str
    format: Format
    chunk_index: int
    first_line: int  # 1-based line (JSONL) or row (Parquet) number of the chunk's first record
    input_sha256: str  # sha256 of exactly the bytes this chunk covers
    input_bytes: int
    byte_start: int | None = None
    byte_end: int | None = None
    row_group_start: int | None = None
    row_group_end: int | None = None


@dataclass(frozen=True)
class WorkOrder:
    """What a worker needs besides the chunk: where to stage, and the decision config."""

    staging_dir: str
    run_id: str
    config_hash: str
    exact_dedup: bool = True
    # The pipeline config as lakecurate.toml text (config.to_toml): filters, PII, gates, near
    # dedup. Empty: the default pipeline. The worker never reads the lake's files for it.
    decisions: str = ""


@dataclass
class ChunkResult:
    """What a worker reports for one chunk; also stored in the staged file's metadata."""

    chunk_key: str
    staged_path: str
    input_sha256: str
    config_hash: str
    rows_in: int
    rows_kept: int
    rows_dropped: int
    rows_malformed: int
    blank_lines: int
    filter_stats: list[tuple[str, int, int]] = field(default_factory=list)  # step, in, dropped
    seconds: float = 0.0
    worker: str = ""
    redactions: dict[str, int] = field(default_factory=dict)  # PII type -> matches replaced
    gate_violations: list[str] = field(default_factory=list)  # quality gates this chunk broke


# The schema of the Delta table `documents`: one row per input record, kept or not.
DOCUMENT_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("id_given", pa.bool_(), nullable=False),  # false: derived as <source path>:<line>
        pa.field("text", pa.string()),
        pa.field("meta", pa.string()),  # the record's other fields, as JSON
        pa.field("raw", pa.binary()),  # the raw bytes of a record that did not parse
        pa.field("kept", pa.bool_(), nullable=False),
        pa.field("reason", pa.string()),  # NULL if kept, else filter:<name>, exact_dup, ...
        pa.field("detail", pa.string()),  # the measured value that failed, e.g. x.ratio=0.4
        pa.field("error", pa.string()),  # why a malformed record did not parse
        pa.field("dup_of", pa.string()),  # id of the kept document this one duplicates
        pa.field("cluster_id", pa.int64()),  # near-duplicate cluster, when near dedup runs
        pa.field("lang", pa.string()),
        pa.field("lang_score", pa.float64()),
        pa.field("content_hash", pa.string()),  # md5 hex of the normalised text
        pa.field("chunk_key", pa.string(), nullable=False),
        pa.field("source_path", pa.string(), nullable=False),
        pa.field("source_line", pa.int64(), nullable=False),
        pa.field("input_sha256", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("config_hash", pa.string(), nullable=False),
    ]
)
