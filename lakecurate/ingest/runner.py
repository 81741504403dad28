"""``ingest``: plan, dispatch chunks to workers, commit them in chunk-key order, retry, report.

Workers run ahead in any order; chunks are decided strictly in key order (a chunk still being
retried holds the commit frontier, not the workers), which is why parallelism, crashes and
retries never change which document of a duplicate group is kept. Decided chunks are committed
to Delta in groups (``[ingest] commit_chunks / commit_bytes / commit_seconds``): one commit per
group keeps the driver's commit cost per chunk small and flat.
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import sys
import time
import tokenize
from collections.abc import Callable
from types import FrameType, ModuleType

from lakecurate.config import Config
from lakecurate.errors import CommitError, DiskFullError, UsageError, disk_full, is_disk_full
from lakecurate.ingest.chunking import Inputs, skipped_lines
from lakecurate.ingest.commit import Committer
from lakecurate.ingest.executor import LocalExecutor, default_workers
from lakecurate.ingest.malformed import mostly_malformed
from lakecurate.ingest.plan import Planner, make_plan
from lakecurate.ingest.scheduler import Executor, IngestReport, Scheduler
from lakecurate.lake.delta import DeltaStore
from lakecurate.lake.paths import LakePaths
from lakecurate.progress import NullReporter, Reporter
from lakecurate.store.session import write_session
from lakecurate.store.state import StateStore
from lakecurate.types import WorkOrder

__all__ = ["IngestReport", "ingest", "require_main_guard"]

_GUARD = 'put the code that ingests under `if __name__ == "__main__":`'


def require_main_guard() -> None:
    """Refuse an ingest its own workers would start again, before anything is written.

    Workers start with ``spawn``: each one runs the main script again (as ``__mp_main__``), so
    an ingest called from the script's unguarded top level runs once more in every worker,
    which finds the lake locked and dies, and the pool starts another one, forever. Caught in
    the script (the line of its top level that leads here is outside an ``if __name__``
    block) and, should its source be unreadable, in a worker re-running it.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):  # spawn bootstrap
        main = sys.modules.get("__mp_main__")
        where = f" {main.__file__}" if main and getattr(main, "__file__", None) else ""
        raise UsageError(
            f"Lake.ingest was called while a worker process re-ran the main script{where}: "
            + _GUARD
        )
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or not _rerun_by_workers(main):
        return
    line = _top_level_line(path)
    if line is None:
        return
    try:
        with tokenize.open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return  # no source to judge: a worker re-running the call is refused instead
    if not any(
        isinstance(node, ast.If)
        and node.lineno <= line <= (node.end_lineno or node.lineno)
        and any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test))
        for node in ast.walk(tree)
    ):
        raise UsageError(
            f"Lake.ingest is called from the top level of {path} (line {line}), which every "
            f"worker process runs again when it starts (multiprocessing 'spawn'): {_GUARD}"
        )


def _top_level_line(path: str) -> int | None:
    """The line of the script ``path``'s top-level code that is running, if it is on the
    stack (an ``exec`` or an import in between included)."""
    want = os.path.realpath(path)
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and os.path.realpath(code.co_filename) == want:
            return frame.f_lineno
        frame = frame.f_back
    return None


def _rerun_by_workers(main: ModuleType | None) -> bool:
    """Whether a spawned worker runs ``main`` again (``multiprocessing.spawn``'s own rule: a
    script by its path, ``-m mod`` by its name, but never a package's ``__main__``)."""
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return not (name == "__main__" or name.endswith(".__main__"))
    return getattr(main, "__file__", None) is not None


def ingest(
    paths: LakePaths,
    inputs: Inputs,
    cfg: Config,
    *,
    workers: int | None = None,
    verify: bool = False,
    reporter: Reporter | None = None,
    args: str = "",
    executor: Callable[[int], Executor] = LocalExecutor,
) -> IngestReport:
    """Run one ingest in a write session (see the module docstring). ``executor`` makes the
    executor for a number of workers (the local process pool; tests pass a fake one)."""
    reporter = reporter or NullReporter()
    started = time.perf_counter()
    try:
        with write_session(
            paths, "ingest", args or json.dumps(inputs.given), cfg, create=True, bloom=True
        ) as session:
            report = IngestReport(run_id=session.run_id, notes=session.notes)
            session.state.reset_running(session.run_id)
            committer = Committer(session, cfg)
            try:
                _plan_and_run(
                    paths,
                    inputs,
                    cfg,
                    workers,
                    verify,
                    reporter,
                    session.state,
                    report,
                    committer,
                    executor,
                )
                report.malformed = mostly_malformed(
                    session.state, paths.documents, [p for p, _ in inputs.files], cfg.input
                )
                _settle(session.delta, report)
            except BaseException:
                session.done, session.dead = report.chunks_committed, len(report.dead)
                raise
            finally:  # the Bloom files are saved however the run ends (D16): by the session
                committer.close()
                report.index = session.index.stats.as_dict()
                session.state.put_meta("index.last_run", json.dumps(report.index))
            report.seconds = time.perf_counter() - started
            session.done, session.dead = report.chunks_committed, len(report.dead)
            session.finish(report.outcome, "; ".join(report.file_errors)[:2000])
            session.state.publish_snapshot(paths.snapshot)
            return report
    except Exception as exc:
        if is_disk_full(exc) and not isinstance(exc, DiskFullError):
            raise disk_full(exc, "writing the lake") from exc
        raise
    finally:
        reporter.close()


def _settle(delta: DeltaStore, report: IngestReport) -> None:
    """Checkpoint the Delta table at the end of an ingest that committed (the hot path writes
    one only every ``delta.checkpointInterval`` commits): the next open replays no commit
    file. Everything is committed already, so a failure here is a note, not an error."""
    try:
        delta.settle()
    except CommitError as exc:
        report.notes.append(f"the Delta checkpoint at the end of the run failed: {exc}")


def _plan_and_run(
    paths: LakePaths,
    inputs: Inputs,
    cfg: Config,
    workers: int | None,
    verify: bool,
    reporter: Reporter,
    state: StateStore,
    report: IngestReport,
    committer: Committer,
    executor: Callable[[int], Executor],
) -> None:
    plan = make_plan(inputs, cfg.ingest.chunk_size, state, verify, reporter)
    report.files = plan.files
    report.file_errors = plan.file_errors  # the planner adds the inputs that cannot be read
    report.skipped = skipped_lines(plan.skipped)
    report.chunks_planned = len(plan.specs)
    # Superseded rows leave the table, and the chunks that pointed at them are decided again,
    # before any new chunk is deduplicated against the lake (a changed input's, when its cut
    # is back: the planner's barrier holds every decision until then).
    report.rows_superseded = committer.supersede(plan.superseded)
    state.mark_superseded(plan.retired, report.run_id)
    state.add_planned(plan.fresh, plan.sources, report.run_id)
    state.publish_snapshot(paths.snapshot)

    specs = {s.chunk_key: s for s in plan.specs}
    todo = state.todo(list(specs))
    report.chunks_todo = len(todo)
    report.dead = state.dead_in(list(specs))
    reporter.planned(len(plan.specs), len(todo), sum(specs[k].input_bytes for k, _, _ in todo))
    planner = Planner(
        plan, cfg.ingest.chunk_size, state, committer.supersede, report.run_id, reporter
    )
    died: set[str] = set()  # DEAD in this run
    if todo or plan.pending:
        order = WorkOrder(
            staging_dir=str(paths.staging),
            run_id=report.run_id,
            config_hash=cfg.hash,
            exact_dedup=cfg.dedup.exact,
            decisions=committer.config_text,
        )
        n_workers = workers or cfg.ingest.workers or default_workers()
        scheduler = Scheduler(
            state,
            committer,
            reporter,
            report,
            cfg,
            order,
            executor(n_workers),
            paths.snapshot,
            planner,
        )
        scheduler.run([specs[k] for k, _, _ in todo], {k: a for k, _, a in todo})
        died = scheduler.dead
    report.files_read = plan.files_read
    report.notes += plan.notes
    report.rows_superseded += planner.rows_superseded
    report.chunks_redecided = committer.redecided
    earlier = len({k for k, _ in report.dead} - died)
    if earlier:
        report.notes.append(
            f"{earlier} chunk(s) are DEAD from earlier runs; `lakecurate retry` re-queues them"
        )
