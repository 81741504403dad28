"""The write session: what every command that changes a lake does first, in one place.

Take the lake lock, open the state, record a run, bring a stale state up to the Delta log,
finish or abandon interrupted commits (near-dedup bands included), index committed chunks the
band index lacks and, for commands that look documents up, open the Bloom tier. Before this
was one function, four commands each did a part of it, and a ``compact`` between a crash and
the next ingest finalised the interrupted commit without its bands.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from lakecurate.config import Config
from lakecurate.errors import one_line
from lakecurate.lake import atomic
from lakecurate.lake.delta import DeltaStore, guard_writes
from lakecurate.lake.lease import Lease
from lakecurate.lake.lock import LakeLock
from lakecurate.lake.paths import LakePaths
from lakecurate.store import remote
from lakecurate.store.band_index import NearDedupIndex
from lakecurate.store.band_shards import Shards
from lakecurate.store.index import MembershipIndex
from lakecurate.store.key_files import SPACES
from lakecurate.store.rebuild import catch_up, rewrite_index
from lakecurate.store.recovery import index_missing_bands, index_near_duplicates, reconcile
from lakecurate.store.signatures import SignatureFiles
from lakecurate.store.state import StateStore

DECIDERS_PER_CORE = 2
"""At most this many decider processes per core of the driver's machine: more shards than
cores search no faster, and each is a process of its own (88 MiB idle, measured); a
config asking for 1,000 started them all and the kernel killed the driver."""


@dataclass
class WriteSession:
    """An open lake, held for writing: the state, the table, the indexes and the run."""

    paths: LakePaths
    state: StateStore
    delta: DeltaStore
    index: MembershipIndex
    near: NearDedupIndex | None
    run_id: str
    notes: list[str] = field(default_factory=list)
    # ``[ingest] deciders`` processes: they hold tier 2's keys and the band index's rows.
    deciders: Shards | None = None
    done: int = 0  # chunks committed, for the run row if the command fails
    dead: int = 0

    def finish(self, outcome: str, message: str) -> None:
        """Record how the run ended (a command that does not call this is recorded FAILED)."""
        self.state.finish_run(self.run_id, outcome, self.done, self.dead, message)


@contextlib.contextmanager
def write_session(
    paths: LakePaths,
    command: str,
    args: str,
    cfg: Config | None,
    *,
    create: bool = False,
    bloom: bool = False,
) -> Iterator[WriteSession]:
    """Open the lake at ``paths`` for ``command`` (see the module docstring). ``cfg`` is the
    lake's config (its near-dedup settings say whether there is a band index to keep up);
    ``create`` allows a lake that does not exist yet; ``bloom`` opens the Bloom tier and saves
    it however the session ends."""
    if create:
        paths.root.mkdir(parents=True, exist_ok=True)
        paths.staging.makedirs()
    else:
        paths.require_state(command)
    with LakeLock.acquire(paths.lock, command) as lock, _lease(paths, command):
        state = StateStore.open(paths.state)
        try:
            run_id = state.begin_run(command, args, cfg.hash if cfg else "")
            session = WriteSession(
                paths, state, DeltaStore(paths.documents), MembershipIndex(state.con), None, run_id
            )
            if lock.previous:
                session.notes.append(f"took over the lock of a dead process: {lock.previous}")
            try:
                _open(session, cfg, bloom)
                try:
                    yield session
                finally:
                    if bloom:
                        session.index.save_tier1(paths.index)
                # Key files of the commits this command forgot (superseded, decided again).
                session.index.files.sweep()
                _copy_to_lake(session)
            except BaseException as exc:
                # On a full disk these writes may fail too: the first error is the news.
                with contextlib.suppress(Exception):
                    state.reset_running(run_id)
                    session.finish("FAILED", f"{type(exc).__name__}: {exc}"[:2000])
                raise
        finally:
            with contextlib.suppress(Exception):
                if session.near is not None:
                    session.near.close()  # its decider processes, when it has some
                if session.deciders is not None:
                    session.deciders.close()
            with contextlib.suppress(Exception):
                state.close()


@contextlib.contextmanager
def _lease(paths: LakePaths, command: str) -> Iterator[None]:
    """An object-store lake's writer lease (``lake.lease``), checked before every Delta write
    while the command runs; nothing on local disk (the lock is the whole story there)."""
    if paths.shared is None:
        yield
        return
    with (
        Lease.acquire(paths.shared, command, str(paths.root)) as lease,
        guard_writes(paths.documents, lease.check),
    ):
        yield


def _copy_to_lake(session: WriteSession) -> None:
    """An object-store lake's state folder, copied to the lake after a command that wrote it
    (``store.remote``). A failed copy fails nothing: the Delta log stays the truth."""
    try:
        remote.save(session.paths, session.state, session.delta.watermark())
    except OSError as exc:
        session.notes.append(
            f"could not copy the state to {session.paths.name}/{remote.STATE_FOLDER} "
            f"({one_line(exc)}); another machine would re-derive it from the Delta log"
        )


def _open(session: WriteSession, cfg: Config | None, bloom: bool) -> None:
    """Everything between taking the lock and the command's own work."""
    state, delta = session.state, session.delta
    # A stale state must not number commits below the log's (issue 12, D3).
    if note := catch_up(state, delta):
        session.notes.append(note)
    if cfg is not None and cfg.ingest.deciders:
        count, cores = cfg.ingest.deciders, os.cpu_count() or 1
        if count > DECIDERS_PER_CORE * cores:
            # Where the index is held decides nothing: fewer shards give the same lake.
            session.notes.append(
                f"[ingest] deciders = {count} is more than this machine's {cores} core(s) "
                f"run well: {DECIDERS_PER_CORE * cores} decider processes hold the index"
            )
            count = DECIDERS_PER_CORE * cores
        session.deciders = Shards(count, cfg.ingest.heartbeat_timeout)
        session.index.hold_keys_in(session.deciders)
    if cfg is not None and cfg.near_dedup.enabled:
        signatures = SignatureFiles(session.paths.signatures)
        session.near = NearDedupIndex.of_config(state.con, cfg, signatures, session.deciders or 0)
    session.notes += reconcile(
        state, delta, session.index, session.near, session.paths.staging, session.run_id
    )
    if lost := session.index.files.missing():
        # The index's truth is derived from the table: a lost key file is written again.
        rewrite_index(state, delta)
        session.index.forget()
        for space in SPACES:  # rebuilt from the keys written again
            (session.paths.index / f"{space}.bloom").unlink(missing_ok=True)
        session.notes.append(
            f"{len(lost)} key file(s) of the membership index were missing from "
            f"{session.index.files.folder}: wrote the index again from the table"
        )
    if index_near_duplicates(state, delta):
        # Its rows came with old seqs, which the Bloom file's watermark says it has.
        (session.paths.index / "content.bloom").unlink(missing_ok=True)
        session.notes.append(
            "indexed the lake's near duplicates as sources of exact copies (once, for a lake "
            "made before they were)"
        )
    if session.near is not None and (note := index_missing_bands(state, delta, session.near)):
        session.notes.append(note)
    if bloom:
        session.notes += session.index.open_tier1(session.paths.index)
    # The temp files a killed writer left (a snapshot, a signature, band or Bloom file cut off
    # while it was written): this session holds the lake, so no other writer owns them.
    for leftover in [*session.paths.root.iterdir(), *session.paths.index.rglob("*")]:
        if atomic.is_temp(leftover) and leftover.is_file():
            leftover.unlink(missing_ok=True)
