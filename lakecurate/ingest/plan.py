"""Turn the inputs of an ingest into the chunks it must have, reading as little as possible.

The driver only lists and stats inputs (``make_plan``): the stat cache (path, size, mtime_ns,
inode -> sha256 and chunk list) vouches for an unchanged input, which is not read at all; every
other input is *pending*, read and cut by a worker (``PlanOrder``) while the chunks already known
are processed, and joins the plan when its cut comes back (``Planner.cut``). ``verify``
re-reads and re-hashes everything.

Decisions stay in chunk-key order however the cuts arrive: the scheduler decides no chunk whose
key sorts at or after ``Planner.barrier()``, the first key a pending input could still have; and
none at all while a pending input had chunks in the lake (its changed chunks must leave the
lake, and what pointed at them be decided again, before anything is decided against it).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lakecurate.ingest.chunking import (
    SKIP_EMPTY,
    SKIP_HIDDEN,
    SKIP_UNSUPPORTED,
    FileStat,
    Inputs,
    input_exists,
    input_folder,
    stat_input,
)
from lakecurate.ingest.cutting import key_prefix
from lakecurate.progress import NullReporter, Reporter
from lakecurate.store.state import StateStore
from lakecurate.types import ChunkSpec, Format, PlanOrder, Status


@dataclass
class SourceRecord:
    """A stat-cache row to write together with the chunks it describes."""

    path: str
    format: Format
    stat: FileStat
    sha256: str
    chunk_size: int


@dataclass
class Pending:
    """An input the stat cache cannot vouch for: a worker reads and cuts it."""

    path: str
    format: Format
    stat: FileStat
    old: list[tuple[ChunkSpec, Status]]  # every chunk ever planned from it

    @property
    def prefix(self) -> str:
        return key_prefix(self.path)

    @property
    def replaces(self) -> bool:
        """It has chunks that may be in the lake: they may have to leave it first."""
        return any(status is not Status.SUPERSEDED for _, status in self.old)


@dataclass
class Plan:
    """The chunks an ingest must have, and what changed since the last one."""

    specs: list[ChunkSpec] = field(default_factory=list)
    fresh: list[ChunkSpec] = field(default_factory=list)  # from files read now: to record
    sources: list[SourceRecord] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)  # committed chunks whose input changed
    retired: list[str] = field(default_factory=list)  # uncommitted chunks whose input changed
    pending: list[Pending] = field(default_factory=list)  # to be read and cut by a worker
    file_errors: list[str] = field(default_factory=list)
    files: int = 0
    files_read: int = 0
    bytes_read: int = 0
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # by kind: chunking.SKIP_*
    seen_keys: dict[str, str] = field(default_factory=dict)  # chunk key -> the file it is from

    def add(
        self,
        path: str,
        old: list[tuple[ChunkSpec, Status]],
        specs: list[ChunkSpec],
        source: SourceRecord | None,
    ) -> Plan:
        """One file's chunks join the plan (``source``: it was read now, to be recorded);
        returns what that changed, as a plan of its own."""
        delta = Plan()
        if source is not None:
            self.files_read += 1
            self.bytes_read += source.stat.st_size
            delta.sources.append(source)
        new_keys = {s.chunk_key for s in specs}
        for spec, status in old:
            if spec.chunk_key in new_keys or status is Status.SUPERSEDED:
                continue
            (delta.superseded if status is Status.SUCCESS else delta.retired).append(spec.chunk_key)
        for spec in specs:
            if spec.chunk_key in self.seen_keys:
                self.notes.append(
                    f"{path}: chunk {spec.chunk_key} has the same bytes as one of "
                    f"{self.seen_keys[spec.chunk_key]}; ingested once"
                )
                continue
            self.seen_keys[spec.chunk_key] = path
            delta.specs.append(spec)
            if source is not None:
                delta.fresh.append(spec)
        self.specs += delta.specs
        self.fresh += delta.fresh
        self.sources += delta.sources
        self.superseded += delta.superseded
        self.retired += delta.retired
        return delta


def make_plan(
    inputs: Inputs,
    chunk_size: int,
    state: StateStore,
    verify: bool = False,
    reporter: Reporter | None = None,
) -> Plan:
    """List and stat the inputs: the chunks the stat cache vouches for (unless ``verify``),
    and the inputs to read (``Plan.pending``). Nothing is read here.

    A folder input is mirrored: files that left it (removed, renamed) have their committed
    chunks superseded, as a clean run of the folder as it is now would not have them.
    """
    reporter = reporter or NullReporter()
    plan = Plan(
        file_errors=list(inputs.problems),
        notes=list(inputs.notes),
        skipped={k: list(v) for k, v in inputs.skipped.items()},
    )
    found = inputs.files
    paths = [p for p, _ in found]
    cache = state.cached_sources(paths)
    known = state.chunks_of_sources(paths)
    passed_over = [p for k in (SKIP_HIDDEN, SKIP_UNSUPPORTED) for p in inputs.skipped.get(k, [])]
    _departed(inputs.given, set(paths), passed_over, state, plan)
    for path, fmt in found:
        plan.files += 1
        try:
            st = stat_input(path)
        except OSError as exc:
            plan.file_errors.append(f"{path}: cannot stat ({exc.strerror})")
            continue
        if st.st_size == 0 and fmt is not Format.PARQUET:  # said on every run, not hidden
            plan.skipped.setdefault(SKIP_EMPTY, []).append(path)
        old = known.get(path, [])
        cached = cache.get(path)
        if (
            not verify
            and cached is not None
            and cached[:3] == (st.st_size, st.st_mtime_ns, st.st_ino)
            and cached[4] == chunk_size
        ):
            plan.add(path, old, [s for s, _ in old if s.source_sha256 == cached[3]], None)
            reporter.file_planned(path, plan.files - len(plan.pending), len(found), False)
        else:
            plan.pending.append(Pending(path, fmt, st, old))
    plan.pending.sort(key=lambda p: (p.prefix, p.path))  # the order the frontier needs them
    return plan


class Planner:
    """The pending inputs of one ingest, as their cuts come back from the workers: each joins
    the plan and the state (its stat cache and chunks in one transaction), and what it
    replaces leaves the lake (``supersede``: committed chunks; the state: uncommitted ones)."""

    def __init__(
        self,
        plan: Plan,
        chunk_size: int,
        state: StateStore,
        supersede: Callable[[Sequence[str]], int],
        run_id: str,
        reporter: Reporter,
    ) -> None:
        self.plan, self.chunk_size, self.state = plan, chunk_size, state
        self.supersede, self.run_id, self.reporter = supersede, run_id, reporter
        self.unsent = deque(plan.pending)  # in key order: not handed to a worker yet
        self.unplanned = {p.path: p for p in plan.pending}  # not back yet, in key order
        self.replacing = sum(p.replaces for p in plan.pending)  # of them, ones with old chunks
        self.formats = {p.path: p.format for p in plan.pending}
        self.rows_superseded = 0
        self.total = plan.files

    def order(self, path: str) -> PlanOrder:
        """What a worker needs to plan ``path``."""
        return PlanOrder(path, self.formats[path], self.chunk_size)

    def barrier(self) -> str | None:
        """No chunk whose key sorts at or after this may be decided yet (None: any may)."""
        if self.replacing:
            return ""
        first = next(iter(self.unplanned.values()), None)  # the smallest prefix: key order
        return None if first is None else first.prefix

    def cut(self, cuts: Sequence[tuple[str, str, list[ChunkSpec]]]) -> list[ChunkSpec]:
        """Workers' cuts (path, source sha256, chunks) join the plan, recorded in the state
        together (a transaction per small file cost more than reading it); returns their
        chunks (those committed by an earlier run, or DEAD, the caller passes over)."""
        specs: list[ChunkSpec] = []
        retired: list[str] = []
        fresh: list[ChunkSpec] = []
        sources: list[SourceRecord] = []
        for path, sha, cut in cuts:
            p = self._done(path)
            source = SourceRecord(path, p.format, p.stat, sha, self.chunk_size)
            delta = self.plan.add(path, p.old, cut, source)
            if delta.superseded:  # an input that had chunks: the barrier held every decision
                self.rows_superseded += self.supersede(delta.superseded)
            specs += delta.specs
            retired += delta.retired
            fresh += delta.fresh
            sources += delta.sources
        self.state.mark_superseded(retired, self.run_id)
        self.state.add_planned(fresh, sources, self.run_id)
        for path, _, _ in cuts:
            self.reporter.file_planned(path, self.total - len(self.unplanned), self.total, True)
        return specs

    def failed(self, path: str, message: str) -> None:
        """``path`` could not be planned: reported, its chunks in the lake left as they are."""
        self._done(path)
        self.plan.file_errors.append(message)

    def _done(self, path: str) -> Pending:
        p = self.unplanned.pop(path)
        self.replacing -= p.replaces
        return p


def _departed(
    inputs: Sequence[str | Path],
    found: set[str],
    passed_over: Sequence[str],
    state: StateStore,
    plan: Plan,
) -> None:
    """Chunks of files that were below a folder input and are gone from it now.

    A path that still exists but was skipped for a problem (unreadable, now a broken link) is
    not gone: its problem is reported and its rows stay. One that a folder walk no longer reads
    (``passed_over``: hidden, or a format not read; a hidden folder ends with a separator) is
    gone: a clean run of the folder would not have its rows (a lake made before hidden files
    were passed over has some).
    """
    files = set(passed_over)
    folders = tuple(p for p in passed_over if p.endswith((os.sep, "/")))
    gone: dict[str, int] = {}
    for raw in inputs:
        folder = input_folder(os.fspath(raw))
        if folder is None:
            continue
        for path, chunks in state.chunks_under(folder).items():
            if path in found or path in gone:
                continue
            if input_exists(path) and not (path in files or path.startswith(folders)):
                continue
            gone[path] = len(chunks)
            for spec, status in chunks:
                (plan.superseded if status is Status.SUCCESS else plan.retired).append(
                    spec.chunk_key
                )
    if gone:
        state.forget_sources(sorted(gone))
        plan.notes.append(
            f"{len(gone)} file(s) no longer in the input folders; their rows "
            "are removed: " + ", ".join(sorted(gone)[:5]) + (" ..." if len(gone) > 5 else "")
        )
