"""Plain data passed between the planner, the workers and the driver.

Everything here is small and picklable, and free of Arrow (the table's columns are in
``schema``): workers get file references, never data (pickling an
Arrow slice would ship its whole parent buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


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
    JSONL_BZ2 = "jsonl.bz2"
    JSONL_XZ = "jsonl.xz"
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

    @property
    def is_slice(self) -> bool:
        """One of several chunks of a compressed file: ``byte_start``/``byte_end`` count
        decompressed bytes and ``input_sha256`` names them. A compressed file that fits one chunk
        keeps the whole-file chunk it always had (its digest is the file's)."""
        compressed = self.format not in (Format.JSONL, Format.PARQUET)
        return compressed and self.input_sha256 != self.source_sha256


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


@dataclass(frozen=True)
class DataFile:
    """One Parquet file in the table folder, ready to be named by a commit (its add action)."""

    path: str  # relative to the table folder, '/'-separated
    size: int
    partition_values: dict[str, str | None]
    modification_time: int  # ms since the epoch
    stats: str  # the Delta statistics JSON
    rows: int


@dataclass(frozen=True)
class FinaliseOrder:
    """A decided chunk for a worker to write as the table's data files: its staged file with
    the driver's verdicts applied (``patch``: the rows whose verdict changed, as Arrow IPC
    bytes, ``ingest.staging.apply_patch``)."""

    chunk_key: str
    seq: int
    staged_path: str
    table_dir: str
    patch: bytes
    name: str  # of its data files: the same for every attempt, unique to this order
    rejected_text: str = "keep"  # of filtered-out documents: keep, drop or sample ([output])


@dataclass(frozen=True)
class PlanOrder:
    """An input for a worker to read and cut into chunks (``ingest.cutting.plan_file``): the
    driver only lists and stats inputs, so planning runs beside processing (issue 14)."""

    path: str
    format: Format
    chunk_size: int


TaskOrder = WorkOrder | FinaliseOrder | list[PlanOrder]
"""What an executor ships to a worker (``ingest.worker.run_order``)."""


@dataclass(frozen=True)
class Outcome:
    """How one attempt at a chunk (or at its finalise, or at planning an input: ``key`` is then
    the input's path) ended, as an executor reports it to the scheduler: a ``result``
    (``files``, ``cut``), or an ``error`` (with ``why`` when the cause is
    known better than the exception says, e.g. the signal its worker died of), or
    ``blameless``: it did not run to the end through no fault of its own (another worker's
    death broke the pool), so it runs again without using up an attempt."""

    key: str
    result: ChunkResult | None = None
    error: BaseException | None = None
    why: str | None = None
    blameless: bool = False
    bundled: bool = False  # failed in a task of several chunks: it runs again alone, its
    # attempt given back (the task's error may be another chunk's)
    finalise: bool = False  # the attempt was a FinaliseOrder's, not a chunk's processing
    files: list[DataFile] | None = None  # what a finalise wrote
    planning: bool = False  # the attempt was a PlanOrder's
    cut: tuple[str, list[ChunkSpec]] | None = None  # what planning found: source sha256, chunks
