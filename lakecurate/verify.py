"""``verify [--repair]``: check that the lake's parts agree, and fix what can be fixed.

Checks: every data file the Delta log names exists and its Parquet footer reads; the chunks the
state calls SUCCESS are exactly those the table holds, at the versions the log says; no commit
intent is left open; the index covers exactly the kept documents; no temp or stale staged file is
left, no data file that no version names (an interrupted write's), and the Bloom cache files
are intact and not ahead of the state. Repair re-derives the state from the Delta table
(``rebuild.resync``), rebuilding ``state.duckdb`` from scratch when it is missing or unreadable,
removes the leftovers and rewrites the Bloom cache; missing data files cannot be repaired
(restore an earlier version instead).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakecurate import engine
from lakecurate.commit import committed_staged_files
from lakecurate.errors import LakeError
from lakecurate.index import MembershipIndex
from lakecurate.lake.delta import DeltaStore
from lakecurate.lock import LakeLock
from lakecurate.rebuild import resync
from lakecurate.state import StateStore


@dataclass
class VerifyReport:
    """Problems found (and, with repair, what was done about them)."""

    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    unrepairable: list[str] = field(default_factory=list)
    files_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems or (bool(self.repaired) and not self.unrepairable)


def _check_files(delta: DeltaStore, report: VerifyReport) -> None:
    dt = delta.table()
    if dt is None:
        return
    for uri in dt.file_uris():
        report.files_checked += 1
        try:
            pq.read_metadata(uri)
        except FileNotFoundError:
            report.problems.append(f"data file missing: {uri}")
            report.unrepairable.append(uri)
        except (OSError, ValueError) as exc:
            report.problems.append(f"data file unreadable: {uri} ({exc})")
            report.unrepairable.append(uri)


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".tmp_" in p.name or p.name.endswith(".toml.tmp")]


def _check_bloom(root: Path, state: StateStore, report: VerifyReport) -> None:
    """The Bloom files are a cache: damaged or ahead of the state is a problem (repair rewrites
    them from DuckDB); behind the state is normal after a kill and topped up on open."""
    index = MembershipIndex(state.con)
    report.problems += [f"Bloom cache: {w}" for w in index.open_tier1(root / "index")]


def _check_state(state: StateStore, delta: DeltaStore, report: VerifyReport) -> None:
    con = state.con
    success = dict(con.execute(engine.q("verify.success_chunks")).fetchall())
    ds = delta.dataset()
    present: set[str] = set()
    if ds is not None:
        present = set(ds.to_table(columns=["chunk_key"])["chunk_key"].unique().to_pylist())
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
        report.problems.append(f"the state's last commit is seq {max_done} but the Delta log's "
                               f"transaction watermark is {watermark}")
    if ds is not None:
        (n_index,) = con.execute(engine.q("verify.index_size")).fetchall()[0]
        n_kept = ds.count_rows(filter=pc.field("kept"))
        if int(n_index) != n_kept:
            report.problems.append(f"the content index has {n_index} entries for {n_kept} kept "
                                   "documents")


def verify(root: Path, *, repair: bool = False) -> VerifyReport:
    """Check the lake at ``root``; with ``repair``, fix what can be fixed (holds the lock)."""
    report = VerifyReport()
    state_path = root / "state.duckdb"
    delta = DeltaStore(root / "documents")
    if not root.is_dir():
        raise LakeError(f"no lake at {root}")
    with LakeLock.acquire(root / "lock", "verify"):
        _check_files(delta, report)
        untracked = delta.untracked_files() if not report.unrepairable else []
        report.problems += [f"orphan data file (no version names it): {p}" for p in untracked]
        stale: list[Path] = []
        state: StateStore | None = None
        if not state_path.exists():
            report.problems.append(f"{state_path} is missing")
        else:
            try:
                state = StateStore.open(state_path)
                if not report.unrepairable:  # the table cannot be scanned with files missing
                    _check_state(state, delta, report)
                stale = committed_staged_files(root / "staging", state)
                report.problems += [f"staged file of a committed chunk: {p}" for p in stale]
                _check_bloom(root, state, report)
            except Exception as exc:  # a corrupt file fails in many ways; all mean "rebuild"
                if state is not None:
                    state.close()
                state = None
                report.problems.append(f"{state_path} is unreadable: {exc}")
        temps = _temp_files(root)
        report.problems += [f"leftover temp file: {p}" for p in temps]
        if state is None and state_path.exists() and repair:
            aside = state_path.with_name(f"state.duckdb.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
            os.replace(state_path, aside)
            wal = state_path.with_name("state.duckdb.wal")
            if wal.exists():
                os.replace(wal, aside.with_name(aside.name + ".wal"))
            report.repaired.append(f"moved the unreadable state file to {aside}")
        if repair and report.unrepairable:
            report.repaired.append(
                "nothing repaired: the table itself is damaged; `lakecurate restore` a version "
                "whose files are intact, or put the missing files back")
        elif repair and report.problems:
            if state is None:
                state = StateStore.open(state_path)
                report.repaired.append("created a new state.duckdb")
            state.con.execute(engine.q("verify.drop_intents"))
            out = resync(state, delta)
            report.repaired.append(
                f"re-derived the state from the table: {out.chunks_in_table} chunk(s) SUCCESS, "
                f"{len(out.requeued)} re-queued, {out.commits_added} commit(s) recorded")
            for what, paths in (("temp", temps), ("orphan data", untracked),
                                ("stale staged", stale)):
                for p in paths:
                    p.unlink(missing_ok=True)
                if paths:
                    report.repaired.append(f"removed {len(paths)} {what} file(s)")
            # The Bloom cache, rewritten from the state as it now is.
            index = MembershipIndex(state.con)
            index.open_tier1(root / "index")
            index.save_tier1(root / "index")
            report.repaired.append("rewrote the Bloom cache from state.duckdb")
        if state is not None:
            state.close()
    return report
