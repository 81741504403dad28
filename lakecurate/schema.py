"""The columns of the lake: the Delta table ``documents`` and the staged-only near-dedup columns.

Apart from ``types`` so that code which only passes chunks around does not load Arrow.
"""

from __future__ import annotations

import pyarrow as pa

SIGNATURE_COLUMN = "nd_signature"
"""Staged-only column: a candidate's MinHash signature (never reaches the Delta table)."""
BANDS_COLUMN = "nd_bands"
"""Staged-only column: a candidate's LSH band hashes."""

PARTITION_COLUMN = "kept"
"""The table's one partition column: kept and dropped rows live in separate files."""

DECISION_COLUMNS = ("kept", "reason", "dup_of", "cluster_id")
"""The columns the driver's lake-wide decisions may change; every other column is the worker's."""

KEY_COLUMNS = ("id", "id_given", "content_hash", "source_line", "chunk_key", *DECISION_COLUMNS)
"""What the driver reads of a staged chunk to decide it (never the text)."""

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
