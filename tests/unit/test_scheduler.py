"""The scheduler over a fake executor: completions out of order, crashes, hangs, a broken pool.

The fake runs the real worker function in this process (no worker processes), so every chunk
is really parsed, filtered, staged, decided and committed into a real lake; only *when* and
*how* each attempt ends is scripted. Whatever the script, the lake must equal the clean run's.
"""

from __future__ import annotations

import errno
import random
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import lake_rows

from lakecurate import Lake
from lakecurate import config as configuration
from lakecurate.ingest.chunking import find_inputs
from lakecurate.ingest.executor import FINALISE, PLAN, outcomes, task_id
from lakecurate.ingest.runner import IngestReport, ingest
from lakecurate.ingest.worker import finalise_chunk, plan_input, process_chunks
from lakecurate.lake.paths import LakePaths
from lakecurate.types import ChunkSpec, FinaliseOrder, Outcome, PlanOrder, WorkOrder

Task = tuple[list[ChunkSpec], WorkOrder] | FinaliseOrder | list[PlanOrder]


@dataclass
class FakeExecutor:
    """Runs chunks, their finalises and the planning of inputs in-process; ``delays`` holds a
    chunk (or an input's planning, by path) back for that many collects (a slow one);
    ``fate(key, attempt)`` says how an attempt at a chunk ends (``finalise_fate`` the same for
    its finalise, ``plan_fate`` for planning an input, by path): ``"ok"``, ``"crash"`` (its
    worker died), ``"hang"`` (never ends until ``watch`` stops it), ``"bystander"`` (another
    worker's death took it down: blameless), ``"full"`` (the disk) or ``"raise"``. A bundle
    of chunks ends as its first chunk (in key order) whose fate is not ``"ok"`` says, for all
    of them."""

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
    plan_fate: Callable[[str, int], str] = lambda _k, _a: "ok"
    plan_attempts: dict[str, int] = field(default_factory=dict)

    def plan(self, orders: list[PlanOrder]) -> None:
        self.pending.append(orders)

    def submit(self, specs: list[ChunkSpec], order: WorkOrder) -> None:
        self.pending.append((specs, order))

    def finalise(self, order: FinaliseOrder) -> None:
        self.pending.append(order)

    def inflight(self) -> int:
        return len(self.pending) + len(self.hanging) + len(self.stopped)

    def progress(self) -> dict[str, float]:
        return {}

    def started(self) -> list[str]:
        return [k for t in [*self.pending, *self.hanging.values()] for k in chunks_of(t)]

    def collect(self, timeout: float) -> list[Outcome]:
        held = [t for t in self.pending if any(self.delays.get(k, 0) > 0 for k in keys_of(t))]
        for task in held:  # a slow chunk: still running for this many more collects
            for key in keys_of(task):
                self.delays[key] = max(0, self.delays.get(key, 0) - 1)
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
            tid, keys = id_of(task), keys_of(task)
            planning, finalising = isinstance(task, list), isinstance(task, FinaliseOrder)
            tries, fate_of, kind = (
                (self.plan_attempts, self.plan_fate, "plan ")
                if planning
                else (self.finalise_attempts, self.finalise_fate, "finalise ")
                if finalising
                else (self.attempts, self.fate, "")
            )
            fates = []
            for key in keys:
                tries[key] = attempt = tries.get(key, 0) + 1
                fates.append(fate_of(key, attempt))
                self.log.append((kind + fates[-1], key))
            failed = [(f, k) for f, k in zip(fates, keys, strict=True) if f != "ok"]
            fate, key = failed[0] if failed else ("ok", keys[0])
            if isinstance(task, list) and fate in ("ok", "raise", "full"):
                # an input's own failure is returned with its cut, as plan_inputs does
                results = [self._cut(o, f) for o, f in zip(task, fates, strict=True)]
                out += outcomes(tid, keys, result=results)
            elif fate == "ok":
                value = (
                    finalise_chunk(task)
                    if isinstance(task, FinaliseOrder)
                    else process_chunks(*task)  # type: ignore[misc]
                )
                out += outcomes(tid, keys, result=value)
            elif fate == "crash":
                error = BrokenProcessPool("A process in the process pool was terminated abruptly")
                why = "its worker (pid 1) died of signal 9"
                out += outcomes(tid, keys, error=error, why=why)
            elif fate == "hang":
                self.hanging[tid] = task
            elif fate == "full":
                out += outcomes(tid, keys, error=disk_is_full())
            elif fate == "bystander":
                for k in keys:
                    tries[k] -= 1  # it never ran to the end: not an attempt
                out += outcomes(tid, keys, blameless=True)
            else:
                error = RuntimeError(f"injected failure of {key}")
                out += outcomes(tid, keys, error=error)
        return out

    @staticmethod
    def _cut(order: PlanOrder, fate: str) -> tuple[str, list[ChunkSpec]] | Exception:
        if fate == "ok":
            return plan_input(order)
        if fate == "full":
            return disk_is_full()
        return RuntimeError(f"injected failure planning {order.path}")

    def watch(self, heartbeat_timeout: float, chunk_timeout: float) -> None:
        for tid, task in list(self.hanging.items()):
            del self.hanging[tid]
            why = f"no heartbeat from worker pid 1 (heartbeat_timeout = {heartbeat_timeout:g} s)"
            error = BrokenProcessPool(why)
            self.stopped += outcomes(tid, keys_of(task), error=error, why=why)

    def close(self) -> None:
        self.pending.clear()
        self.hanging.clear()


def keys_of(task: Task) -> list[str]:
    """What a task's attempts, fates and outcomes go by: its chunks, the inputs it plans, or
    its finalise's chunk."""
    if isinstance(task, list):
        return [o.path for o in task]
    return [task.chunk_key] if isinstance(task, FinaliseOrder) else chunks_of(task)


def chunks_of(task: Task) -> list[str]:
    """The chunks a task processes (none for a finalise or a planning)."""
    return [] if isinstance(task, FinaliseOrder | list) else [s.chunk_key for s in task[0]]


def id_of(task: Task) -> str:
    """The task's id as the local executor names it."""
    if isinstance(task, FinaliseOrder):
        return task.chunk_key + FINALISE
    return task_id(keys_of(task), PLAN if isinstance(task, list) else "")


def disk_is_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def batch_sizes(monkeypatch: pytest.MonkeyPatch, cls: type, method: str) -> list[int]:
    """The lengths of the batches ``cls.method(self, batch)`` is called with, as it is."""
    sizes: list[int] = []
    original = getattr(cls, method)

    def counting(self: object, batch: list) -> list:  # type: ignore[type-arg]
        sizes.append(len(batch))
        return original(self, batch)  # type: ignore[no-any-return]

    monkeypatch.setattr(cls, method, counting)
    return sizes


@pytest.fixture(autouse=True)
def one_chunk_a_task(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks go one to a task, as large ones do (the tests of retries, blame and attempts
    script each chunk's attempts), except in the tests marked ``bundles``."""
    from lakecurate.ingest import scheduler

    if request.node.get_closest_marker("bundles") is None:
        monkeypatch.setattr(scheduler, "BUNDLE_CHUNKS", 1)


def recording(fake: FakeExecutor, monkeypatch: pytest.MonkeyPatch) -> list[list[ChunkSpec]]:
    """The chunk tasks ``fake`` is given, in order."""
    tasks: list[list[ChunkSpec]] = []

    def submit(specs: list[ChunkSpec], order: WorkOrder) -> None:
        tasks.append(specs)
        FakeExecutor.submit(fake, specs, order)

    monkeypatch.setattr(fake, "submit", submit)
    return tasks


def run(corpus: Path, cfg_path: Path, lake: Path, fake: FakeExecutor) -> IngestReport:
    paths = LakePaths(lake)
    cfg = configuration.load(cfg_path)
    return ingest(paths, find_inputs([str(corpus)], lake), cfg, executor=lambda _n: fake)


def victim(corpus: Path, cfg_path: Path, tmp_path: Path) -> str:
    """A chunk key in the middle of the commit order (planned by a first, fake-free look)."""
    from lakecurate.ingest.cutting import plan_file

    chunk_size = configuration.load(cfg_path).ingest.chunk_size
    keys = sorted(
        s.chunk_key
        for path, fmt in find_inputs([str(corpus)], tmp_path).files
        for s in plan_file(path, fmt, chunk_size)[1]
    )
    return keys[len(keys) // 2]


@pytest.mark.parametrize(  # the default run keeps "shuffled"
    "order", [pytest.param("reversed", marks=pytest.mark.slow), "shuffled"]
)
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


def test_quick_chunks_are_submitted_many_ahead_and_decided_many_at_a_time(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks that take a worker a few milliseconds: more tasks are kept in flight than two
    per worker, the run at the frontier is decided by one query, and the lake is the one a
    chunk-at-a-time run gives (``small_reference``)."""
    from lakecurate.ingest import scheduler
    from lakecurate.ingest.commit import Committer

    monkeypatch.setattr(scheduler, "QUICK_TASK_SECONDS", 60.0)  # quick on any machine
    batches = batch_sizes(monkeypatch, Committer, "decide")
    fake = FakeExecutor(2, lambda _k, _a: "ok", shuffle=random.Random(3))
    most = 0

    def submit(specs: list[ChunkSpec], order: WorkOrder) -> None:
        nonlocal most
        FakeExecutor.submit(fake, specs, order)
        most = max(most, fake.inflight())

    monkeypatch.setattr(fake, "submit", submit)
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert report.ok and report.chunks_committed == len(fake.attempts) > 4
    assert most > 2 * fake.workers
    assert max(batches) > 1 and len(batches) < report.chunks_committed
    assert lake_rows(tmp_path / "lake") == small_reference


def test_a_batch_decides_as_its_chunks_one_after_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tiny chunks whose documents repeat ids and contents across chunks (some filtered out,
    some malformed, ids given or not): decided many at a time, they get the verdicts and
    ``dup_of`` a decision per chunk (``commit_seconds = 0``: one chunk per group and batch)
    gives. With staged files of two layouts among them (a resume across versions: here an
    extra key column on every other chunk), a batch goes one chunk at a time, each decided
    against the one before."""
    import json

    from lakecurate.ingest import commit, scheduler

    monkeypatch.setattr(scheduler, "QUICK_TASK_SECONDS", 60.0)
    rng = random.Random(11)
    lines = []
    for _ in range(240):
        roll = rng.random()
        if roll < 0.05:
            lines.append('{"id": "broken", "text": ')  # malformed
            continue
        doc: dict[str, str] = {
            "text": rng.choice(["", "  "])
            if roll < 0.1
            else f"words {rng.randrange(60)} and more words"
        }
        if rng.random() < 0.8:
            doc["id"] = f"d{rng.randrange(300)}"
        lines.append(json.dumps(doc))
    corpus = tmp_path / "in"
    corpus.mkdir()
    for i in range(4):  # lines of different files share line numbers: order is by chunk
        (corpus / f"{i}.jsonl").write_text("\n".join(lines[i::4]) + "\n")
    lakes = {}
    read_keys = commit.read_keys

    def two_layouts(path: str, band_lists: bool = True) -> tuple[pa.Table, object]:
        keys, bands = read_keys(path, band_lists)
        if hash(path) % 2:
            keys = keys.append_column("older_layout", pa.nulls(keys.num_rows, pa.int8()))
        return keys, bands

    runs = (
        ("one", "commit_seconds = 0\n"),
        ("batched", "commit_chunks = 1000\n"),
        ("two layouts", "commit_chunks = 1000\n"),
    )
    for name, extra in runs:
        if name == "two layouts":
            monkeypatch.setattr(commit, "read_keys", two_layouts)
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f'[ingest]\nchunk_size = "200B"\n{extra}')
        fake = FakeExecutor(2, lambda _k, _a: "ok", shuffle=random.Random(7))
        report = run(corpus, cfg, tmp_path / name, fake)
        assert report.ok and report.chunks_committed > 40
        lakes[name] = lake_rows(tmp_path / name)
    assert lakes["batched"] == lakes["one"]
    assert lakes["two layouts"] == lakes["one"]
    reasons = {r[5] for r in lakes["one"]}
    assert {"duplicate_id", "exact_dup", None} <= reasons  # the cases are there


@pytest.mark.parametrize("deciders", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_run_of_chunks_matched_as_one_decides_as_one_by_one(
    deciders: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With near dedup, tiny chunks decided many at a time are matched as one run: near
    copies of documents of earlier chunks of the run (and of the run before), and exact
    copies of those near copies in later chunks, get the verdicts, ``dup_of`` and clusters a
    decision per chunk gives. (An exact copy decided in the run first points at the near copy,
    which the run's one decision saw kept: it must follow it to the cluster's kept document.)"""
    import json

    from lakecurate.ingest import scheduler
    from lakecurate.ingest.near import NearDedup

    monkeypatch.setattr(scheduler, "QUICK_TASK_SECONDS", 60.0)
    runs = batch_sizes(monkeypatch, NearDedup, "apply_run")
    rng = random.Random(5)
    words = [f"w{i}" for i in range(400)]
    bases = [[rng.choice(words) for _ in range(80)] for _ in range(30)]
    docs: list[dict[str, str]] = []
    near_copies: list[str] = []
    for i in range(150):
        roll = rng.random()
        if roll < 0.3 or not near_copies:  # a near copy of a base: its last word changed
            text = [*rng.choice(bases)[:-1], f"x{i}"]
            near_copies.append(" ".join(text))
            docs.append({"text": near_copies[-1]})
        elif roll < 0.5:  # an exact copy of a near copy seen before
            docs.append({"text": rng.choice(near_copies)})
        else:
            docs.append({"text": " ".join(rng.choice(words) for _ in range(80))})
        if rng.random() < 0.7:
            docs[-1]["id"] = f"d{i}"
    corpus = tmp_path / "in"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    query = (
        "SELECT chunk_key, source_line, id, kept, reason, dup_of, cluster_id - "
        "(SELECT min(cluster_id) FROM documents) FROM documents ORDER BY chunk_key, source_line"
    )
    lakes = {}
    for name, extra in (("one", "commit_seconds = 0\n"), ("run", "commit_chunks = 1000\n")):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(
            f'[ingest]\nchunk_size = "2KiB"\ndeciders = {deciders}\n{extra}'
            "[near_dedup]\nenabled = true\n"
        )
        runs.clear()
        fake = FakeExecutor(2, lambda _k, _a: "ok", shuffle=random.Random(7))
        report = run(corpus, cfg, tmp_path / name, fake)
        assert report.ok and report.chunks_committed > 20
        lakes[name] = Lake.open(tmp_path / name).sql(query).rows
        assert (max(runs) > 1) == (name == "run")
    assert lakes["run"] == lakes["one"]
    reasons = [r[4] for r in lakes["one"]]
    assert reasons.count("near_dup") > 10 and reasons.count("exact_dup") > 10
    near_ids = {r[2] for r in lakes["one"] if r[4] == "near_dup"}
    kept_ids = {r[2] for r in lakes["one"] if r[3]}
    exact_of_near = [r for r in lakes["one"] if r[4] == "exact_dup" and r[5] not in near_ids]
    assert exact_of_near and all(
        r[5] in kept_ids for r in lakes["one"] if r[5] and r[4] != "duplicate_id"
    )


# A failed finalise or planning takes one path whatever failed it ("crash", "hang" and "raise" are
# errors alike; test_a_failed_attempt_is_retried_and_blamed_with_its_reason tells them apart):
# the default run keeps "hang" (an error the watch delivers) and "bystander" (blameless), and
# raises in the tests of a finalise and a planning that always fail.
FINALISE_OR_PLAN_FATES = [
    pytest.param("crash", marks=pytest.mark.slow),
    "hang",
    pytest.param("raise", marks=pytest.mark.slow),
    "bystander",
]


@pytest.mark.parametrize("fate", FINALISE_OR_PLAN_FATES)
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


# --- planning on the workers (issue 14, item 4) ---------------------------------------------------


def test_chunks_run_while_the_first_input_is_still_being_planned(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The input whose chunks come first in key order is slow to plan: the others' chunks
    are processed meanwhile, none is decided before it, and the lake is the clean run's."""
    from lakecurate.ingest import scheduler

    # The delay is counted in collects; an idle collect sleeps a poll: a short one here.
    monkeypatch.setattr(scheduler, "POLL_SECONDS", 0.05)
    books = str(corpus / "books.parquet")
    fake = FakeExecutor(2, lambda _k, _a: "ok", delays={books: 6})
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert report.ok and report.files_read == 4
    assert lake_rows(tmp_path / "lake") == small_reference
    planned_at = fake.log.index(("plan ok", books))
    ran_before = [k for what, k in fake.log[:planned_at] if what == "ok"]
    assert ran_before, "no chunk ran while books.parquet was being planned"
    finalised_before = [k for what, k in fake.log[:planned_at] if what == "finalise ok"]
    assert finalised_before == []  # nothing decided ahead of books' chunks


@pytest.mark.parametrize("fate", FINALISE_OR_PLAN_FATES)
def test_a_failed_planning_runs_again(
    fate: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    web_a = str(corpus / "web_a.jsonl")
    seen: list[str] = []  # a bystander's attempt does not count: count tries here

    def plan_fate(key: str, _attempt: int) -> str:
        seen.append(key)
        return fate if key == web_a and seen.count(key) == 1 else "ok"

    fake = FakeExecutor(2, lambda _k, _a: "ok", plan_fate=plan_fate)
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert report.ok and (f"plan {fate}", web_a) in fake.log and seen.count(web_a) == 2
    assert lake_rows(tmp_path / "lake") == small_reference


def test_an_input_that_cannot_be_planned_is_a_file_error_and_the_rest_commit(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    forum = str(corpus / "forum.jsonl.zst")
    fake = FakeExecutor(
        2, lambda _k, _a: "ok", plan_fate=lambda k, _a: "raise" if k == forum else "ok"
    )
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    max_attempts = configuration.load(small_cfg).ingest.max_attempts
    assert fake.plan_attempts[forum] == max_attempts
    assert len(report.file_errors) == 1 and forum in report.file_errors[0]
    assert f"failed {max_attempts} times" in report.file_errors[0]
    have = {r[1:3] for r in lake_rows(tmp_path / "lake")}
    assert have and all(not str(r[0]).startswith("forum_") for r in lake_rows(tmp_path / "lake"))
    assert len(have) == len({r[1:3] for r in small_reference if not str(r[0]).startswith("forum_")})


def test_a_changed_input_planned_late_gives_the_clean_run_of_the_new_inputs(
    corpus: Path, small_cfg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-run where the changed input is the last to be cut: its old chunks leave the lake
    (and what pointed at them is decided again) before anything is decided against it. Which
    copy of a duplicate group is kept may differ from the clean run's (docs/design-notes.md,
    Changed inputs): the rows, the kept texts and every ``dup_of`` must not."""
    import shutil

    from lakecurate.ingest import scheduler

    # The delay is counted in collects; an idle collect sleeps a poll: a short one here.
    monkeypatch.setattr(scheduler, "POLL_SECONDS", 0.05)
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    lake = tmp_path / "lake"
    assert run(data, small_cfg, lake, FakeExecutor(2, lambda _k, _a: "ok")).ok
    web_a = data / "web_a.jsonl"
    lines = web_a.read_bytes().splitlines(keepends=True)
    web_a.write_bytes(b"".join(lines[len(lines) // 3 :] + lines[: len(lines) // 3]))
    (data / "forum.jsonl.zst").unlink()
    fake = FakeExecutor(2, lambda _k, _a: "ok", delays={str(web_a): 6})
    report = run(data, small_cfg, lake, fake)
    assert report.ok and report.rows_superseded > 0
    clean = tmp_path / "clean"
    assert run(data, small_cfg, clean, FakeExecutor(2, lambda _k, _a: "ok")).ok
    have, want = lake_rows(lake), lake_rows(clean)
    assert [r[:4] for r in have] == [r[:4] for r in want]
    assert {r[3] for r in have if r[4]} == {r[3] for r in want if r[4]}
    kept = {r[2] for r in have if r[4]}
    assert all(r[6] in kept for r in have if r[6] is not None and r[5] != "duplicate_id")
    assert_verify_clean(lake)


def test_a_costly_state_snapshot_is_published_less_often(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Readers' snapshot is a copy of the state tables, whose cost grows with the chunks: a
    publish that takes 0.2 s waits 20 times that (4 s) for the next, so it stays a twentieth
    of the driver's time, where every group would have paid one. The lake is unchanged."""
    from lakecurate.ingest import scheduler
    from lakecurate.store.state import StateStore

    monkeypatch.setattr(scheduler, "SNAPSHOT_SECONDS", 0.0)  # as often as groups, if cheap
    publish = StateStore.publish_snapshot
    during: list[float] = []

    def costly(self: StateStore, path: Path) -> None:
        time.sleep(0.2)
        during.append(time.monotonic())
        publish(self, path)

    monkeypatch.setattr(StateStore, "publish_snapshot", costly)
    cfg = tmp_path / "groups.toml"
    cfg.write_text(small_cfg.read_text().replace("[ingest]\n", "[ingest]\ncommit_chunks = 1\n"))
    fake = FakeExecutor(2, lambda _k, _a: "ok")
    started = time.monotonic()
    report = run(corpus, cfg, tmp_path / "lake", fake)
    took = time.monotonic() - started
    assert report.ok and lake_rows(tmp_path / "lake") == small_reference
    assert report.chunks_committed >= 6  # a group each: a publish each without the rule
    # The runner's at the start and at the end, and the scheduler's at most one per 4 s.
    assert 3 <= len(during) <= 3 + took / 4 and len(during) < report.chunks_committed, took


@pytest.mark.bundles
def test_small_chunks_go_many_to_a_task_and_the_lake_is_unchanged(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bundles hold consecutive small chunks in key order, up to ``[ingest] bundle_bytes``
    (a chunk of more than an eighth of it goes alone); completed out of order, they give the
    lake of one chunk a task (``bundle_bytes = 0``)."""
    from lakecurate.ingest.scheduler import SMALL_SHARE

    limit = 1 << 20
    cfg = tmp_path / "bundles.toml"
    cfg.write_text(
        small_cfg.read_text().replace("[ingest]\n", f"[ingest]\nbundle_bytes = {limit}\n")
    )
    fake = FakeExecutor(2, lambda _k, _a: "ok", shuffle=random.Random(5))
    tasks = recording(fake, monkeypatch)
    report = run(corpus, cfg, tmp_path / "bundled", fake)
    assert report.ok and sum(map(len, tasks)) == report.chunks_committed
    assert max(map(len, tasks)) > 1
    for task in tasks:
        keys = [s.chunk_key for s in task]
        assert keys == sorted(keys)
        if len(task) > 1:
            assert sum(s.input_bytes for s in task) <= limit
            assert max(s.input_bytes for s in task) <= limit // SMALL_SHARE
    large = [t for t in tasks if t[0].input_bytes > limit // SMALL_SHARE]
    assert all(len(t) == 1 for t in large)
    cfg.write_text(small_cfg.read_text().replace("[ingest]\n", "[ingest]\nbundle_bytes = 0\n"))
    alone = FakeExecutor(2, lambda _k, _a: "ok", shuffle=random.Random(5))
    tasks = recording(alone, monkeypatch)
    assert run(corpus, cfg, tmp_path / "alone", alone).ok
    assert max(map(len, tasks)) == 1
    assert lake_rows(tmp_path / "bundled") == lake_rows(tmp_path / "alone") == small_reference


@pytest.mark.bundles
@pytest.mark.parametrize("fate", ["raise", pytest.param("crash", marks=pytest.mark.slow), "hang"])
def test_a_chunk_that_fails_in_a_bundle_runs_alone_and_only_it_is_blamed(
    fate: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failed bundle cannot say whose fault it was: each of its chunks runs again in a task
    of its own without using up an attempt, so only the guilty one is blamed, and it goes
    DEAD after ``max_attempts`` attempts of its own."""
    bad = victim(corpus, small_cfg, tmp_path)
    fake = FakeExecutor(2, lambda k, _a: fate if k == bad else "ok")
    tasks = recording(fake, monkeypatch)
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert [k for k, _ in report.dead] == [bad]
    first = next(t for t in tasks if bad in [s.chunk_key for s in t])
    assert len(first) > 1
    for spec in first:  # every chunk of the failed bundle ran again alone
        assert [spec] in tasks
    tries = configuration.load(small_cfg).ingest.max_attempts
    assert fake.attempts[bad] == 1 + tries
    failed = Lake.open(tmp_path / "lake").sql(
        "SELECT chunk_key, count(*) FROM chunk_events WHERE to_status IN ('FAILED', 'DEAD') "
        "GROUP BY ALL"
    )
    assert failed.rows == [(bad, tries)]  # the last one DEAD
    attempts = dict(Lake.open(tmp_path / "lake").sql("SELECT chunk_key, attempts FROM chunks").rows)
    assert attempts[bad] == tries  # the bundle's attempt was given back
    assert all(attempts[s.chunk_key] == 1 for s in first if s.chunk_key != bad)
    have = [r[:3] for r in lake_rows(tmp_path / "lake")]
    assert have == [r[:3] for r in small_reference if r[0] != bad]


@pytest.mark.bundles
def test_a_full_disk_in_a_bundle_stops_the_run_and_the_next_run_finishes(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """A full disk is nobody's fault: the run stops at once (the chunks are not run again
    alone, nor blamed), and the same command finishes once there is space."""
    from lakecurate.errors import DiskFullError

    bad = victim(corpus, small_cfg, tmp_path)
    fake = FakeExecutor(2, lambda k, _a: "full" if k == bad else "ok")
    with pytest.raises(DiskFullError, match="no space left on device"):
        run(corpus, small_cfg, tmp_path / "lake", fake)
    assert fake.attempts[bad] == 1
    events = Lake.open(tmp_path / "lake").sql(
        "SELECT count(*) FROM chunk_events WHERE to_status IN ('FAILED', 'DEAD')"
    )
    assert events.rows == [(0,)]
    assert run(corpus, small_cfg, tmp_path / "lake", FakeExecutor(2, lambda _k, _a: "ok")).ok
    assert lake_rows(tmp_path / "lake") == small_reference


@pytest.mark.bundles
@pytest.mark.parametrize("fate", ["raise", "crash"])
def test_small_inputs_are_planned_many_to_a_task(
    fate: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small inputs go to a worker many to a planning task. An input's own error is its
    alone (its neighbours' cuts are taken); a task that dies takes them all down, and each is
    planned again alone; the lake is the clean run's."""
    web_a = str(corpus / "web_a.jsonl")
    seen: list[str] = []

    def plan_fate(path: str, _attempt: int) -> str:
        seen.append(path)
        return fate if path == web_a and seen.count(path) == 1 else "ok"

    fake = FakeExecutor(2, lambda _k, _a: "ok", plan_fate=plan_fate)
    plans: list[list[str]] = []

    def plan(orders: list[PlanOrder]) -> None:
        plans.append([o.path for o in orders])
        FakeExecutor.plan(fake, orders)

    monkeypatch.setattr(fake, "plan", plan)
    report = run(corpus, small_cfg, tmp_path / "lake", fake)
    assert report.ok
    first = next(p for p in plans if web_a in p)
    assert len(first) > 1
    assert seen.count(web_a) == 2 and [web_a] in plans
    for path in first:
        if path != web_a:  # planned once with its own error beside it, again if the task died
            assert seen.count(path) == (2 if fate == "crash" else 1)
            assert ([path] in plans) == (fate == "crash")
    assert lake_rows(tmp_path / "lake") == small_reference


@pytest.mark.bundles
@pytest.mark.parametrize(
    ("sizes", "bundle_bytes", "short"),
    [
        ([256 << 20] * 3, 16 << 20, True),  # large chunks: a task each, 3 < 4
        ([256 << 20] * 5, 16 << 20, False),
        ([10_000] * 100, 16 << 20, True),  # two bundles' worth
        ([10_000] * 300, 16 << 20, False),  # at most 64 chunks a task: 5 tasks
        ([8 << 20] * 10, 16 << 20, False),  # two to a task: 5 tasks
        ([8 << 20] * 7, 16 << 20, True),
        ([10_000] * 100, 0, False),  # no bundles: a task each
    ],
)
def test_the_queue_is_counted_in_tasks_when_inputs_wait(
    sizes: list[int], bundle_bytes: int, short: bool
) -> None:
    """Inputs are planned while the queued chunks make fewer tasks than are kept in flight:
    small chunks by their bytes and 64 to a task, large ones one each."""
    from types import SimpleNamespace

    from lakecurate.config import Config, IngestConfig
    from lakecurate.ingest.scheduler import Scheduler

    keys = [f"k{i:04d}" for i in range(len(sizes))]
    this = SimpleNamespace(
        queue=keys,
        by_key={k: SimpleNamespace(input_bytes=b) for k, b in zip(keys, sizes, strict=True)},
        cfg=Config(IngestConfig(bundle_bytes=bundle_bytes)),
    )
    assert Scheduler._queue_short(this, 4) is short  # type: ignore[arg-type]
