"""``export --version N OUT``: the kept documents of one version as training shards.

A training run must be able to record exactly what it read, so an export is reproducible and
self-describing: rows in input order (``chunk_key``, ``source_line``), so the same version
always gives byte-identical shards; each shard written to a temp file, fsynced and renamed,
so a shard that exists is complete; and ``manifest.json`` (files, sha256, rows, bytes,
version, config hashes) written last, the same way: a folder with a manifest is a finished
export, one without is an interrupted one.

An export deletes only what it wrote itself: it starts in an empty folder, names every file
in a journal (``.lakecurate-export``) before creating it, and re-running an interrupted export
removes exactly the journal's files. A folder holding anything else (a Spark output, the
lake's own data files) is refused, and so is any folder inside the lake.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from lakecurate import engine, faults
from lakecurate.errors import LakeError, one_line
from lakecurate.lake import atomic
from lakecurate.lake.delta import DeltaStore, utc_text
from lakecurate.lake.storage import Location
from lakecurate.read import query
from lakecurate.schema import DOCUMENT_SCHEMA

FORMATS = ("parquet", "jsonl", "jsonl.gz")
DEFAULT_SHARD_BYTES = 256 * 1024 * 1024
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "lakecurate-export/1"
JOURNAL = ".lakecurate-export"  # the files an unfinished export created, one name a line
_OURS = re.compile(r"(part-\d{5}\.(parquet|jsonl|jsonl\.gz)|manifest\.json)")
# What a training run needs of a kept document; the reject-only columns (raw, error, reason,
# dup_of) are always empty for kept rows and are left out.
COLUMNS = (
    "id",
    "text",
    "meta",
    "lang",
    "lang_score",
    "content_hash",
    "cluster_id",
    "chunk_key",
    "source_path",
    "source_line",
)
_BATCH_ROWS = 4096


@dataclass
class ShardFile:
    """One shard as the manifest records it."""

    path: str
    sha256: str
    rows: int
    bytes: int


@dataclass
class ExportManifest:
    """What an export wrote; ``manifest.json`` is this as JSON."""

    version: int
    version_timestamp: str
    format: str
    columns: list[str]
    order: list[str]
    config_hashes: list[str]
    rows: int
    bytes: int
    files: list[ShardFile] = field(default_factory=list)
    manifest_format: str = MANIFEST_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def _prepare(out: Path) -> None:
    """``out`` must be new, empty, or an interrupted export of ours; starts its journal.

    Of an interrupted export only the files its journal names (and their temp files) are
    removed; any other file means the folder is not ours, and nothing is touched.
    """
    if out.exists() and not out.is_dir():
        raise LakeError(f"{out} is a file: export into a new folder")
    out.mkdir(parents=True, exist_ok=True)
    entries = sorted(p.name for p in out.iterdir())
    journal = out / JOURNAL
    if entries:
        if (out / MANIFEST).exists():
            raise LakeError(
                f"{out} is not empty: it holds a finished export ({MANIFEST}); "
                "export into a new folder, or delete it first"
            )
        if not journal.exists():
            raise LakeError(
                f"{out} is not empty (it holds {entries[0]}, ...) and is not an "
                "interrupted lakecurate export: export into a new folder, or "
                "delete it first"
            )
        names = [n for n in journal.read_text(encoding="utf-8").splitlines() if n]
        if not all(_OURS.fullmatch(n) for n in names):
            raise LakeError(
                f"{journal} names files lakecurate does not write: delete {out} "
                "yourself, or export into a new folder"
            )
        ours = {JOURNAL, *names}
        ours |= {e for e in entries for n in names if e.startswith(f".{n}.tmp_")}
        foreign = [e for e in entries if e not in ours]
        if foreign:
            raise LakeError(
                f"{out} holds an interrupted export and files it did not write "
                f"({foreign[0]}, ...): export into a new folder, or delete it "
                "first"
            )
        for name in sorted(ours - {JOURNAL}):  # an interrupted export of ours: start again
            (out / name).unlink(missing_ok=True)
    journal.write_bytes(b"")
    atomic.fsync_path(out)


def _journal(out: Path, name: str) -> None:
    """Note ``name`` in the journal (durably) before the file is created."""
    with open(out / JOURNAL, "a", encoding="utf-8") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())


class _ShardWriter:
    """Writes one shard to a temp file; ``close`` fsyncs, renames and checksums it (an export
    cut off leaves the temp file, which the next export into the folder removes)."""

    def __init__(self, out: Path, index: int, fmt: str, schema: pa.Schema) -> None:
        self.final = out / f"part-{index:05d}.{fmt}"
        self._publish = contextlib.ExitStack()
        self.tmp = self._publish.enter_context(atomic.replacing(self.final, hidden=True))
        self.fmt = fmt
        self.rows = 0
        self.raw_bytes = 0.0
        _journal(out, self.final.name)
        self._file: IO[bytes] = open(self.tmp, "wb")  # noqa: SIM115 (closed in close())
        # No file name (it would be the temp name, with a pid) and no time in the gzip
        # header: the same version must give the same bytes.
        self._gz = (
            gzip.GzipFile(filename="", fileobj=self._file, mode="wb", mtime=0)
            if fmt == "jsonl.gz"
            else None
        )
        self._pq = (
            pq.ParquetWriter(self._file, schema, compression="zstd") if fmt == "parquet" else None
        )

    def write(self, batch: pa.RecordBatch, raw_bytes: float) -> None:
        self.rows += batch.num_rows
        self.raw_bytes += raw_bytes
        if self._pq is not None:
            self._pq.write_batch(batch)
            return
        sink = self._gz if self._gz is not None else self._file
        sink.write(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in batch.to_pylist()).encode(
                "utf-8"
            )
        )

    def close(self) -> ShardFile:
        if self._pq is not None:
            self._pq.close()
        if self._gz is not None:
            self._gz.close()
        self._file.close()
        self._publish.close()  # fsync, rename, fsync the folder
        faults.hit("export_shard", self.final.name)  # tests: an export killed midway
        return ShardFile(
            self.final.name, sha256_of(self.final), self.rows, self.final.stat().st_size
        )


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _batches(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    for batch in reader:
        if batch.num_rows:
            yield batch


def export(
    state: Path,
    documents: Location,
    version: int,
    out: Path,
    *,
    fmt: str = "parquet",
    shard_size: int = DEFAULT_SHARD_BYTES,
) -> ExportManifest:
    """Write the kept documents of ``version`` to ``out`` as shards of about ``shard_size``
    bytes of Arrow data each (before compression), then the manifest; returns it."""
    if fmt not in FORMATS:
        raise LakeError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    if shard_size <= 0:
        raise LakeError(f"shard size must be positive, not {shard_size}")
    query.refuse_inside(out, state.parent, "the export folder")
    con = query.open_reader(state, documents, version, tables=())  # validates the version
    try:
        _prepare(out)
        columns = [c for c in COLUMNS if c in DOCUMENT_SCHEMA.names]
        hashes = [r[0] for r in con.execute(engine.q("export.config_hashes")).fetchall()]
        select = engine.q("export.kept_rows").replace(
            "$columns", ", ".join(engine.quote_ident(c) for c in columns)
        )
        reader = con.sql(select).to_arrow_reader(_BATCH_ROWS)
        schema = pa.schema([DOCUMENT_SCHEMA.field(c) for c in columns])
        files: list[ShardFile] = []
        shard: _ShardWriter | None = None
        for got in _batches(reader):
            batch = pa.RecordBatch.from_arrays(
                [got.column(i).cast(schema.field(i).type) for i in range(len(columns))],
                schema=schema,
            )
            per_row = batch.nbytes / batch.num_rows
            start = 0
            while start < batch.num_rows:  # cut the batch where the shard fills up
                if shard is None:
                    shard = _ShardWriter(out, len(files), fmt, schema)
                fit = max(1, int((shard_size - shard.raw_bytes) / per_row))
                part = batch.slice(start, fit)
                shard.write(part, part.num_rows * per_row)
                start += part.num_rows
                if shard.raw_bytes >= shard_size:
                    files.append(shard.close())
                    shard = None
        if shard is not None:
            files.append(shard.close())
    except (duckdb.Error, pa.ArrowException) as exc:  # a damaged data file of the version
        raise LakeError(
            f"cannot read version {version} of the lake: {one_line(exc)}; run "
            "`lakecurate verify --deep` to find the damaged data file"
        ) from exc
    finally:
        con.close()
    stamps = {int(e["version"]): int(e["timestamp"]) for e in DeltaStore(documents).log_entries()}
    manifest = ExportManifest(
        version=version,
        version_timestamp=utc_text(stamps[version]) if version in stamps else "",
        format=fmt,
        columns=columns,
        order=["chunk_key", "source_line"],
        config_hashes=hashes,
        rows=sum(f.rows for f in files),
        bytes=sum(f.bytes for f in files),
        files=files,
    )
    _journal(out, MANIFEST)
    atomic.write_text(out / MANIFEST, manifest.to_json(), hidden=True)
    (out / JOURNAL).unlink()  # finished: the manifest now says what is ours
    atomic.fsync_path(out)
    return manifest


def verify(out: Path) -> list[str]:
    """Check a finished export against its manifest; returns the problems (none: intact)."""
    path = out / MANIFEST
    if not path.exists():
        return [f"{out} has no {MANIFEST}: the export is incomplete or this is not one"]
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    problems = []
    for f in data["files"]:
        shard = out / f["path"]
        if not shard.exists():
            problems.append(f"{f['path']}: missing")
        elif shard.stat().st_size != f["bytes"]:
            problems.append(
                f"{f['path']}: {shard.stat().st_size} bytes, manifest says {f['bytes']}"
            )
        elif sha256_of(shard) != f["sha256"]:
            problems.append(f"{f['path']}: sha256 differs from the manifest")
    return problems
