"""Explicit table maintenance: ``compact``, ``vacuum`` (dry run first), ``checkpoint``.

None of these changes a document, so none is a lakecurate commit: they carry no app
transaction and no ``lakecurate.seq``, the transaction watermark (part of the snapshot)
carries over, and the state's chunk -> (commit seq, Delta version) mapping stays true:
compaction only adds a version, and every older version still reads the files it always did
until a vacuum removes them. Each takes the lake lock and first reconciles an interrupted
ingest, exactly as ``ingest`` would, so it never runs between a Delta commit and the state
update that must follow it.

Vacuum is the one that can break time travel: it deletes files that only versions older than
the retention need. A retention below the table's (Delta's default: 7 days) is refused unless
forced, the way Delta itself refuses it, and the default is a dry run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lakecurate.config import Config
from lakecurate.errors import LakeError
from lakecurate.lake.delta import DeltaStore
from lakecurate.lake.paths import LakePaths
from lakecurate.lake.record import CommitRecord
from lakecurate.lake.storage import Location
from lakecurate.store.key_files import SPACES
from lakecurate.store.session import write_session


@dataclass
class CompactReport:
    """What ``compact`` did."""

    version_before: int
    version_after: int
    files_before: int
    files_after: int
    rows: int
    watermark: int
    key_files_before: int = 0  # the membership index's key files (``KeyFiles.compact``)
    key_files_after: int = 0


@dataclass
class VacuumReport:
    """What ``vacuum`` deleted (or, in a dry run, would delete)."""

    dry_run: bool
    retention_hours: float
    files: list[str] = field(default_factory=list)
    bytes: int = 0
    readable: tuple[int, int] | None = None  # versions still readable afterwards


def _rows(delta: DeltaStore) -> int:
    ds = delta.dataset()
    return 0 if ds is None else int(ds.count_rows())


def compact(paths: LakePaths, cfg: Config | None, target_size: int | None = None) -> CompactReport:
    """Rewrite the table's small files (one per chunk commit) into files of about
    ``target_size`` bytes (delta-rs default: 100 MiB); checks that the rows and the
    watermark are unchanged afterwards."""
    documents = paths.documents
    with write_session(paths, "compact", str(target_size or ""), cfg) as session:
        before = DeltaStore(documents)
        if before.table() is None:
            raise LakeError("the lake has no table yet: nothing to compact")
        version, watermark = before.version(), before.watermark()
        files, rows = len(before.referenced_files()), _rows(before)
        before.compact(target_size, CommitRecord("COMPACT", session.run_id).metadata())
        after = DeltaStore(documents)
        if after.watermark() != watermark or _rows(after) != rows:
            raise LakeError(  # delta-rs guarantees both; this is a tripwire, not a path
                f"compaction changed the table (watermark {watermark} -> {after.watermark()}, "
                f"rows {rows} -> {_rows(after)}): restore version {version}"
            )
        # The index's key files too: one per ingest batch, each opened by every cache load.
        with session.state.transaction():
            merged = [session.index.files.compact(space) for space in SPACES]
        report = CompactReport(
            version,
            after.version(),
            files,
            len(after.referenced_files()),
            rows,
            watermark,
            sum(b for b, _ in merged),
            sum(a for _, a in merged),
        )
        session.finish(
            "OK",
            f"compacted {files} file(s) into {report.files_after}; version {report.version_after}; "
            f"key files {report.key_files_before} -> {report.key_files_after}",
        )
        return report


def vacuum(
    paths: LakePaths,
    cfg: Config | None,
    dry_run: bool = True,
    retention_hours: float | None = None,
    force: bool = False,
) -> VacuumReport:
    """Delete data files that no version newer than ``retention_hours`` (default: the
    table's retention) needs, and files no commit ever referenced (interrupted writes)."""
    documents = paths.documents
    delta = DeltaStore(documents)
    floor = delta.retention_hours()
    hours = floor if retention_hours is None else retention_hours
    if hours < 0:
        raise LakeError(f"retention must be 0 hours or more, not {hours:g}")
    if hours < floor and not force:
        raise LakeError(
            f"a retention of {hours:g} h is below the table's deleted-file retention of "
            f"{floor:g} h (delta.deletedFileRetentionDuration; Delta's default is 7 days): it "
            "would delete files that recent versions and readers still in progress need. Use "
            "a retention of at least that, or --force if no one reads old versions"
        )
    if delta.table() is None:
        return VacuumReport(dry_run, hours)
    if dry_run:
        files = delta.vacuum(hours, True, {})
        return VacuumReport(True, hours, files, _size(documents, files))
    with write_session(paths, "vacuum", f"retention_hours={hours:g}", cfg) as session:
        delta = DeltaStore(documents)
        planned = delta.vacuum(hours, True, {})
        size = _size(documents, planned)
        files = delta.vacuum(hours, False, CommitRecord("VACUUM", session.run_id).metadata())
        readable = DeltaStore(documents).readable_range()
        session.finish(
            "OK",
            f"vacuumed {len(files)} file(s), {size} bytes; "
            f"readable versions {readable[0]} to {readable[1]}",
        )
        return VacuumReport(False, hours, files, size, readable)


def _size(documents: Location, files: list[str]) -> int:
    """The bytes of ``files`` (as delta-rs's vacuum names them) that are still there."""
    delta = DeltaStore(documents)
    return sum(st.size for name in files if (st := delta.at(name).stat()) is not None)


def checkpoint(paths: LakePaths, cfg: Config | None) -> int:
    """Write a Delta checkpoint of the latest version; returns that version.

    delta-rs writes one every 100 commits on its own; an explicit one is for after a burst
    of commits, or before handing the table to a reader that replays logs slowly.
    """
    with write_session(paths, "checkpoint", "", cfg) as session:
        version = DeltaStore(paths.documents).checkpoint()
        session.finish("OK", f"checkpoint at version {version}")
        return version
