"""The scheduler over a fake executor: completions out of order, crashes, hangs, a broken pool.

The fake runs the real worker function in this process (no worker processes), so every chunk
is really parsed, filtered, staged, decided and committed into a real lake; only *when* and
*how* each attempt ends is scripted. Whatever the script, the lake must equal the clean run's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import lake_rows

from lakecurate import Lake
from lakecurate import config as configuration
from lakecurate.ingest.chunking import find_inputs
from lakecurate.ingest.runner import IngestReport, ingest
from lakecurate.ingest.worker import finalise_chunk, process_chunk
from lakecurate.lake.paths import LakePaths
from lakecurate.types import ChunkSpec, FinaliseOrder, Outcome, WorkOrder

Task = tuple[ChunkSpec, WorkOrder] | FinaliseOrder


@dataclass
class FakeExecutor:
    """Runs chunks and their finalises in-process; ``delays`` holds a chunk back for that
    many collects (a slow one); ``fate(key, attempt)`` says how an attempt at a chunk ends
    (``finalise_fate`` the same for its finalise): ``"ok"``, ``"crash"`` (its worker died),
    ``"hang"`` (never ends until ``watch`` stops it), ``"bystander"`` (another worker's death
    took it down: blameless) or ``"raise"``."""

    workers: int
    fate: Callable[[str, int], str]
    shuffle: random.Random | None = None
    pending: list[Task] = field(default_factory=list)
    hanging: dict[str, Task] = field(default_factory=dict)
    stopped: list[Outcome] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)
    delays: dict[str, int] = field(default_factory=dict)  # chunk -> collects it stays running
    log: list[tuple[str, str]] = field(default_factory=list)  # (what happened, chunk)
    finalise_fate: Callable[[str, int], str] = lambda _k, _a: "ok"
    finalise_attempts: dict[str, int] = field(default_factory=dict)

    def submit(self, spec: ChunkSpec, order: WorkOrder) -> None:
        self.pending.append((spec, order))

    def finalise(self, order: FinaliseOrder) -> None:
        self.pending.append(order)

    def inflight(self) -> int:
        return len(self.pending) + len(self.hanging) + len(self.stopped)

    def progress(self) -> dict[str, float]:
        return {}

    def started(self) -> list[str]:
        return [t[0].chunk_key for t in self.pending if isinstance(t, tuple)] + [
            k for k, t in self.hanging.items() if isinstance(t, tuple)
        ]

    def collect(self, timeout: float) -> list[Outcome]:
        held = [t for t in self.pending if self.delays.get(key_of(t), 0) > 0]
        for task in held:  # a slow chunk: still running for this many more collects
            self.delays[key_of(task)] -= 1
        batch = [t for t in self.pending if t not in held]
        self.pending = held
        if not batch and not self.stopped:
            time.sleep(timeout)  # nothing finishes: time passes, as in a real pool
            return []
        if self.shuffle is not None:
            self.shuffle.shuffle(batch)
        else:
            batch.reverse()  # the last submitted finishes first
        out, self.stopped = self.stopped, []
        for task in batch:
            key, finalising = key_of(task), isinstance(task, FinaliseOrder)
            tries = self.finalise_attempts if finalising else self.attempts
            tries[key] = attempt = tries.get(key, 0) + 1
            fate = (self.finalise_fate if finalising else self.fate)(key, attempt)
            self.log.append((("finalise " if finalising else "") + fate, key))
            if fate == "ok":
                if isinstance(task, FinaliseOrder):
                    out.append(Outcome(key, finalise=True, files=finalise_chunk(task)))
                else:
                    out.append(Outcome(key, result=process_chunk(*task)))
            elif fate == "crash":
                error = BrokenProcessPool("A process in the process pool was terminated abruptly")
                why = "its worker (pid 1) died of signal 9"
                out.append(Outcome(key, error=error, why=why, finalise=finalising))
            elif fate == "hang":
                self.hanging[key] = task
            elif fate == "bystander":
                tries[key] -= 1  # it never ran to the end: not an attempt
                out.append(Outcome(key, blameless=True, finalise=finalising))
            else:
                error = RuntimeError(f"injected failure of {key}")
                out.append(Outcome(key, error=error, finalise=finalising))
        return out

    def watch(self, heartbeat_timeout: float, chunk_timeout: float) -> None:
        for key, task in list(self.hanging.items()):
            del self.hanging[key]
            why = f"no heartbeat from worker pid 1 (heartbeat_timeout = {heartbeat_timeout:g} s)"
            finalising = isinstance(task, FinaliseOrder)
            self.stopped.append(
                Outcome(key, error=BrokenProcessPool(why), why=why, finalise=finalising)
            )

    def close(self) -> None:
        self.pending.clear()
        self.hanging.clear()


def key_of(task: Task) -> str:
    return task.chunk_key if isinstance(task, FinaliseOrder) else task[0].chunk_key


def run(corpus: Path, cfg_path: Path, lake: Path, fake: FakeExecutor) -> IngestReport:
    paths = LakePaths(lake)
    cfg = configuration.load(cfg_path)
    return ingest(paths, find_inputs([str(corpus)], lake), cfg, executor=lambda _n: fake)


def victim(corpus: Path, cfg_path: Path, tmp_path: Path) -> str:
    """A chunk key in the middle of the commit order (planned by a first, fake-free look)."""
    from lakecurate.ingest.plan import make_plan
    from lakecurate.store.state import StateStore

    state = StateStore.open(tmp_path / "plan.duckdb")
    try:
        inputs = find_inputs([str(corpus)], tmp_path)
        plan = make_plan(inputs, configuration.load(cfg_path).ingest.chunk_size, state, False)
    finally:
        state.close()
    keys = sorted(s.chunk_key for s in plan.specs)
    return keys[len(keys) // 2]


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_completions_out_of_order_change_nothing(
    order: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    shuffle = random.Random(5) if order == "shuffled" else None
    fake = FakeExecutor(2, lambda _k, _a: "ok", shuffle)
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert report.ok and report.chunks_committed == len(fake.attempts)
    assert lake_rows(tmp_path / "lake") == small_reference


@pytest.mark.parametrize("fate", ["crash", "hang", "raise"])
def test_a_failed_attempt_is_retried_and_blamed_with_its_reason(
    fate: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    bad = victim(corpus, small_cfg, tmp_path)
    fake = FakeExecutor(2, lambda k, a: fate if k == bad and a == 1 else "ok")
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert report.ok
    assert fake.attempts[bad] == 2 and (fate, bad) in fake.log
    assert lake_rows(tmp_path / "lake") == small_reference
    lake = Lake.open(tmp_path / "lake")
    assert lake.sql("SELECT attempts FROM chunks WHERE chunk_key = $k", params={"k": bad}).rows == [
        (2,)
    ]
    (message,) = lake.sql(
        "SELECT message FROM chunk_events WHERE chunk_key = $k AND to_status = 'FAILED'",
        params={"k": bad},
    ).rows[0]
    expected = {"crash": "died of signal 9", "hang": "no heartbeat", "raise": "injected failure"}
    assert expected[fate] in message


def test_a_chunk_that_always_fails_is_dead_and_the_others_commit(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    bad = victim(corpus, small_cfg, tmp_path)
    fake = FakeExecutor(2, lambda k, _a: "crash" if k == bad else "ok")
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert [k for k, _ in report.dead] == [bad]
    assert fake.attempts[bad] == configuration.load(small_cfg).ingest.max_attempts
    # every other document is in (its verdict may differ: what duplicated the dead chunk's
    # documents is kept now, as a clean run without that chunk keeps it)
    have = [r[:3] for r in lake_rows(tmp_path / "lake")]
    assert have == [r[:3] for r in small_reference if r[0] != bad]


def test_a_bystander_of_a_broken_pool_runs_again_without_using_an_attempt(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    bad = victim(corpus, small_cfg, tmp_path)
    seen: dict[str, int] = {}

    def fate(key: str, _attempt: int) -> str:
        seen[key] = seen.get(key, 0) + 1
        return "bystander" if key == bad and seen[key] <= 3 else "ok"

    fake = FakeExecutor(2, fate)
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    # three times taken down (as many as max_attempts), then done: none of it was its fault
    assert report.ok and seen[bad] == 4
    failed = Lake.open(tmp_path / "lake").sql(
        "SELECT count(*) FROM chunk_events WHERE chunk_key = $k AND to_status = 'FAILED'",
        params={"k": bad},
    )
    assert failed.rows == [(0,)]
    assert lake_rows(tmp_path / "lake") == small_reference


def test_a_group_is_committed_when_the_frontier_waits_too_long(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """Groups large enough for the whole corpus, open for at most 0.5 s: while a slow chunk
    holds the frontier, what was decided before it is committed; the lake is unchanged."""
    from deltalake import DeltaTable

    from lakecurate.lake.record import CommitRecord

    cfg = tmp_path / "slow.toml"
    cfg.write_text(
        small_cfg.read_text().replace(
            "[ingest]\n", "[ingest]\ncommit_chunks = 1000\ncommit_seconds = 0.5\n"
        )
    )
    slow = victim(corpus, cfg, tmp_path)
    fake = FakeExecutor(2, lambda _k, _a: "ok", delays={slow: 4})
    report = run(corpus, cfg, tmp_path / "lake", fake)
    assert report.ok
    assert lake_rows(tmp_path / "lake") == small_reference
    history = sorted(
        DeltaTable(str(tmp_path / "lake" / "documents")).history(), key=lambda e: e["version"]
    )
    groups = [CommitRecord.parse(e).chunk_keys for e in history]
    assert len(groups) >= 2  # without the time limit, one commit of everything
    assert groups[0] and max(groups[0]) < slow  # committed while the slow chunk was running


@pytest.mark.parametrize("fate", ["crash", "hang", "raise", "bystander"])
def test_a_failed_finalise_runs_again_and_changes_nothing(
    fate: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """A finalise is deterministic: whatever ended its first attempt, the second writes the
    same files (over what the first left) and the lake is the clean run's."""
    bad = victim(corpus, small_cfg, tmp_path)
    seen: list[str] = []

    def finalise_fate(key: str, _attempt: int) -> str:
        seen.append(key)
        return fate if key == bad and seen.count(key) == 1 else "ok"

    fake = FakeExecutor(2, lambda _k, _a: "ok", finalise_fate=finalise_fate)
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert report.ok and (f"finalise {fate}", bad) in fake.log
    assert seen.count(bad) == 2
    assert lake_rows(tmp_path / "lake") == small_reference
    assert_verify_clean(tmp_path / "lake")


def test_a_finalise_that_always_fails_stops_the_run_and_the_next_run_finishes(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    from lakecurate.errors import CommitError

    bad = victim(corpus, small_cfg, tmp_path)
    fake = FakeExecutor(
        2, lambda _k, _a: "ok", finalise_fate=lambda k, _a: "raise" if k == bad else "ok"
    )
    with pytest.raises(CommitError, match=f"data files of {bad}.*re-run"):
        run(corpus, small_cfg, tmp_path / "lake", fake)
    assert fake.finalise_attempts[bad] == configuration.load(small_cfg).ingest.max_attempts
    report = run(corpus, small_cfg, tmp_path / "lake", FakeExecutor(2, lambda _k, _a: "ok"))
    assert report.ok
    assert lake_rows(tmp_path / "lake") == small_reference
    assert_verify_clean(tmp_path / "lake")


def assert_verify_clean(lake: Path) -> None:
    """``verify`` finds nothing: no orphan data file, the index agrees with the table."""
    report = Lake.open(lake).verify()
    assert not report.problems, report.problems
