"""The only module that imports ``deltalake``: the versioned table of documents.

Each commit carries a Delta app transaction (``lakecurate``, seq) and commitInfo metadata. delta-rs
does not reject a repeated or lower app-transaction version on sequential writes, so callers check
``watermark()`` first; the lake lock makes that check race-free.

Flat commit cost (issue 14). With deltalake 1.6 both ``create_write_transaction`` and the
``update_incremental`` a kept handle needs after it cost time in proportion to the table's
active files (``without_files`` and ``skip_stats`` are ignored since 1.x): 3 + 3 ms per commit
at 128 files, 26 + 26 ms at 16,500. So an ingest's group commit on a local table is written
here (``_append_log``): the commit file (commitInfo, add actions, the app transaction) is
written whole under a temp name and linked to its version's name, which fails if the version
exists (put-if-absent, as delta-rs does on a local file system). Its cost depends on the
group's files only; the version and watermark are then known without reading the log, and the
kept handle is brought forward only when something reads the table (``table()``). delta-rs
still makes every other commit (the first one, deletes, overwrites, restore, compaction,
vacuum), and every commit on object storage. No post-commit hook writes a checkpoint; one is
written every ``delta.checkpointInterval`` (100) commits of this store and at the end of an
ingest that leaves ``SETTLE_COMMITS`` or more after the last one (``settle``), so opening the
table replays at most that many commit files.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import deltalake
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import (
    AddAction,
    PostCommitHookProperties,
    RemoveAction,
    create_table_with_add_actions,
)

from lakecurate import faults
from lakecurate.errors import CommitError, LakeError, disk_full, is_disk_full, one_line
from lakecurate.lake import atomic
from lakecurate.lake.record import SEQ_KEY, CommitRecord
from lakecurate.lake.storage import Location

if TYPE_CHECKING:  # Arrow is imported where it is used: opening the table does not need it
    import pyarrow as pa
    import pyarrow.dataset as pds

    from lakecurate.types import DataFile

APP_ID = "lakecurate"

_GUARDS: dict[str, Callable[[], None]] = {}
"""Checks to pass before any write to a table (by URI): an object-store lake's lease
(``lake.lease``), for every ``DeltaStore`` of that table in this process."""


@contextlib.contextmanager
def guard_writes(where: Location, check: Callable[[], None]) -> Iterator[None]:
    """Run ``check`` before every write to the table at ``where`` while the block runs."""
    _GUARDS[where.uri] = check
    try:
        yield
    finally:
        _GUARDS.pop(where.uri, None)


PARTITION_BY = ["kept"]  # schema.PARTITION_COLUMN (schema loads Arrow; this module must not)
LOG_DIR = "_delta_log"
CHECKPOINT_INTERVAL = 100  # Delta's default for delta.checkpointInterval
SETTLE_COMMITS = 10
"""``settle`` (the end of an ingest) checkpoints once this many versions follow the last
checkpoint: replaying fewer small commit files costs less than writing every active file."""
NO_HOOK = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
"""A hot-path commit writes no checkpoint and cleans no log (``DeltaStore._committed`` does,
every ``delta.checkpointInterval`` commits)."""


class FilesMissingError(LookupError):
    """Data files a version needs are gone; ``vacuumed`` when the log's vacuums explain it."""

    def __init__(self, message: str, vacuumed: bool) -> None:
        super().__init__(message)
        self.vacuumed = vacuumed


@dataclass(frozen=True)
class Readability:
    """Which versions of the table can be read, by the one rule that ``sql``/``export``/
    ``report``/``explain`` (``--version``) and ``restore`` all follow: **a version can be read
    iff the log can reconstruct it and every data file it names is on disk**. Built by
    ``DeltaStore.readability`` from one pass over the log; nothing else decides it.

    A vacuum does not leave one contiguous range: a version between two supersedes can keep
    all its files while an older one lost some, so ``missing`` is kept per version.
    """

    earliest: int  # the oldest version the log can reconstruct
    latest: int
    missing: Mapping[int, tuple[int, str]]  # unreadable version -> (files missing, one of them)
    vacuumed: bool  # a vacuum explains missing files (the log has one; the latest is whole)

    def check(self, version: int) -> None:
        """Raise ``LookupError`` (the log cannot reconstruct ``version``) or
        ``FilesMissingError`` (files it names are gone); return when it can be read."""
        if not self.earliest <= version <= self.latest:
            raise LookupError(
                f"the log cannot reconstruct version {version} (it holds "
                f"{self.earliest} to {self.latest})"
            )
        if version in self.missing:
            count, example = self.missing[version]
            raise FilesMissingError(
                f"{count} data file(s) of version {version} "
                + (
                    "were removed by vacuum"
                    if self.vacuumed
                    else "are missing (no vacuum removed them)"
                )
                + f", e.g. {example}",
                self.vacuumed,
            )

    def readable(self, version: int) -> bool:
        return self.earliest <= version <= self.latest and version not in self.missing

    def newest_run(self) -> tuple[int, int]:
        """(first, latest): the versions from ``first`` on can all be read; what messages
        name. Older readable versions may exist before a gap; they are read all the same."""
        first = self.latest
        while self.readable(first - 1):
            first -= 1
        return first, self.latest


def open_table(where: Path | Location, version: int | None = None) -> DeltaTable:
    """``DeltaTable(path)``, its failures as one ``LakeError`` line saying what to do.

    A damaged checkpoint or a torn commit file makes delta-rs fail (with a Rust backtrace in
    the message when RUST_BACKTRACE is set, or a panic); every command opens the table here,
    so none of them shows that. ``TableNotFoundError`` passes through: no table yet.
    """
    loc = Location.of(where)
    try:
        return DeltaTable(loc.uri, version=version, storage_options=loc.delta_options())
    except TableNotFoundError:
        raise
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
            raise
        at = "" if version is None else f" at version {version}"
        raise LakeError(
            f"cannot open the Delta table {loc}{at}: {one_line(exc)}; run "
            "`lakecurate verify --repair` (it sets aside a damaged checkpoint or a "
            "torn last commit file, or says what to do)"
        ) from exc


def read_history(dt: DeltaTable, limit: int | None = None) -> list[dict[str, Any]]:
    """``dt.history(limit)``, a damaged commit file as one ``LakeError`` line (a checkpoint
    can let the table open while a commit file it covers no longer parses)."""
    try:
        return list(dt.history(limit))
    except (DeltaError, OSError, ValueError) as exc:
        raise LakeError(
            f"cannot read the history of the Delta table: {one_line(exc)}; run "
            "`lakecurate verify` to find the damaged commit file"
        ) from exc


class DeltaStore:
    """The ``documents`` Delta table of one lake."""

    def __init__(self, where: Path | Location) -> None:
        self.loc = Location.of(where)
        self._dt: DeltaTable | None = None
        self._readability: tuple[tuple[int, int], Readability] | None = None
        self._head: tuple[int, int] | None = None
        """(version, watermark) after this store's own log appends; the kept handle is behind
        them until ``table()`` brings it forward."""
        self._fast: bool | None = None  # whether _append_log may write this table's commits
        self._checkpointed: int | None = None  # the last checkpoint's version (-1: none)

    def _may_write(self) -> None:
        if check := _GUARDS.get(self.loc.uri):
            check()

    def _reload(self) -> None:
        """Forget the kept handle: the next ``table()`` opens the log as it is on disk."""
        self._dt, self._head = None, None

    def table(self) -> DeltaTable | None:
        """The table at its latest version, or None before the first commit."""
        if self._dt is None:
            try:
                self._dt = open_table(self.loc)
            except TableNotFoundError:
                return None
        elif self._head is not None and self._head[0] != self._dt.version():
            self._dt.update_incremental()  # behind this store's own appends
        self._head = None
        return self._dt

    def version(self) -> int:
        if self._head is not None:
            return self._head[0]
        dt = self.table()
        return -1 if dt is None else dt.version()

    def watermark(self) -> int:
        """The highest commit seq recorded in the Delta log (0 when none)."""
        if self._head is not None:
            return self._head[1]
        dt = self.table()
        return 0 if dt is None else (dt.transaction_version(APP_ID) or 0)

    def _props(self, seq: int, metadata: dict[str, str]) -> CommitProperties:
        return CommitProperties(
            app_transactions=[Transaction(APP_ID, seq)],
            custom_metadata={SEQ_KEY: str(seq), **metadata},
        )

    def write_files(
        self, rows: pa.Table, seq: int, key: str, since_ns: int | None = None
    ) -> list[DataFile]:
        """Write one chunk's rows as data files for a later ``commit_files`` (they are
        invisible to readers until a commit names them; a file of a commit that never happens
        is removed by ``remove_unreferenced``). A failed write removes every untracked file
        written since ``since_ns`` (default: this call)."""
        from lakecurate.lake.files import write_data_files
        from lakecurate.schema import DOCUMENT_SCHEMA

        started_ns = time.time_ns() if since_ns is None else since_ns
        try:
            faults.hit("delta_write", key)  # tests: ENOSPC
            (partition,) = PARTITION_BY
            return write_data_files(
                self.loc,
                rows.cast(DOCUMENT_SCHEMA),
                partition,
                f"part-{seq:08d}-{uuid.uuid4().hex[:16]}",
            )
        except OSError as exc:
            raise self._failed(exc, seq, started_ns) from exc

    def commit_files(
        self, files: Sequence[DataFile], seq: int, metadata: dict[str, str], since_ns: int
    ) -> int:
        """One commit adding ``files`` with app transaction ``seq``; returns the new version.
        ``since_ns``: when the first of the files was about to be written (a failed commit
        removes every untracked file written since)."""
        self._may_write()
        head = self._head
        if head is None:  # the first commit of this store: open the table (once)
            dt = self.table()
            if dt is not None and self._can_append_log(dt):
                head = (dt.version(), dt.transaction_version(APP_ID) or 0)
        try:
            if head is not None:
                self._append_log(head[0] + 1, files, seq, metadata)
                self._head = (head[0] + 1, seq)
            else:
                dt = self.table()
                self._commit_files(dt, files, seq, metadata)
                if dt is None:
                    self._reload()  # the first commit created the table; open it next time
        except (DeltaError, OSError) as exc:
            raise self._failed(exc, seq, since_ns) from exc
        version = self.version()
        self._committed(version)
        return version

    def _can_append_log(self, dt: DeltaTable) -> bool:
        """Whether ``_append_log`` may write this table's appends: a local table whose
        protocol asks a writer for nothing beyond adding files (writer version 2 at most, no
        writer features, no column mapping or row tracking to maintain)."""
        if self._fast is None:
            protocol = dt.protocol()
            self._fast = (
                self.loc.is_local
                and protocol.min_writer_version <= 2
                and not protocol.writer_features
                and protocol.min_reader_version <= 1
                and not any("delta.invariants" in (f.metadata or {}) for f in dt.schema().fields)
            )
        return self._fast

    def _append_log(
        self, version: int, files: Sequence[DataFile], seq: int, metadata: dict[str, str]
    ) -> None:
        """Commit ``files`` as ``version`` by writing its commit file: the actions delta-rs
        writes for ``create_write_transaction`` (commitInfo with the write metrics ``history``
        reads, one add per file, the app transaction), written whole under a temp name, then
        linked to ``_delta_log/<version>.json``, which fails (``FileExistsError``) if that
        version exists: only the lake lock's holder commits, so another writer broke in."""
        from lakecurate import __version__

        now_ms = time.time_ns() // 1_000_000
        (partition,) = PARTITION_BY
        info: dict[str, Any] = {
            "timestamp": now_ms,
            "operation": "WRITE",
            "operationParameters": {"partitionBy": json.dumps([partition]), "mode": "Append"},
            "engineInfo": f"lakecurate-{__version__} (delta-rs:py-{deltalake.__version__})",
            **(self._props(seq, metadata).custom_metadata or {}),
            "operationMetrics": _write_metrics(files),
            "clientVersion": f"lakecurate-{__version__}",
        }
        lines = [json.dumps({"commitInfo": info}, separators=(",", ":"))]
        for f in files:
            add = {
                "path": f.path,
                "partitionValues": f.partition_values,
                "size": f.size,
                "modificationTime": f.modification_time,
                "dataChange": True,
                "stats": f.stats,
            }
            lines.append(json.dumps({"add": add}, separators=(",", ":")))
        lines.append(json.dumps({"txn": {"appId": APP_ID, "version": seq}}, separators=(",", ":")))
        log = self.loc.local / LOG_DIR
        name = f"{version:020d}.json"
        tmp = log / f".{name}{atomic.TEMP_MARK}{os.getpid()}_{time.time_ns()}"
        try:
            with open(tmp, "wb") as out:
                out.write(("\n".join(lines) + "\n").encode("utf-8"))
                out.flush()
                os.fsync(out.fileno())
            faults.hit("delta_log_append", name)  # tests: a kill before the version exists
            try:
                os.link(tmp, log / name)
            except FileExistsError:  # commit_files turns it into a CommitError, cleaned up
                raise FileExistsError(
                    f"Delta version {version} exists already: another process wrote to the "
                    "table though the lake is locked"
                ) from None
            atomic.fsync_path(log)
        finally:
            tmp.unlink(missing_ok=True)

    def _committed(self, version: int) -> None:
        """After a commit of the hot path: every ``delta.checkpointInterval`` versions, write
        a checkpoint and clean up expired log files, as delta-rs's post-commit hook did."""
        interval = CHECKPOINT_INTERVAL
        if self._dt is not None:
            with contextlib.suppress(ValueError, TypeError):
                config = self._dt.metadata().configuration or {}
                interval = int(config.get("delta.checkpointInterval", interval))
        self.settle(max(1, interval), version)

    def _last_checkpoint(self) -> int:
        """The version of the last checkpoint (``_last_checkpoint``, a hint file; -1: none or
        unreadable), read once, then kept as this store writes checkpoints."""
        if self._checkpointed is None:
            try:
                hint = (self.loc / LOG_DIR / "_last_checkpoint").read_bytes()
                self._checkpointed = int(json.loads(hint)["version"])
            except (OSError, ValueError, KeyError, TypeError):
                self._checkpointed = -1
        return self._checkpointed

    def settle(self, at_least: int = SETTLE_COMMITS, version: int | None = None) -> int | None:
        """Checkpoint the latest version when ``at_least`` commits were made since the last
        checkpoint, and clean up the log files past ``delta.logRetentionDuration`` when the
        table allows it (``delta.enableExpiredLogCleanup``); returns the version checkpointed,
        if any (none from a store that has not committed). The end of an ingest calls it; a
        failure only makes the next open slower."""
        if self._checkpointed is None and version is None:
            return None  # this store has not committed: nothing changed since the last run
        latest = self.version() if version is None else version
        if latest < 0 or latest - self._last_checkpoint() < max(1, at_least):
            return None
        checkpointed = self.checkpoint()
        dt = self.table()
        assert dt is not None
        config = dt.metadata().configuration or {}
        if config.get("delta.enableExpiredLogCleanup", "true").lower() != "false":
            with contextlib.suppress(DeltaError, OSError):
                dt.cleanup_metadata()
        return checkpointed

    def append(self, rows: pa.Table, seq: int, metadata: dict[str, str], key: str = "") -> int:
        """One chunk's rows as one commit of their own; returns the new version."""
        started_ns = time.time_ns()
        return self.commit_files(self.write_files(rows, seq, key), seq, metadata, started_ns)

    def replace_chunk(self, rows: pa.Table, seq: int, metadata: dict[str, str], key: str) -> int:
        """Swap the rows of a committed chunk for ``rows`` in one commit (a predicate
        overwrite), so a re-decided chunk is never absent nor doubled; the new version."""
        self._may_write()
        from lakecurate.schema import DOCUMENT_SCHEMA

        dt = self.table()
        assert dt is not None, "a committed chunk implies a table"
        started_ns = time.time_ns()
        try:
            faults.hit("delta_write", key)
            write_deltalake(
                dt,
                rows.cast(DOCUMENT_SCHEMA),
                mode="overwrite",
                predicate="chunk_key = '" + key.replace("'", "''") + "'",
                partition_by=PARTITION_BY,
                commit_properties=self._props(seq, metadata),
            )
        except (DeltaError, OSError) as exc:
            raise self._failed(exc, seq, started_ns) from exc
        return self.version()

    def _commit_files(
        self, dt: DeltaTable | None, files: Sequence[DataFile], seq: int, metadata: dict[str, str]
    ) -> None:
        """One commit adding ``files`` (``lake.files.DataFile``); creates the table on the
        first. The kept handle is brought forward incrementally, never re-opened. The write
        metrics delta-rs records for its own writes are recorded too (``history`` reads them)."""
        from lakecurate.schema import DOCUMENT_SCHEMA

        props = self._props(seq, metadata)
        props.custom_metadata = {
            **(props.custom_metadata or {}),
            "operationMetrics": _write_metrics(files),
        }

        adds = [
            AddAction(f.path, f.size, f.partition_values, f.modification_time, True, f.stats)
            for f in files
        ]
        if dt is None:
            from deltalake import Schema

            create_table_with_add_actions(
                self.loc.uri,
                Schema.from_arrow(DOCUMENT_SCHEMA),
                adds,
                mode="append",
                partition_by=PARTITION_BY,
                storage_options=self.loc.delta_options(),
                commit_properties=props,
                post_commithook_properties=NO_HOOK,
            )
            return
        dt.create_write_transaction(
            list[AddAction | RemoveAction](adds),
            "append",
            DOCUMENT_SCHEMA,
            partition_by=PARTITION_BY,
            commit_properties=props,
            post_commithook_properties=NO_HOOK,
        )
        dt.update_incremental()

    def _failed(self, exc: BaseException, seq: int, since_ns: int) -> Exception:
        """The error to raise for a write of commit ``seq`` that failed; when the log does not
        have the commit, the data files written for it since ``since_ns`` are removed now."""
        self._reload()  # re-read the log: did the commit land before the error?
        if self.watermark() < seq:
            with contextlib.suppress(OSError, DeltaError):
                self.remove_unreferenced(since_ns)
        if is_disk_full(exc):
            return disk_full(exc, f"writing Delta commit seq {seq}")
        return CommitError(
            f"Delta commit of seq {seq} failed: {one_line(exc)}; nothing "
            "was committed, re-run the same command"
        )

    def delete_chunks(
        self, keys: Sequence[str], seq: int, metadata: dict[str, str]
    ) -> tuple[int, int]:
        """Remove every row of these chunks in one commit; returns (version, rows removed)."""
        self._may_write()

        dt = self.table()
        if dt is None or not keys:
            return self.version(), 0
        quoted = ", ".join("'" + k.replace("'", "''") + "'" for k in keys)
        try:
            out = dt.delete(
                f"chunk_key IN ({quoted})", commit_properties=self._props(seq, metadata)
            )
        except (DeltaError, OSError) as exc:
            raise CommitError(
                f"Delta delete of seq {seq} failed: {one_line(exc)}; re-run the same command"
            ) from exc
        if self.watermark() < seq:
            # Nothing matched (chunks without records), so delta-rs made no commit: record the
            # seq with an empty one, or the watermark would lag the state's DONE commits.
            return self.commit_files([], seq, metadata, time.time_ns()), 0
        return self.version(), int(out.get("num_deleted_rows", 0))

    def restore(self, version: int, seq: int, metadata: dict[str, str]) -> int:
        """Make ``version`` the current one with a new commit; returns the new version."""
        self._may_write()
        dt = self.table()
        if dt is None:
            raise LakeError("the lake has no table yet: nothing to restore")
        try:
            dt.restore(version, commit_properties=self._props(seq, metadata))
        except (DeltaError, OSError) as exc:
            raise CommitError(
                f"Delta restore to version {version} failed: {one_line(exc)}; "
                "nothing changed, re-run the same command"
            ) from exc
        return self.version()

    def find_commit(self, seq: int, limit: int = 50) -> dict[str, Any] | None:
        """The commitInfo of the commit that carried ``seq`` (among the newest ``limit``)."""
        dt = self.table()
        if dt is None:
            return None
        for entry in read_history(dt, limit):
            if entry.get(SEQ_KEY) == str(seq) or CommitRecord.parse(entry).chunk(seq):
                return entry
        return None

    def rows_of_chunks(self, keys: Sequence[str]) -> pa.Table:
        """Every row of these chunks at the latest version, in one scan.

        The filter casts ``chunk_key``: files delta-rs rewrote (a delete or an overwrite of a
        file holding other chunks) store it as string_view, and a plain comparison with a
        string then fails in pyarrow's statistics pruning ("no kernel matching (string,
        string_view)").
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        from lakecurate.schema import DOCUMENT_SCHEMA

        ds = self.dataset()
        if ds is None or not keys:
            return DOCUMENT_SCHEMA.empty_table()
        wanted = pc.field("chunk_key").cast(pa.string()).isin(sorted(set(keys)))
        return ds.to_table(filter=wanted).select(DOCUMENT_SCHEMA.names).cast(DOCUMENT_SCHEMA)

    def dataset(self, version: int | None = None) -> pds.Dataset | None:
        """An Arrow dataset of a version (filter and projection push down into Parquet)."""
        if self.table() is None:
            return None
        dt = open_table(self.loc, version) if version is not None else self.table()
        assert dt is not None
        return dt.to_pyarrow_dataset()

    def referenced_files(self) -> set[str]:
        dt = self.table()
        return set() if dt is None else {str(self.at(p)) for p in dt.file_uris()}

    def remove_unreferenced(self, since_ns: int) -> int:
        """Delete the untracked data files a failed or killed write left, those written at or
        after ``since_ns`` (wall clock); returns how many. The lake lock makes this the only
        writer, so nothing else is writing a file the log will name."""
        removed = 0
        # Modification times come from a coarse clock: the file system's (tens of ms), or an
        # object store's Last-Modified, whole seconds of the server's clock.
        slack = 50_000_000 if self.loc.is_local else 2_000_000_000
        for loc in self.untracked_files():
            st = loc.stat()
            if st is not None and st.mtime_ns >= since_ns - slack:
                removed += loc.delete()
        return removed

    def untracked_files(self) -> list[Location]:
        """Data files no version in the log names (what a killed or failed write leaves):
        a full vacuum's candidates minus the tombstones an ordinary one would take (files
        older versions still need for time travel are tombstones, never untracked)."""
        self._reload()  # the log as it is on disk now
        dt = self.table()
        if dt is None:
            return self.data_files()
        opts: dict[str, Any] = {
            "retention_hours": 0,
            "dry_run": True,
            "enforce_retention_duration": False,
        }
        untracked = set(dt.vacuum(full=True, **opts)) - set(dt.vacuum(full=False, **opts))
        found = [self.at(rel) for rel in sorted(untracked)]
        if self.loc.is_local:
            return found
        # Arrow leaves an empty "folder/" marker object where it deleted a file on object
        # storage, and delta-rs lists it as a file: it is not a data file.
        return [loc for loc in found if loc.kind() != "folder"]

    def at(self, rel: str) -> Location:
        """A data file of the table named as the log or delta-rs names it (relative, or whole)."""
        return Location.of(rel) if "://" in rel or os.path.isabs(rel) else self.loc / rel

    def data_files(self) -> list[Location]:
        """Every Parquet file under the table folder, referenced or not."""
        return [
            self.loc / e.rel
            for e in self.loc.files(".parquet")
            if not e.rel.startswith(LOG_DIR + "/")
        ]

    # -- what verify needs: the log's own health, and each live file's story ----------------

    def log_damage(self) -> list[tuple[str, list[Location]]]:
        """Damage in ``_delta_log`` that stops the table from opening (or its history from being
        read): (what is wrong, the files ``set_aside_log`` moves away to fix it). No files
        means lakecurate cannot fix it; the text then says what to do.

        Safe to set aside: a damaged checkpoint whose commits are all still in the log (they
        describe the same table), a ``_last_checkpoint`` hint that points nowhere useful (the
        log is listed without it), and the last commit file when it is not even JSON (a torn
        write: it never took effect for anyone who could read it). Nothing else.
        """
        log = self.loc / LOG_DIR
        commits: dict[int, Location] = {}
        checkpoints: dict[int, list[Location]] = {}
        for entry in log.files(recursive=False):
            path = log / entry.rel
            stem = path.name.split(".", 1)[0]
            if not stem.isdigit():
                continue
            if path.name == f"{stem}.json":
                commits[int(stem)] = path
            elif ".checkpoint." in path.name and path.name.endswith(".parquet"):
                checkpoints.setdefault(int(stem), []).append(path)
        found: list[tuple[str, list[Location]]] = []
        bad = {
            v: why
            for v in checkpoints
            if (why := next(filter(None, map(_parquet_damage, checkpoints[v])), None))
        }
        intact = [v for v in checkpoints if v not in bad]
        for v, why in sorted(bad.items()):
            names = ", ".join(sorted(p.name for p in checkpoints[v]))
            base = max((c for c in intact if c < v), default=-1)
            if all(n in commits for n in range(base + 1, v + 1)):
                found.append(
                    (
                        f"damaged checkpoint {names} ({why}); the commit files before it "
                        "still describe the table",
                        sorted(checkpoints[v], key=str),
                    )
                )
            else:
                found.append(
                    (
                        f"damaged checkpoint {names} ({why}), and the commit files it "
                        "stands for were cleaned up: put back an intact copy of it from "
                        "a backup",
                        [],
                    )
                )
        hint = log / "_last_checkpoint"
        if hint.stat() is not None:
            try:
                named: int | None = int(json.loads(hint.read_bytes())["version"])
                problem = (
                    "names the damaged checkpoint"
                    if named in bad
                    else "names a checkpoint that does not exist"
                    if named not in checkpoints
                    else ""
                )
            except (OSError, ValueError, KeyError, TypeError):
                named, problem = None, "is unreadable"
            if problem:
                found.append(
                    (
                        f"{hint.name} {problem}"
                        + (f" {named}" if named is not None else "")
                        + " (only a hint: the log is listed without it)",
                        [hint],
                    )
                )
        last = max(commits, default=-1)
        for v in sorted(commits):
            why = _commit_damage(commits[v])
            if why is None:
                continue
            if v == last and v > max(checkpoints, default=-1):
                found.append(
                    (
                        f"torn last commit file {commits[v].name} ({why}): it never "
                        "completed; setting it aside makes version "
                        f"{v - 1} the latest again",
                        [commits[v]],
                    )
                )
            else:
                found.append(
                    (
                        f"damaged commit file {commits[v].name} ({why}), not a torn last "
                        "commit: put back an intact copy of it from a backup "
                        "(lakecurate can only set aside a torn last commit)",
                        [],
                    )
                )
        return found

    def set_aside_log(self, quarantine: Path) -> list[str]:
        """Move the log files ``log_damage`` can fix into the local folder ``quarantine``
        (never delete them): copied whole first, then removed; returns what was moved."""
        done = []
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for _, paths in self.log_damage():
            for path in paths:
                quarantine.mkdir(parents=True, exist_ok=True)
                dest = quarantine / f"{stamp}-{path.name}"
                atomic.write_bytes(dest, path.read_bytes())
                path.delete()
                done.append(f"moved {path} to {dest}")
        self._reload()
        return done

    def live_files(self) -> list[dict[str, Any]]:
        """Each data file of the latest version: ``path`` (absolute), ``rel``, ``rows`` and
        the ``chunk_keys`` range its statistics give (first and last key)."""
        import pyarrow as pa

        dt = self.table()
        if dt is None:
            return []
        actions = pa.table(dt.get_add_actions(flatten=True))
        cols = {
            c: actions[c].to_pylist() if c in actions.column_names else [None] * actions.num_rows
            for c in ("path", "num_records", "min.chunk_key", "max.chunk_key")
        }
        return [
            {
                "rel": unquote(rel),
                "path": str(self.at(unquote(rel))),
                "rows": rows,
                "chunk_keys": sorted({k for k in (lo, hi) if k is not None}),
            }
            for rel, rows, lo, hi in zip(
                cols["path"],
                cols["num_records"],
                cols["min.chunk_key"],
                cols["max.chunk_key"],
                strict=True,
            )
        ]

    def added_in(self) -> dict[str, int]:
        """Data file (relative path) -> the version whose commit added it, from the commit
        files still in the log (a file added before a cleaned-up commit is absent)."""
        out: dict[str, int] = {}
        log = self.loc / LOG_DIR
        for entry in log.files(".json", recursive=False):
            stem = entry.rel.split(".", 1)[0]
            if not stem.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError):
                for line in (log / entry.rel).read_bytes().decode("utf-8").splitlines():
                    if '"add"' in line:
                        add = json.loads(line).get("add") or {}
                        if "path" in add:
                            out[unquote(add["path"])] = int(stem)
        return out

    # -- the read side of time travel, and maintenance (issue 3) ---------------------------
    # Versions are read through the log, never assumed: a version exists when its commit is
    # still in the log (or covered by a checkpoint) and no vacuum removed a file it needs.

    def log_versions(self) -> tuple[int, int] | None:
        """(earliest, latest) version the log can reconstruct, from a listing of
        ``_delta_log`` (cheap: no commit is read); None before the first commit."""
        commits, checkpoints = [], []
        for name in (e.rel for e in (self.loc / LOG_DIR).files(recursive=False)):
            stem = name.split(".", 1)[0]
            if not stem.isdigit():
                continue
            if name.endswith(".json"):
                commits.append(int(stem))
            elif ".checkpoint." in name and name.endswith(".parquet"):
                checkpoints.append(int(stem))
        if not commits:
            return None
        earliest = 0 if 0 in commits else min(checkpoints, default=min(commits))
        return earliest, max(commits)

    def log_entries(self) -> list[dict[str, Any]]:
        """Every commitInfo in the log, oldest first (delta-rs reads each commit file)."""
        dt = self.table()
        if dt is None:
            return []
        dt.update_incremental()
        return sorted(read_history(dt), key=lambda e: int(e["version"]))

    def files_at(self, version: int) -> dict[str, int]:
        """Data file -> rows of one version, from the log's add actions (file statistics)."""
        import pyarrow as pa

        dt = open_table(self.loc, version)
        actions = pa.table(dt.get_add_actions(flatten=True))
        return dict(
            zip(actions["path"].to_pylist(), actions["num_records"].to_pylist(), strict=True)
        )

    def open_version(self, version: int) -> pds.Dataset:
        """The Arrow dataset of ``version``, after checking it by the one rule
        (``Readability``): a vacuum may have removed files it needs, and reading would fail
        halfway otherwise.

        Raises ``LookupError`` (``FilesMissingError`` for missing files); callers turn it into
        a message that names the versions that can be read (``unreadable``).
        """
        self.readability().check(version)
        try:
            dt = open_table(self.loc, version)
        except (DeltaError, OSError) as exc:
            raise LookupError(
                f"the log cannot reconstruct version {version}: {one_line(exc)}"
            ) from exc
        return self._fast_dataset(dt) or dt.to_pyarrow_dataset()

    def _fast_dataset(self, dt: DeltaTable) -> pds.Dataset | None:
        """The dataset of ``dt`` built from its add actions, or None when that is not safe.

        delta-rs's ``to_pyarrow_dataset`` turns every statistic of every file into a Python
        expression: ~1.8 ms per live file, so a lake of 2,000 chunk commits (4,000 files)
        took seconds to open (benchmarks/bench_versions.py). Here each fragment carries only
        its partition (``kept``) and the min/max of ``id`` (for ``explain``): ~20x faster, and
        Parquet row-group statistics still prune the rest inside each file. Only for plain
        local tables without reader features (deletion vectors, column mapping), where the
        log's file list is the whole truth.
        """
        import pyarrow as pa
        import pyarrow.dataset as pds
        import pyarrow.fs as pafs

        protocol = dt.protocol()
        if protocol.min_reader_version > 1 or protocol.reader_features:
            return None
        actions = pa.table(dt.get_add_actions(flatten=True))
        needed = {"path", "partition.kept", "min.id", "max.id"}
        if not needed <= set(actions.column_names):
            return None
        fs = pafs.SubTreeFileSystem(self.loc.fs_path, self.loc.fs)
        fmt = pds.ParquetFileFormat()
        kept, low, high = (pds.field("kept"), pds.field("id"), pds.field("id"))
        fragments = []
        for path, part, lo, hi in zip(
            *(actions[c].to_pylist() for c in ("path", "partition.kept", "min.id", "max.id")),
            strict=True,
        ):
            expr = kept == part
            if lo is not None and hi is not None:
                expr = expr & (low >= lo) & (high <= hi)
            fragments.append(fmt.make_fragment(path, filesystem=fs, partition_expression=expr))
        schema = pa.schema(pa.schema(dt.schema().to_arrow()))
        return pds.FileSystemDataset(fragments, schema, fmt, fs)

    def compact(self, target_size: int | None, metadata: dict[str, str]) -> dict[str, Any]:
        """Rewrite small files into large ones (one OPTIMIZE commit; rows are unchanged).

        No app transaction is written: compaction is not a lakecurate commit, and the app
        transaction watermark is part of the snapshot, so it carries over unchanged.
        """
        self._may_write()
        dt = self.table()
        if dt is None:
            raise LakeError("the lake has no table yet: nothing to compact")
        try:
            return dict(
                dt.optimize.compact(
                    target_size=target_size,
                    commit_properties=CommitProperties(custom_metadata=metadata),
                )
            )
        except (DeltaError, OSError) as exc:
            raise CommitError(
                f"compaction failed: {one_line(exc)}; nothing changed, re-run it"
            ) from exc
        finally:
            self._reload()

    def retention_hours(self) -> float:
        """The table's deleted-file retention (``delta.deletedFileRetentionDuration``, Delta's
        default 1 week): files removed more recently than this are never vacuumed by default."""
        dt = self.table()
        value = (
            (dt.metadata().configuration or {}).get(
                "delta.deletedFileRetentionDuration", "interval 1 weeks"
            )
            if dt
            else ""
        )
        units = {"week": 168.0, "day": 24.0, "hour": 1.0, "minute": 1 / 60, "second": 1 / 3600}
        parts = value.lower().replace("interval", "").split()
        if len(parts) == 2:
            for unit, hours in units.items():
                if parts[1].startswith(unit):
                    return float(parts[0]) * hours
        return 168.0

    def vacuum(self, retention_hours: float, dry_run: bool, metadata: dict[str, str]) -> list[str]:
        """Delete files no version newer than ``retention_hours`` needs; returns them (or, in
        a dry run, the files it would delete). The caller enforces the retention floor."""
        self._may_write()
        dt = self.table()
        if dt is None:
            return []
        try:
            return list(
                dt.vacuum(
                    retention_hours=int(retention_hours),
                    dry_run=dry_run,
                    enforce_retention_duration=False,
                    commit_properties=CommitProperties(custom_metadata=metadata),
                )
            )
        except (DeltaError, OSError) as exc:
            raise CommitError(f"vacuum failed: {one_line(exc)}; re-run it") from exc
        finally:
            self._reload()

    def checkpoint(self) -> int:
        """Write a checkpoint of the latest version (opening any later version then replays
        only the commits after it); returns the version checkpointed."""
        self._may_write()
        dt = self.table()
        if dt is None:
            raise LakeError("the lake has no table yet: nothing to checkpoint")
        dt.update_incremental()
        try:
            dt.create_checkpoint()
        except (DeltaError, OSError) as exc:
            raise CommitError(f"checkpoint failed: {one_line(exc)}; re-run it") from exc
        self._checkpointed = dt.version()
        return dt.version()

    def readability(self) -> Readability:
        """Which versions can be read (see ``Readability``), from one pass over the log: the
        add and remove actions of every commit file, replayed in order, against the data
        files on disk (a few ms per hundred commits: every versioned read can afford it). Kept
        while the log's versions stay the same: a vacuum or a commit adds versions."""
        span = self.log_versions()
        if span is None:
            raise LakeError(
                f"the lake has no versions yet ({self.loc} has no commits): run "
                "`lakecurate ingest` first"
            )
        if self._readability is not None and self._readability[0] == span:
            return self._readability[1]  # resolve, check and message read the log once
        earliest, latest = span
        live: set[str] = set()
        if earliest > 0:  # commits before a checkpoint were cleaned up: start from it
            live = {unquote(rel) for rel in self.files_at(earliest)}
        listed: set[str] | None = None

        def on_disk(rel: str) -> bool:
            nonlocal listed
            if listed is None:  # one listing of the table, not one request per file
                listed = {e.rel for e in self.loc.files(".parquet")}
            return "://" in rel or rel in listed

        gone = {rel for rel in live if not on_disk(rel)}
        missing: dict[int, tuple[int, str]] = {}
        vacuum_seen = False
        log = self.loc / LOG_DIR
        for version in range(earliest, latest + 1):
            commit = log / f"{version:020d}.json"
            if version > earliest or earliest == 0:
                with contextlib.suppress(FileNotFoundError):  # a gap: delta-rs will say so
                    for line in commit.read_bytes().decode("utf-8").splitlines():
                        action = _action(commit.name, line)
                        if "add" in action:
                            rel = unquote(action["add"]["path"])
                            live.add(rel)
                            if not on_disk(rel):
                                gone.add(rel)
                        elif "remove" in action:
                            rel = unquote(action["remove"]["path"])
                            live.discard(rel)
                            gone.discard(rel)
                        elif "VACUUM" in str((action.get("commitInfo") or {}).get("operation")):
                            vacuum_seen = True
            if gone:
                missing[version] = (len(gone), str(self.at(min(gone))))
        found = Readability(earliest, latest, missing, vacuum_seen and latest not in missing)
        self._readability = (span, found)
        return found

    def readable_range(self) -> tuple[int, int]:
        """(first, latest): from ``first`` on every version can be read, by the one rule
        (``Readability``); what messages and ``vacuum`` report."""
        return self.readability().newest_run()

    def resolve(self, version: int | None = None, as_of_ms: int | None = None) -> int:
        """The version to read: ``version`` itself, the last version committed at or before
        ``as_of_ms`` (ms since the epoch, UTC), or the latest. A version or time outside the
        log raises ``LakeError`` naming the versions that can be read; whether the version's
        files are all there is ``open_version``'s check (the same rule ``restore`` applies)."""
        span = self.log_versions()
        if span is None:
            raise LakeError(
                f"the lake has no versions yet ({self.loc} has no commits): run "
                "`lakecurate ingest` first"
            )
        if as_of_ms is None and (version is None or span[0] <= version <= span[1]):
            return span[1] if version is None else version  # the fast path: no log read
        entries = self.log_entries()
        earliest, latest = self.readable_range()
        stamps = {int(e["version"]): int(e["timestamp"]) for e in entries}
        if as_of_ms is not None:
            at = [v for v, ts in stamps.items() if ts <= as_of_ms and span[0] <= v <= latest]
            if at:
                return max(at)
            raise LakeError(
                f"no version of the lake existed at {utc_text(as_of_ms)}: "
                f"{_describe(earliest, latest, stamps)}"
            )
        raise LakeError(f"version {version} does not exist: {_describe(earliest, latest, stamps)}")

    def unreadable(self, version: int, why: object) -> LakeError:
        """The error for a version inside the log that the rule says cannot be read."""
        if isinstance(why, FilesMissingError) and not why.vacuumed:
            return LakeError(
                f"version {version} cannot be read: {why}; put the missing "
                "file(s) back, or `lakecurate restore` a version that does not "
                "need them (`lakecurate verify` lists every missing file)"
            )
        earliest, latest = self.readable_range()
        stamps = {int(e["version"]): int(e["timestamp"]) for e in self.log_entries()}
        return LakeError(
            f"version {version} can no longer be read ({why}): "
            f"{_describe(earliest, latest, stamps)}"
        )


def _write_metrics(files: Sequence[DataFile]) -> dict[str, int]:
    """The write metrics delta-rs records for its own writes (``history`` reads them)."""
    return {
        "num_added_files": len(files),
        "num_removed_files": 0,
        "num_added_rows": sum(f.rows for f in files),
    }


def _action(commit: str, line: str) -> dict[str, Any]:
    """One action of a commit file; a line that is not JSON is one ``LakeError`` line."""
    try:
        action = json.loads(line) if line.strip() else {}
    except ValueError as exc:
        raise LakeError(
            f"cannot read the Delta log: {commit} is damaged ({one_line(exc)}); run "
            "`lakecurate verify --repair`"
        ) from exc
    return action if isinstance(action, dict) else {}


def _parquet_damage(path: Location) -> str | None:
    """Why a Parquet file (a checkpoint) cannot be read whole, or None when it can."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.read_table(path.fs_path, filesystem=path.fs).validate(full=True)
    except (OSError, ValueError, pa.ArrowException) as exc:
        return one_line(exc) or type(exc).__name__
    return None


def _commit_damage(path: Location) -> str | None:
    """Why a commit file is not a Delta commit (one JSON action per line), or None."""
    try:
        lines = [ln for ln in path.read_bytes().decode("utf-8").splitlines() if ln.strip()]
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except OSError as exc:
        return one_line(exc)
    if not lines:
        return "empty"
    for number, line in enumerate(lines, 1):
        try:
            action = json.loads(line)
        except ValueError:
            return f"line {number} is not JSON"
        if not isinstance(action, dict):
            return f"line {number} is not a Delta action"
    return None


def utc_text(ms: int) -> str:
    """A commit timestamp (ms since the epoch) as ``2026-11-30 12:00:00.000 UTC``."""
    stamp = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _describe(earliest: int, latest: int, stamps: dict[int, int]) -> str:
    """``the lake has versions 3 (2026-...) to 9 (2026-...)``: what exists, for an error."""

    def one(v: int) -> str:
        return f"{v} ({utc_text(stamps[v])})" if v in stamps else str(v)

    return f"the lake has versions {one(earliest)} to {one(latest)}"
