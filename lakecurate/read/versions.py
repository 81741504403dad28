"""One version of the lake, and the lineage of a document in it.

``Lake.at(version=N)`` or ``Lake.at(as_of="2026-11-30 12:00")`` resolves the version once
(an error names the range that exists) and returns a ``LakeVersion``: the same read-only SQL
surface as ``Lake.sql`` (state tables; ``documents`` / ``docs`` / ``rejects`` views), bound to
that version, plus ``explain``, ``export`` and ``report`` of it.

The state tables are always the current state: they describe how each chunk got into the lake
(attempts, runs, commits), which does not change with the version one reads.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakecurate import engine
from lakecurate.errors import LakeError
from lakecurate.lake.delta import DeltaStore
from lakecurate.lake.paths import LakePaths
from lakecurate.lake.storage import Location
from lakecurate.read import export, query, report
from lakecurate.store.state import SNAPSHOT_TABLES


@dataclass
class Explanation:
    """The lineage of one document id in one version.

    ``occurrences``: every row with that id (source file and line, chunk, input sha256, run,
    config hash, decision, reason, detail, ``dup_of``, cluster) with its chunk's state and the
    commit that added it. ``related``: the kept original it duplicates, the documents that
    duplicate it, and the other members of its near-duplicate cluster.
    """

    doc_id: str
    version: int | None
    occurrences: query.QueryResult
    related: query.QueryResult
    seconds: float


def explain(
    state: Path, documents: Location, doc_id: str, version: int | None = None
) -> Explanation:
    """Where document ``doc_id`` came from and what was decided about it.

    Fast on a large lake: every scan filters on ``id`` (or ``dup_of`` / ``cluster_id``) and
    DuckDB pushes that filter into the Arrow dataset, so files whose statistics exclude the
    value are skipped and only matching rows are materialised.
    """
    started = time.perf_counter()
    con = query.open_reader(state, documents, version, tables=SNAPSHOT_TABLES)
    try:
        rows = query.run(con, engine.q("history.explain"), {"id": doc_id})
        if not rows.rows:
            where = "the latest version" if version is None else f"version {version}"
            raise LakeError(
                f"no document with id {doc_id!r} in {where} of the lake: ids are "
                "the source's own `id`, or <source path>:<line> when it had none"
            )
        found = rows.dicts()
        related = query.QueryResult(
            ["relation", "id", "kept", "reason", "cluster_id", "chunk_key", "source_line"], []
        )
        for original in sorted({r["dup_of"] for r in found if r["dup_of"]}):
            related.rows += query.run(
                con, engine.q("history.explain_original"), {"id": original}
            ).rows
        related.rows += query.run(con, engine.q("history.explain_duplicates"), {"id": doc_id}).rows
        for cluster in sorted({r["cluster_id"] for r in found if r["cluster_id"] is not None}):
            related.rows += query.run(
                con, engine.q("history.explain_cluster"), {"id": doc_id, "cluster": cluster}
            ).rows
    finally:
        con.close()
    return Explanation(doc_id, version, rows, related, time.perf_counter() - started)


class LakeVersion:
    """A read-only view of one version of a lake (see the module docstring)."""

    def __init__(self, state: Path, documents: Location, version: int | None) -> None:
        self.state = state
        self.documents = documents
        self.version = version

    @classmethod
    def bind(
        cls,
        state: Path,
        documents: Location,
        version: int | None = None,
        as_of: str | datetime.datetime | None = None,
    ) -> LakeVersion:
        """Resolve ``version`` / ``as_of`` now, so every later call reads the same version
        (with neither, the latest; while a writer runs, the one its state snapshot names)."""
        LakePaths(state.parent).require_state("read")
        return cls(state, documents, query.reader_version(state, documents, version, as_of))

    @property
    def timestamp(self) -> datetime.datetime | None:
        """When this version was committed (UTC)."""
        if self.version is None:
            return None
        for entry in DeltaStore(self.documents).log_entries():
            if int(entry["version"]) == self.version:
                return datetime.datetime.fromtimestamp(int(entry["timestamp"]) / 1000, datetime.UTC)
        return None

    def sql(self, text: str, params: dict[str, Any] | None = None) -> query.QueryResult:
        """A read-only query with ``documents`` / ``docs`` / ``rejects`` of this version."""
        con = query.open_reader(
            self.state, self.documents, self.version, tables=query.tables_for(text)
        )
        try:
            return query.run(con, text, params)
        finally:
            con.close()

    def explain(self, doc_id: str) -> Explanation:
        """The lineage of ``doc_id`` in this version."""
        return explain(self.state, self.documents, doc_id, self.version)

    def export(
        self, out: Path, *, fmt: str = "parquet", shard_size: int = export.DEFAULT_SHARD_BYTES
    ) -> export.ExportManifest:
        """The kept documents of this version as shards plus a manifest in ``out``."""
        if self.version is None:
            raise LakeError("the lake has no versions yet: nothing to export")
        return export.export(
            self.state, self.documents, self.version, Path(out), fmt=fmt, shard_size=shard_size
        )

    def report(self, html_path: Path) -> Path:
        """A self-contained HTML report of this version."""
        return report.write_report(self.state, self.documents, self.version, Path(html_path))
