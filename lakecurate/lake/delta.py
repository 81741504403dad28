"""The only module that imports ``deltalake``: the versioned table of documents.

Each commit carries a Delta app transaction (``lakecurate``, seq) and commitInfo metadata. delta-rs
does not reject a repeated or lower app-transaction version on sequential writes, so callers check
``watermark()`` first; the lake lock makes that check race-free.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from lakecurate.errors import CommitError, LakeError
from lakecurate.types import DOCUMENT_SCHEMA

APP_ID = "lakecurate"
PARTITION_BY = ["kept"]


class DeltaStore:
    """The ``documents`` Delta table of one lake."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._dt: DeltaTable | None = None

    def table(self) -> DeltaTable | None:
        """The table at its latest version, or None before the first commit."""
        if self._dt is None:
            try:
                self._dt = DeltaTable(str(self.path))
            except TableNotFoundError:
                return None
            except DeltaError as exc:
                raise LakeError(f"cannot open the Delta table {self.path}: {exc}") from exc
        return self._dt

    def version(self) -> int:
        dt = self.table()
        return -1 if dt is None else dt.version()

    def watermark(self) -> int:
        """The highest commit seq recorded in the Delta log (0 when none)."""
        dt = self.table()
        return 0 if dt is None else (dt.transaction_version(APP_ID) or 0)

    def _props(self, seq: int, metadata: dict[str, str]) -> CommitProperties:
        return CommitProperties(app_transactions=[Transaction(APP_ID, seq)],
                                custom_metadata={"lakecurate.seq": str(seq), **metadata})

    def append(self, rows: pa.Table, seq: int, metadata: dict[str, str]) -> int:
        """Append one chunk's rows as one transactional commit; returns the new version."""
        dt = self.table()
        target: Any = dt if dt is not None else str(self.path)
        try:
            write_deltalake(target, rows.cast(DOCUMENT_SCHEMA), mode="append",
                            partition_by=PARTITION_BY,
                            commit_properties=self._props(seq, metadata))
        except (DeltaError, OSError) as exc:
            raise CommitError(f"Delta commit of seq {seq} failed: {exc}; nothing was "
                              "committed, re-run the same command") from exc
        if dt is None:
            self._dt = None  # the first commit created the table; open it next time
        return self.version()

    def delete_chunks(self, keys: Sequence[str], seq: int,
                      metadata: dict[str, str]) -> tuple[int, int]:
        """Remove every row of these chunks in one commit; returns (version, rows removed)."""
        dt = self.table()
        if dt is None or not keys:
            return self.version(), 0
        quoted = ", ".join("'" + k.replace("'", "''") + "'" for k in keys)
        try:
            out = dt.delete(f"chunk_key IN ({quoted})",
                            commit_properties=self._props(seq, metadata))
        except (DeltaError, OSError) as exc:
            raise CommitError(f"Delta delete of seq {seq} failed: {exc}; re-run the same "
                              "command") from exc
        return self.version(), int(out.get("num_deleted_rows", 0))

    def restore(self, version: int, seq: int, metadata: dict[str, str]) -> int:
        """Make ``version`` the current one with a new commit; returns the new version."""
        dt = self.table()
        if dt is None:
            raise LakeError("the lake has no table yet: nothing to restore")
        try:
            dt.restore(version, commit_properties=self._props(seq, metadata))
        except (DeltaError, OSError) as exc:
            raise CommitError(f"Delta restore to version {version} failed: {exc}; nothing "
                              "changed, re-run the same command") from exc
        return self.version()

    def find_commit(self, seq: int, limit: int = 50) -> dict[str, Any] | None:
        """The commitInfo of the commit that carried ``seq`` (among the newest ``limit``)."""
        dt = self.table()
        if dt is None:
            return None
        for entry in dt.history(limit):
            if entry.get("lakecurate.seq") == str(seq):
                return entry
        return None

    def dataset(self, version: int | None = None) -> pds.Dataset | None:
        """An Arrow dataset of a version (filter and projection push down into Parquet)."""
        if self.table() is None:
            return None
        dt = DeltaTable(str(self.path), version=version) if version is not None else self.table()
        assert dt is not None
        return dt.to_pyarrow_dataset()

    def referenced_files(self) -> set[str]:
        dt = self.table()
        return set() if dt is None else {os.path.normpath(p) for p in dt.file_uris()}

    def data_files(self) -> list[Path]:
        """Every Parquet file under the table folder, referenced or not."""
        if not self.path.exists():
            return []
        return [p for p in self.path.rglob("*.parquet") if "_delta_log" not in p.parts]
