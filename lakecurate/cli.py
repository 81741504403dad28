"""The ``lakecurate`` command: a thin skin over ``lakecurate.api``.

Each command builds a ``Lake``, calls one method, renders the result. A ``LakecurateError``
becomes one clear line on stderr and exit code 1 (the traceback with ``--debug``).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import click

from lakecurate import __version__
from lakecurate.api import Lake
from lakecurate.errors import LakecurateError
from lakecurate.render import FORMATS, render
from lakecurate.runner import IngestReport

LAKE_HELP = "The lake folder (default: $LAKECURATE_LAKE or ./lake)."


def _lake_option(f: Any) -> Any:
    return click.option("--lake", "lake_path", type=click.Path(file_okay=False, path_type=Path),
                        default=lambda: os.environ.get("LAKECURATE_LAKE", "lake"),
                        show_default="./lake", help=LAKE_HELP)(f)


def _format_option(f: Any) -> Any:
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                        show_default=True, help="Output format.")(f)


class _Group(click.Group):
    """Turns library errors into one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LakecurateError as exc:
            if ctx.params.get("debug") or os.environ.get("LAKECURATE_DEBUG"):
                traceback.print_exc()
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted: nothing half-written is visible; re-run the same command "
                       "to resume", err=True)
            sys.exit(130)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="lakecurate")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
def main(debug: bool) -> None:
    """Curate raw text corpora into a versioned, crash-safe data lake."""
    if debug:
        os.environ["LAKECURATE_DEBUG"] = "1"


class RichReporter:
    """Progress bar on a terminal (chunks, documents/s, MB/s, ETA); silent otherwise."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self.enabled = self.console.is_terminal
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                                 TimeRemainingColumn(), console=self.console,
                                 disable=not self.enabled)
        self.task: Any = None
        self.plan_task: Any = None
        self.started = time.monotonic()
        self.bytes = 0
        self.docs = 0

    def file_planned(self, path: str, done: int, total: int, was_read: bool) -> None:
        if not self.enabled:
            return
        if self.plan_task is None:
            self.progress.start()
            self.plan_task = self.progress.add_task("plan", total=total, rate="hashing inputs")
        self.progress.update(self.plan_task, completed=done)

    def planned(self, chunks_total: int, chunks_todo: int, bytes_todo: int) -> None:
        if self.plan_task is not None:
            self.progress.remove_task(self.plan_task)
            self.plan_task = None
        if chunks_todo:
            self.progress.start()
            self.task = self.progress.add_task("ingest", total=chunks_todo, rate="")

    def chunk_done(self, chunk_key: str, input_bytes: int, rows_in: int, rows_kept: int) -> None:
        self.bytes += input_bytes
        self.docs += rows_in
        secs = max(time.monotonic() - self.started, 1e-6)
        if self.task is not None:
            self.progress.update(self.task, advance=1,
                                 rate=f"{self.docs / secs:,.0f} docs/s "
                                      f"{self.bytes / secs / 1e6:,.1f} MB/s")

    def chunk_failed(self, chunk_key: str, error: str, dead: bool) -> None:
        if self.enabled:
            state = "DEAD" if dead else "failed, will retry"
            self.progress.console.print(f"[red]{chunk_key}: {state}: {error}")

    def note(self, message: str) -> None:
        if self.enabled:
            self.progress.console.print(message)

    def close(self) -> None:
        self.progress.stop()


def _summary(r: IngestReport) -> str:
    if r.outcome == "NOTHING_TO_DO":
        head = (f"nothing to do: {r.chunks_planned} chunk(s) of {r.files} file(s) already in "
                f"the lake ({r.seconds:.2f} s)")
    else:
        head = (f"ingested {r.chunks_committed} chunk(s) of {r.files} file(s): {r.rows_in:,} "
                f"documents in, {r.rows_kept:,} kept, {r.rows_in - r.rows_kept:,} dropped "
                f"({r.seconds:.1f} s)")
        if r.rows_superseded:
            head += f"; {r.rows_superseded:,} rows of changed inputs removed"
    lines = [head, *(f"note: {n}" for n in r.notes)]
    lines += [f"error: {e}" for e in r.file_errors]
    lines += [f"DEAD: {k}: {e}" for k, e in r.dead]
    if r.dead:
        lines.append("fix the cause, then `lakecurate retry` and re-run the same ingest")
    return "\n".join(lines)


@main.command("ingest")
@click.argument("inputs", nargs=-1, required=True)
@_lake_option
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Pipeline config (lakecurate.toml); stored in the lake on first use.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: [ingest].workers, else one per core).")
@click.option("--verify", is_flag=True, help="Re-read and re-hash every input (ignore the stat "
              "cache).")
def ingest_cmd(inputs: tuple[str, ...], lake_path: Path, config_path: Path | None,
               workers: int | None, verify: bool) -> None:
    """Ingest JSONL / JSONL.gz / JSONL.zst / Parquet files or folders into the lake.

    Safe to interrupt and to re-run: a re-run resumes, and on unchanged input does nothing.
    """
    report = Lake.open(lake_path).ingest(
        list(inputs), config=config_path, workers=workers, verify=verify,
        reporter=RichReporter(), args=shlex.join(sys.argv[1:]))
    click.echo(_summary(report))
    if not report.ok:
        sys.exit(2)


@main.command("status")
@_lake_option
@_format_option
def status_cmd(lake_path: Path, fmt: str) -> None:
    """Chunks by status, rows kept and dropped, the funnel, recent failures and runs."""
    st = Lake.open(lake_path).status()
    for title, res in (("chunks", st.by_status), ("funnel", st.funnel),
                       ("failures", st.failures), ("runs", st.runs)):
        if fmt == "table":
            if title == "failures" and not res.rows:
                continue
            click.echo(f"== {title}")
        elif fmt == "json":
            res = type(res)(["section", *res.columns], [(title, *r) for r in res.rows])
        click.echo(render(res.columns, res.rows, fmt), nl=False)


@main.command("sql")
@click.argument("query")
@_lake_option
@_format_option
def sql_cmd(query: str, lake_path: Path, fmt: str) -> None:
    """Run a read-only SQL query over the state tables and the docs / rejects views.

    Tables: runs, chunks, chunk_events, filter_stats, commits, sources, content_hashes.
    Views of the latest version: documents (all rows), docs (kept), rejects (dropped).
    """
    res = Lake.open(lake_path).sql(query)
    click.echo(render(res.columns, res.rows, fmt), nl=False)


@main.command("retry")
@click.argument("chunk_keys", nargs=-1)
@_lake_option
def retry_cmd(chunk_keys: tuple[str, ...], lake_path: Path) -> None:
    """Re-queue DEAD chunks (all, or the named ones) for the next ingest."""
    keys = Lake.open(lake_path).retry(list(chunk_keys) or None)
    if keys:
        click.echo(f"re-queued {len(keys)} chunk(s): {', '.join(keys)}; now re-run the ingest")
    else:
        click.echo("no DEAD chunks to re-queue")
