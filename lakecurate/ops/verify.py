"""``verify [--deep] [--repair]``: check that the lake's parts agree, and fix what can be fixed.

Checks: the Delta log itself (checkpoints, the ``_last_checkpoint`` hint, every commit file is
JSON); every data file the log names exists and its Parquet footer reads (with ``--deep``, every
page of it reads, its row count matches the log and each document's text still matches its
content hash); the chunks the state calls SUCCESS are exactly those the table holds, at the
versions the log says; no commit intent is left open; the index covers exactly the kept
documents; no temp or stale staged file is left, no data file that no version names (an
interrupted write's), and the Bloom cache files are intact and not ahead of the state.

Repair sets aside what the log can do without (a damaged checkpoint whose commits are all
still there, a stale hint, a torn last commit file) into ``LAKE/quarantine/``, re-derives the
state from the Delta table (``rebuild.resync``), rebuilding ``state.duckdb`` from scratch when
it is missing or damaged, removes the leftovers and rewrites the Bloom cache. A state file
another process holds is busy, never damaged: verify stops without touching anything. Damaged
or missing data files cannot be repaired here; the report names the chunks they hold and the
version to restore.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate import engine
from lakecurate.config import Config
from lakecurate.errors import (
    BusyError,
    IndexFilesError,
    LakeError,
    disk_full,
    is_disk_full,
    lock_conflict,
    one_line,
)
from lakecurate.lake import atomic
from lakecurate.lake.delta import DeltaStore
from lakecurate.lake.lock import LakeLock
from lakecurate.lake.paths import LakePaths
from lakecurate.lake.storage import Location
from lakecurate.store.band_index import NearDedupIndex
from lakecurate.store.index import MembershipIndex
from lakecurate.store.key_files import KeyFiles
from lakecurate.store.rebuild import resync
from lakecurate.store.recovery import (
    chunks_missing_bands,
    committed_staged_files,
    index_missing_bands,
)
from lakecurate.store.signatures import SignatureFiles
from lakecurate.store.state import StateStore

# What DuckDB says about a file that is really damaged (as opposed to busy, full or a bug).
_DAMAGED_STATE = re.compile(
    r"not a valid DuckDB database|corrupt|checksum|could not read enough bytes|"
    r"database has been invalidated|replaying WAL|serializ",
    re.IGNORECASE,
)
# Errors reading a data file's pages (pyarrow's, and the OS's).
_READ_ERRORS = (OSError, ValueError, pa.ArrowException)


@dataclass
class VerifyReport:
    """Problems found (and, with repair, what was done about them)."""

    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    unrepairable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth knowing, not wrong
    files_checked: int = 0
    fixable: bool = False  # whether --repair would fix something of what was found

    @property
    def ok(self) -> bool:
        return not self.problems or (bool(self.repaired) and not self.unrepairable)


class _DamagedStateError(Exception):
    """state.duckdb is really unreadable as a DuckDB database (what DuckDB said)."""


def _state_error(path: Path, exc: BaseException) -> BaseException:
    """What a failure to open or read the state file means: busy (another process holds it),
    a full disk, real damage (``_DamagedStateError``), or anything else (passed on as it is)."""
    holder = lock_conflict(exc)
    if holder is not None:
        return BusyError(
            f"{path} is busy: another process holds it ({holder}); it is not damaged, and "
            "verify changed nothing: wait for that process to finish (or stop it), then re-run"
        )
    if is_disk_full(exc):
        return disk_full(exc, f"verifying {path}")
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, duckdb.Error) and _DAMAGED_STATE.search(str(cur)):
            return _DamagedStateError(one_line(cur))
        cur = cur.__cause__ or cur.__context__
    return exc


def _open_state(path: Path) -> StateStore:
    try:
        return StateStore.open(path)
    except Exception as exc:
        raise _state_error(path, exc) from exc


def _bad_file(
    report: VerifyReport,
    f: dict[str, Any],
    why: str,
    added: dict[str, int],
    keys: list[str] | None = None,
) -> None:
    """One line for a damaged or missing data file: the chunks in it and what to do."""
    verb = "held" if why == "missing" else "holds"
    if keys:
        held = f"it {verb} chunk(s) " + ", ".join(keys)
    elif f["chunk_keys"]:  # the log's statistics: the first and the last key only
        held = f"it {verb} chunk(s) " + " to ".join(f["chunk_keys"])
    else:
        held = "its chunks are unknown"
    version = added.get(f["rel"])
    back = (
        f"`lakecurate restore {version - 1}` (the version before the commit that wrote "
        f"it, {version}) and ingest the same inputs again to redo the chunks after it"
        if version
        else "`lakecurate restore` a version from before it was written and "
        "ingest the same inputs again"
    )
    report.problems.append(
        f"data file {why}: {f['path']}; {held}: put back an intact copy of the file, or {back}"
    )
    report.unrepairable.append(f["path"])


def _file_keys(path: str) -> list[str]:
    """The chunk keys stored in a data file, when at least that column still reads."""
    loc = Location.of(path)
    try:
        rows = pq.read_table(loc.fs_path, columns=["chunk_key"], filesystem=loc.fs)
        return sorted(pc.unique(rows["chunk_key"]).drop_null().to_pylist())
    except _READ_ERRORS:
        return []


def _check_files(delta: DeltaStore, report: VerifyReport, deep: bool) -> None:
    """Every live data file exists and its footer reads; ``deep``: every page reads, the row
    count is the log's and every text still hashes to its content_hash."""
    files = delta.live_files()
    added: dict[str, int] | None = None
    con = engine.connect(threads=1) if deep else None
    try:
        for f in files:
            report.files_checked += 1
            why = _file_problem(f, con)
            if why is not None:
                added = delta.added_in() if added is None else added
                _bad_file(
                    report, f, why, added, None if why == "missing" else _file_keys(f["path"])
                )
    finally:
        if con is not None:
            con.close()


def _file_problem(f: dict[str, Any], con: duckdb.DuckDBPyConnection | None) -> str | None:
    """Why one data file is bad ("missing", "unreadable (...)", "damaged (...)"), or None."""
    loc = Location.of(f["path"])
    if loc.stat() is None:
        return "missing"
    rows = bad = 0
    try:
        if con is None:
            pq.read_metadata(loc.fs_path, filesystem=loc.fs)
            return None
        with loc.open() as file:
            parquet = pq.ParquetFile(file)
            for i in range(parquet.num_row_groups):  # one row group in memory at a time
                group = parquet.read_row_group(i)
                group.validate(full=True)
                rows += group.num_rows
                con.register("file_rows", group)
                try:
                    bad += con.execute(engine.q("verify.text_hash_mismatches")).fetchall()[0][0]
                finally:
                    con.unregister("file_rows")
    except _READ_ERRORS as exc:
        return f"unreadable ({one_line(exc) or type(exc).__name__})"
    if f["rows"] is not None and rows != int(f["rows"]):
        return f"damaged (it has {rows} rows, its commit says {f['rows']})"
    if bad:
        return f"damaged ({bad} document(s) whose text no longer matches its content_hash)"
    return None


def _temp_files(root: Path) -> list[Path]:
    return [
        p
        for p in root.rglob("*")
        if atomic.is_temp(p) and "quarantine" not in p.relative_to(root).parts
    ]


def _check_bloom(index_dir: Path, state: StateStore, report: VerifyReport) -> None:
    """The Bloom files are a cache: damaged or ahead of the state is a problem (repair rewrites
    them from DuckDB); behind the state is normal after a kill and topped up on open."""
    index = MembershipIndex(state.con)
    # A key file it would be topped up from may be unreadable: `_index_size` says so.
    with contextlib.suppress(LakeError):
        report.problems += [f"Bloom cache: {w}" for w in index.open_tier1(index_dir)]


def _index_size(state: StateStore, report: VerifyReport) -> int | None:
    """The content keys the index's files hold (every key file read whole: a missing or
    damaged one is a problem `--repair` fixes by writing the index again from the table)."""
    files = KeyFiles(state.con)
    try:
        files.read("ids")
        return int(files.read("content").num_rows)
    except LakeError as exc:
        report.problems.append(one_line(exc))
        return None


def _table_unreadable(exc: BaseException) -> LakeError:
    return LakeError(
        f"the table's data files cannot be read ({one_line(exc)}): run "
        "`lakecurate verify --deep` to find the damaged file(s)"
    )


def _check_state(
    state: StateStore,
    delta: DeltaStore,
    cfg: Config | None,
    signatures: SignatureFiles,
    report: VerifyReport,
) -> None:
    con = state.con
    success = dict(con.execute(engine.q("verify.success_chunks")).fetchall())
    ds = delta.dataset()
    present: set[str] = set()
    n_kept = 0
    # Chunks queued to be decided again (a changed input took documents they pointed at) left
    # the indexes until the next ingest decides them: their documents are not counted.
    queued = state.redecide_queue()
    if ds is not None:
        try:
            present = set(ds.to_table(columns=["chunk_key"])["chunk_key"].unique().to_pylist())
            # what the content index holds: kept documents and near duplicates
            n_kept = ds.count_rows(
                filter=(
                    pc.field("kept")
                    | (
                        (pc.field("reason").cast(pa.string()) == "near_dup")
                        & ~pc.field("dup_of").is_null()
                    )
                )
                & ~pc.field("chunk_key").isin(pa.array(queued, pa.string()))
            )
        except _READ_ERRORS as exc:
            raise _table_unreadable(exc) from exc
    for key in sorted(present - set(success)):
        report.problems.append(f"chunk {key} is in the table but not SUCCESS in the state")
    for key in sorted(set(success) - present):
        report.problems.append(f"chunk {key} is SUCCESS in the state but not in the table")
    intents = con.execute(engine.q("verify.open_intents")).fetchall()
    for (seq,) in intents:
        report.problems.append(f"commit intent {seq} is still open (an interrupted commit)")
    (max_done,) = con.execute(engine.q("verify.max_done_seq")).fetchall()[0]
    watermark = delta.watermark()
    if int(max_done) != watermark:
        report.problems.append(
            f"the state's last commit is seq {max_done} but the Delta log's "
            f"transaction watermark is {watermark}"
        )
    n_index = _index_size(state, report)
    if ds is not None and n_index is not None and n_index != n_kept:
        report.problems.append(
            f"the content index has {n_index} entries for {n_kept} kept documents "
            "and near duplicates"
        )
    if ds is not None:
        _check_duplicates(state, ds, report, set(queued))
        _check_bands(state, ds, cfg, signatures, report, set(queued))


def _check_duplicates(state: StateStore, ds: Any, report: VerifyReport, queued: set[str]) -> None:
    """Every duplicate points at a document the lake keeps, and no id is kept twice (issue 12:
    a changed input once left duplicates of removed documents dropped for good). Chunks queued
    to be decided again are the next ingest's work, not damage."""
    try:
        rows = ds.to_table(columns=["id", "kept", "reason", "dup_of", "chunk_key"])
    except _READ_ERRORS as exc:
        raise _table_unreadable(exc) from exc
    con = state.con
    con.register("table_rows", rows)
    try:
        dangling = [r[0] for r in con.execute(engine.q("state.dangling_chunks")).fetchall()]
        twice = con.execute(engine.q("verify.kept_ids_twice")).fetchall()
    finally:
        con.unregister("table_rows")
    for key in dangling:
        if key not in queued:
            report.problems.append(
                f"chunk {key} holds duplicates of documents the lake no "
                "longer has (run `lakecurate verify --repair`, then ingest)"
            )
    if queued:
        report.notes.append(
            f"{len(queued)} chunk(s) are queued to be decided again by the next ingest"
        )
    for doc_id, n in twice:
        report.problems.append(f"document id {doc_id!r} is kept {n} times")


def _check_bands(
    state: StateStore,
    ds: Any,
    cfg: Config | None,
    signatures: SignatureFiles,
    report: VerifyReport,
    queued: set[str],
) -> None:
    """The near-dedup band index covers exactly the committed documents that have a signature:
    no rows of commits that left, none of ids the chunk does not hold, no committed chunk
    missing (an ingest would match new documents against a partial index), and, verified,
    every indexed document's signature is in the signature files."""
    con = state.con
    if not con.execute(engine.q("state.has_near_index")).fetchall()[0][0]:
        return
    try:
        rows = ds.to_table(columns=["id", "chunk_key", "reason", "text", "source_line"])
    except _READ_ERRORS as exc:
        raise _table_unreadable(exc) from exc
    (stale,) = con.execute(engine.q("verify.stale_band_docs")).fetchall()[0]
    con.register("table_rows", rows)
    try:
        (foreign,) = con.execute(engine.q("verify.band_docs_not_in_table")).fetchall()[0]
    finally:
        con.unregister("table_rows")
    if stale:
        report.problems.append(
            f"the near-dedup band index holds {stale} document(s) of commits the lake no longer has"
        )
    if foreign:
        report.problems.append(
            f"the near-dedup band index holds {foreign} document id(s) their chunk does not have"
        )
    if cfg is not None and cfg.near_dedup.enabled:
        near = NearDedupIndex.of_config(con, cfg, signatures)
        for key in chunks_missing_bands(state, rows, near):
            if key not in queued:  # a queued chunk is out of the index until decided again
                report.problems.append(f"chunk {key} is missing from the near-dedup band index")
        kinds = [signatures.bands(), *([signatures] if cfg.near_dedup.verify else [])]
        for files in kinds:
            try:
                stored = pa.table({"doc_seq": files.doc_seqs()})
            except IndexFilesError as exc:  # derived data: --repair rebuilds it
                report.problems.append(one_line(exc))
                continue
            con.register("signed_docs", stored)
            try:
                (unsigned,) = con.execute(
                    engine.q("verify.band_docs_without_signature")
                ).fetchall()[0]
            finally:
                con.unregister("signed_docs")
            if unsigned:
                report.problems.append(
                    f"the near-dedup {files.kind} files lack {unsigned} indexed document(s)"
                )


def _repair_bands(
    state: StateStore,
    delta: DeltaStore,
    cfg: Config | None,
    signatures: SignatureFiles,
    report: VerifyReport,
) -> None:
    """Rebuild the band index and its signature files from the committed text (the state was
    just re-derived)."""
    con = state.con
    if not con.execute(engine.q("state.has_near_index")).fetchall()[0][0]:
        return
    with state.transaction():
        con.execute(engine.q("dedup.clear_docs"))
    signatures.clear()
    signatures.bands().clear()
    if cfg is None or not cfg.near_dedup.enabled:
        report.repaired.append("cleared the near-dedup band index (near dedup is off)")
        return
    index_missing_bands(state, delta, NearDedupIndex.of_config(con, cfg, signatures))
    report.repaired.append("rebuilt the near-dedup band index from the table")


def _check_log(delta: DeltaStore, paths: LakePaths, report: VerifyReport, repair: bool) -> bool:
    """The log's own damage, set aside when repairing; whether the table can be read now."""
    damage = delta.log_damage()
    report.problems += [f"Delta log: {what}" for what, _ in damage]
    report.unrepairable += [what for what, paths in damage if not paths]
    report.fixable = any(paths for _, paths in damage)
    if repair:
        report.repaired += delta.set_aside_log(paths.quarantine)
    elif any(paths for _, paths in damage):
        return False  # --repair can fix it; opening the table now would only fail
    try:
        delta.table()
    except LakeError as exc:
        if not damage:
            report.problems.append(one_line(exc))
        report.unrepairable.append(str(delta.loc))
        return False
    return True


def verify(
    paths: LakePaths, cfg: Config | None, *, repair: bool = False, deep: bool = False
) -> VerifyReport:
    """Check the lake at ``paths``; ``deep`` reads every page of every live data file; with
    ``repair``, fix what can be fixed (holds the lock). ``cfg`` is the lake's config: with
    near dedup on, repair rebuilds the band index with its settings.

    Not a write session: it must open (and may replace) a state that is damaged or missing."""
    if not paths.root.is_dir():
        raise LakeError(f"no lake at {paths.root}")
    report = VerifyReport()
    with LakeLock.acquire(paths.lock, "verify"):
        state_path = paths.state
        state: StateStore | None = None
        damaged = False
        if not state_path.exists():
            report.problems.append(f"{state_path} is missing")
        else:
            try:  # first, so a busy state stops verify before it touches anything
                state = _open_state(state_path)
            except _DamagedStateError as exc:
                damaged = True
                report.problems.append(f"{state_path} is unreadable: {exc}")
        try:
            state = _verify(paths, cfg, state, damaged, report, repair, deep)
        finally:
            if state is not None:
                state.close()
    return report


def _verify(
    paths: LakePaths,
    cfg: Config | None,
    state: StateStore | None,
    damaged: bool,
    report: VerifyReport,
    repair: bool,
    deep: bool,
) -> StateStore | None:
    """The checks and the repair; returns the state store to close."""
    root, state_path = paths.root, paths.state
    delta = DeltaStore(paths.documents)
    readable = _check_log(delta, paths, report, repair)
    if readable:
        _check_files(delta, report, deep)
    table_ok = readable and not report.unrepairable
    untracked = delta.untracked_files() if table_ok else []
    report.problems += [f"orphan data file (no version names it): {p}" for p in untracked]
    stale: list[Location] = []
    if state is not None:
        try:
            if table_ok:  # the table cannot be scanned with files missing
                _check_state(state, delta, cfg, SignatureFiles(paths.signatures), report)
            stale = committed_staged_files(paths.staging, state)
            report.problems += [f"staged file of a committed chunk: {p}" for p in stale]
            report.problems += [
                f"leftover key file (no commit names it): {p}"
                for p in KeyFiles(state.con).leftovers()
            ]
            _check_bloom(paths.index, state, report)
        except LakeError as exc:
            report.problems.append(one_line(exc))
            report.unrepairable.append(str(exc))
            table_ok = False
        except Exception as exc:
            why = _state_error(state_path, exc)
            if why is exc:
                raise
            if not isinstance(why, _DamagedStateError):
                raise why from exc
            state.close()
            state, damaged = None, True
            report.problems.append(f"{state_path} is unreadable: {why}")
    temps = _temp_files(root)
    report.problems += [f"leftover temp file: {p}" for p in temps]
    report.fixable = report.fixable or (bool(report.problems) and not report.unrepairable)
    if not repair:
        return state
    if report.unrepairable:
        report.repaired.append(
            "the state was left as it is: the table itself is damaged or cannot be read; see "
            "the problems above for what to put back or which version to restore"
        )
        return state
    if not [p for p in report.problems if not p.startswith("Delta log: ")]:
        return state  # nothing but log files set aside: the table and the state agree
    if state is None:
        if damaged:
            aside = state_path.with_name(f"state.duckdb.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
            os.replace(state_path, aside)
            wal = state_path.with_name("state.duckdb.wal")
            if wal.exists():
                os.replace(wal, aside.with_name(aside.name + ".wal"))
            report.repaired.append(f"moved the unreadable state file to {aside}")
        state = _open_state(state_path)
        report.repaired.append("created a new state.duckdb")
    # Delta's log is the truth: intents and commits it does not hold are dropped, then the
    # state is re-derived from it.
    state.con.execute(engine.q("verify.drop_intents"))
    dropped = state.con.execute(
        engine.q("verify.drop_commits_beyond"), {"watermark": delta.watermark()}
    ).fetchall()
    if dropped:
        report.repaired.append(
            f"forgot {len(dropped)} commit(s) the Delta log no longer holds "
            f"(seq {', '.join(str(s) for (s,) in dropped)})"
        )
    try:
        out = resync(state, delta)
    except _READ_ERRORS as exc:
        raise _table_unreadable(exc) from exc
    report.repaired.append(
        f"re-derived the state from the table: {out.chunks_in_table} chunk(s) SUCCESS, "
        f"{len(out.requeued)} re-queued, {out.commits_added} commit(s) recorded"
    )
    for what, files in (
        ("temp", [Location.of(p) for p in temps]),
        ("orphan data", untracked),
        ("stale staged", stale),
    ):
        for p in files:
            p.delete()
        if files:
            report.repaired.append(f"removed {len(files)} {what} file(s)")
    if swept := KeyFiles(state.con).sweep():  # the old ones the index was written again past
        report.repaired.append(f"removed {swept} leftover key file(s)")
    _repair_bands(state, delta, cfg, SignatureFiles(paths.signatures), report)
    # The Bloom cache, rewritten from the state as it now is.
    index = MembershipIndex(state.con)
    index.open_tier1(paths.index)
    index.save_tier1(paths.index)
    report.repaired.append("rewrote the Bloom cache from state.duckdb")
    return state
