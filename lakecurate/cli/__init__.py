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
from typing import TYPE_CHECKING, Any, NoReturn

import click
from click.exceptions import NoArgsIsHelpError

from lakecurate import __version__
from lakecurate.cli.render import FORMATS, render, terminal_width
from lakecurate.config import DEFAULT_PRESET, PRESETS
from lakecurate.errors import LakecurateError, one_line

if TYPE_CHECKING:
    from lakecurate.api import IngestReport, Lake

# The API (and with it DuckDB, Delta Lake, Arrow, NumPy) and rich are imported inside the
# commands that use them, never at the top: `lakecurate --help` and every `lakecurate CMD --help`
# start without them (tests/unit/test_startup.py checks it).

LAKE_HELP = (
    "The lake: a folder, or s3://bucket/prefix (whose state is kept in a folder under "
    "$LAKECURATE_STATE_DIR, by default ~/.cache/lakecurate) (default: $LAKECURATE_LAKE or "
    "./lake)."
)


def _open(lake_path: str) -> Lake:
    """``Lake.open(lake_path)``, importing the API only when a command runs."""
    from lakecurate.api import Lake

    return Lake.open(lake_path)


def _lake_option(f: Any) -> Any:
    return click.option(
        "--lake",
        "lake_path",
        type=str,  # not a click.Path: it would turn s3://b/x into s3:/b/x
        default=lambda: os.environ.get("LAKECURATE_LAKE", "lake"),
        show_default="./lake",
        help=LAKE_HELP,
    )(f)


def _format_option(f: Any) -> Any:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format.",
    )(f)


def _usage_failed(exc: click.UsageError) -> NoReturn:
    """A usage error like every other error: one ``error:`` line naming the help, exit 1.

    (click's own shows the usage, a hint and the error on three lines and exits 2, which
    here means an ingest that left DEAD chunks.) A group called without a command shows its
    help, as ``--help`` would.
    """
    if isinstance(exc, NoArgsIsHelpError) and exc.ctx is not None:
        click.echo(exc.ctx.get_help())
        sys.exit(0)
    message = one_line(exc.format_message()).removesuffix(".")
    where = exc.ctx.command_path if exc.ctx is not None else "lakecurate"
    click.echo(f"error: {message[:1].lower()}{message[1:]} (try '{where} --help')", err=True)
    sys.exit(1)


def _echo(
    columns: list[str],
    rows: list[Any],
    fmt: str,
    *,
    first: tuple[str, ...] = (),
    wrap: tuple[str, ...] = (),
) -> None:
    """Rows on stdout in ``fmt``; a table fits the terminal (``render``: ``first`` columns
    kept first, ``wrap`` columns wrapped, the columns left out named under it)."""
    out = render(columns, rows, fmt, width=terminal_width(), first=first, wrap=wrap)
    click.echo(out, nl=False)


class _Group(click.Group):
    """Turns library and usage errors into one line and an exit code."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:  # the top level's own options and arguments
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            _usage_failed(exc)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a command's (or a subgroup's) options and arguments
            _usage_failed(exc)
        except LakecurateError as exc:
            if ctx.params.get("debug") or os.environ.get("LAKECURATE_DEBUG"):
                traceback.print_exc()
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo(
                "interrupted: nothing half-written is visible; re-run the same command to resume",
                err=True,
            )
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
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.enabled,
        )
        self.task: Any = None
        self.plan_task: Any = None
        self.started = time.monotonic()
        self.bytes = 0
        self.docs = 0
        self.chunks = 0  # committed
        self.total = 0  # to do
        self.partial = 0.0, 0.0  # chunks and bytes done of those being worked on

    def file_planned(self, path: str, done: int, total: int, was_read: bool) -> None:
        """Inputs are cut by the workers while chunks run: a bar of its own until all are."""
        if not self.enabled:
            return
        if self.plan_task is None and done < total:
            self.progress.start()
            self.plan_task = self.progress.add_task("plan", total=total, rate="cutting inputs")
        if self.plan_task is not None:
            self.progress.update(self.plan_task, completed=done)
            if done >= total:
                self.progress.remove_task(self.plan_task)
                self.plan_task = None

    def planned(self, chunks_total: int, chunks_todo: int, bytes_todo: int) -> None:
        """Called again as inputs are cut: the bar's total grows."""
        self.total = chunks_todo
        if self.task is not None:
            self.progress.update(self.task, total=chunks_todo)
        elif chunks_todo:
            self.progress.start()
            self.task = self.progress.add_task("ingest", total=chunks_todo, rate="")

    def chunk_done(self, chunk_key: str, input_bytes: int, rows_in: int, rows_kept: int) -> None:
        self.bytes += input_bytes
        self.docs += rows_in
        self.chunks += 1
        self._draw()

    def chunk_progress(self, running: dict[str, tuple[float, int]]) -> None:
        """Chunks in a worker count by how far they are: a bar over a few large chunks
        moves (and has an ETA) long before the first one is committed."""
        self.partial = (
            sum(f for f, _ in running.values()),
            sum(f * n for f, n in running.values()),
        )
        self._draw()

    def _draw(self) -> None:
        if self.task is None:
            return
        secs = max(time.monotonic() - self.started, 1e-6)
        mb_s = (self.bytes + self.partial[1]) / secs / 1e6
        docs = f"{self.docs / secs:,.0f} docs/s " if self.docs else ""
        self.progress.update(
            self.task,
            completed=min(self.chunks + self.partial[0], self.total),
            rate=f"{docs}{mb_s:,.1f} MB/s",
        )

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
        head = (
            f"nothing to do: {r.chunks_planned} chunk(s) of {r.files} file(s) already in "
            f"the lake ({r.seconds:.2f} s)"
        )
    else:
        head = (
            f"ingested {r.chunks_committed} chunk(s) of {r.files} file(s): {r.rows_in:,} "
            f"documents in, {r.rows_kept:,} kept, {r.rows_in - r.rows_kept:,} dropped "
            f"({r.seconds:.1f} s)"
        )
        if r.rows_superseded:
            head += f"; {r.rows_superseded:,} rows of changed inputs removed"
        if r.chunks_redecided:
            head += f"; {r.chunks_redecided:,} chunk(s) that referred to them decided again"
    lines = [head, *(f"note: {n}" for n in r.notes), *(f"note: {s}" for s in r.skipped)]
    lines += [f"error: {e}" for e in r.file_errors]
    lines += [f"error: {m}" for m in r.malformed]
    lines += [f"DEAD: {k}: {e}" for k, e in r.dead]
    if r.dead:
        lines.append("fix the cause, then `lakecurate retry` and re-run the same ingest")
    return "\n".join(lines)


@main.command("ingest")
@click.argument("inputs", nargs=-1, required=True)
@_lake_option
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Pipeline config (lakecurate.toml); stored in the lake on first use.",
)
@click.option(
    "--preset",
    type=click.Choice(PRESETS),
    default=None,
    metavar="NAME",
    help=f"Start from a shipped preset: {', '.join(PRESETS)}; a --config file then extends it. "
    f"A new lake given neither gets {DEFAULT_PRESET} (docs/usage.md, Presets).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: [ingest].workers, else one per core).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default=None,
    help="Where chunks run: local worker processes, or Ray tasks on a cluster "
    "(default: [ingest].executor, else local; ray needs: pip install 'lakecurate[ray]').",
)
@click.option(
    "--address",
    metavar="HOST:PORT",
    default=None,
    help="The Ray cluster to run on (default: [ingest].address, else a Ray started here).",
)
@click.option(
    "--verify", is_flag=True, help="Re-read and re-hash every input (ignore the stat cache)."
)
@click.option(
    "--text-field",
    metavar="FIELD",
    help="The record field holding the text (default: [input].text_field, else text).",
)
@click.option(
    "--id-field",
    metavar="FIELD",
    help="The record field holding the id (default: [input].id_field, else id).",
)
def ingest_cmd(
    inputs: tuple[str, ...],
    lake_path: str,
    config_path: Path | None,
    preset: str | None,
    workers: int | None,
    executor: str | None,
    address: str | None,
    verify: bool,
    text_field: str | None,
    id_field: str | None,
) -> None:
    """Ingest JSON lines (.jsonl, .ndjson, .json.gz; gz/zst/bz2/xz) or Parquet files or folders.

    Safe to interrupt and to re-run: a re-run resumes, and on unchanged input does nothing.
    Exits 2 when chunks are DEAD or files unreadable, 3 when most records of a file are
    malformed for one reason (the lake is committed; the line says what to change).
    """
    report = _open(lake_path).ingest(
        list(inputs),
        config=config_path,
        preset=preset,
        workers=workers,
        verify=verify,
        reporter=RichReporter(),
        args=shlex.join(sys.argv[1:]),
        text_field=text_field,
        id_field=id_field,
        executor=executor,
        address=address,
    )
    click.echo(_summary(report))
    if not report.ok:
        sys.exit(2)
    if report.malformed:
        sys.exit(3)


@main.command("status")
@_lake_option
@_format_option
def status_cmd(lake_path: str, fmt: str) -> None:
    """The pipeline, chunks, funnel, keep rates by file and language, storage, failures, runs.

    The file and language tables read the latest version's data files (kept, reason and lang
    columns only), the storage table their footers; the rest comes from the state tables.
    """
    st = _open(lake_path).status()
    for title, res in (
        ("pipeline", st.pipeline),
        ("chunks", st.by_status),
        ("funnel", st.funnel),
        ("files", st.by_file),
        ("languages", st.by_language),
        ("storage", st.storage),
        ("flagged", st.flagged),
        ("failures", st.failures),
        ("runs", st.runs),
    ):
        if fmt == "table":
            if title in ("failures", "flagged", "files", "languages", "storage") and not res.rows:
                continue
            click.echo(f"== {title}")
            _echo(res.columns, res.rows, fmt)
        else:  # csv, json: every row names its section, so a program can tell them apart
            _echo(["section", *res.columns], [(title, *r) for r in res.rows], fmt)


def _version_options(f: Any) -> Any:
    f = click.option(
        "--as-of",
        "as_of",
        metavar="TIME",
        help="The version current at TIME ('2026-11-30 12:00'; UTC unless it names its zone).",
    )(f)
    return click.option(
        "--version",
        "version",
        type=click.IntRange(min=0),
        default=None,
        help="Read this version of the table (default: the latest).",
    )(f)


@main.command("sql")
@click.argument("query")
@_lake_option
@_version_options
@_format_option
def sql_cmd(query: str, lake_path: str, version: int | None, as_of: str | None, fmt: str) -> None:
    """Run a read-only SQL query over the state tables and the docs / rejects views.

    Tables: runs, chunks, chunk_events, filter_stats, commits, sources, content_hashes.
    Views of the latest version (or of --version / --as-of): documents (all rows), docs
    (kept), rejects (dropped).
    """
    res = _open(lake_path).sql(query, version=version, as_of=as_of)
    _echo(res.columns, res.rows, fmt)


@main.command("retry")
@click.argument("chunk_keys", nargs=-1)
@_lake_option
def retry_cmd(chunk_keys: tuple[str, ...], lake_path: str) -> None:
    """Re-queue DEAD chunks (all, or the named ones) for the next ingest."""
    keys = _open(lake_path).retry(list(chunk_keys) or None)
    if keys:
        click.echo(f"re-queued {len(keys)} chunk(s): {', '.join(keys)}; now re-run the ingest")
    else:
        click.echo("no DEAD chunks to re-queue")


# -- time travel, lineage, export, maintenance ---------------------------------------------
def _sections(parts: list[tuple[str, Any]], fmt: str, wrap: tuple[str, ...] = ()) -> None:
    """Several results: titled in a table, every row naming its section in CSV / JSON."""
    for title, res in parts:
        if fmt == "table":
            click.echo(f"== {title}")
            _echo(res.columns, res.rows, fmt, wrap=wrap)
        else:
            _echo(["section", *res.columns], [(title, *r) for r in res.rows], fmt)


HISTORY_FIRST = (
    "version",
    "timestamp",
    "operation",
    "rows_added",
    "rows_removed",
    "detail",
    "config_hash",
    "run_id",
)
"""The columns of `history` a narrow terminal keeps first (then the others, left to right)."""


@main.command("history")
@_lake_option
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="Only the newest N commits."
)
@_format_option
def history_cmd(lake_path: str, limit: int | None, fmt: str) -> None:
    """Every commit of the table, oldest first.

    Version, time, operation, chunk keys, rows added and removed, run id, config hash.
    """
    res = _open(lake_path).history(limit)
    _echo(res.columns, res.rows, fmt, first=HISTORY_FIRST, wrap=("detail",))


@main.command("diff")
@click.argument("a", type=click.IntRange(min=0))
@click.argument("b", type=click.IntRange(min=0))
@_lake_option
@click.option("--rows", is_flag=True, help="List the documents, not only the counts.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="With --rows: only the first N."
)
@_format_option
def diff_cmd(a: int, b: int, lake_path: str, rows: bool, limit: int | None, fmt: str) -> None:
    """Documents added, removed and changed in decision from version A to B.

    A document is its input record (chunk key and line): `changed` means present in both
    with a different kept / reason.
    """
    res = _open(lake_path).diff(a, b, rows=rows, limit=limit)
    _echo(res.columns, res.rows, fmt)


@main.command("explain")
@click.argument("doc_id")
@_lake_option
@click.option(
    "--version",
    type=click.IntRange(min=0),
    default=None,
    help="Explain it in this version (default: the latest).",
)
@_format_option
def explain_cmd(doc_id: str, lake_path: str, version: int | None, fmt: str) -> None:
    """Where a document came from and what was decided about it.

    Source file and line, chunk, input sha256, run, config hash, decision and reason, dup_of
    and its cluster, from the Delta table and the state.
    """
    ex = _open(lake_path).explain(doc_id, version)
    if fmt == "table":  # one wide row reads better as field / value pairs
        for n, row in enumerate(ex.occurrences.rows, 1):
            click.echo(f"== occurrence {n} of {len(ex.occurrences.rows)}")
            pairs = list(zip(ex.occurrences.columns, row, strict=True))
            _echo(["field", "value"], pairs, fmt, wrap=("value",))  # paths, hashes: whole
        _sections([("related", ex.related)], fmt, wrap=("id",))
        click.echo(f"({ex.seconds * 1000:.0f} ms)")
    else:
        _sections([("occurrence", ex.occurrences), ("related", ex.related)], fmt)


@main.command("export")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@_lake_option
@click.option(
    "--version",
    type=click.IntRange(min=0),
    default=None,
    help="The version to export (default: the latest).",
)
@click.option(
    "--format",
    "out_format",
    type=click.Choice(["parquet", "jsonl", "jsonl.gz"]),
    default="parquet",
    show_default=True,
    help="Shard format.",
)
@click.option(
    "--shard-size",
    default="256MiB",
    show_default=True,
    help="Target size of a shard (of data before compression), e.g. 64MiB.",
)
def export_cmd(
    out: Path, lake_path: str, version: int | None, out_format: str, shard_size: str
) -> None:
    """Write the kept documents of a version to OUT as training shards.

    Then OUT/manifest.json (files, sha256, rows, bytes, version, config hashes). Every file is
    written atomically; rows are in input order, so a version always gives the same bytes.
    """
    from lakecurate.config import parse_size

    m = _open(lake_path).export(
        version, out, fmt=out_format, shard_size=parse_size(shard_size, "--shard-size")
    )
    click.echo(
        f"exported version {m.version}: {m.rows:,} documents in {len(m.files)} "
        f"{out_format} shard(s), {m.bytes:,} bytes; manifest {out / 'manifest.json'}"
    )


@main.command("restore")
@click.argument("version", type=click.IntRange(min=0))
@_lake_option
def restore_cmd(version: int, lake_path: str) -> None:
    """Make VERSION the current version of the table (a new commit).

    The chunk state and the index are brought back in line with it, so a later ingest is as
    if the commits after VERSION never happened.
    """
    new = _open(lake_path).restore(version)
    click.echo(f"restored version {version} as version {new}")


@main.command("verify")
@_lake_option
@click.option(
    "--repair",
    is_flag=True,
    help="Fix what can be fixed (rebuilds a missing or "
    "corrupt state.duckdb from the Delta table, sets aside a damaged checkpoint or a "
    "torn last commit file).",
)
@click.option(
    "--deep",
    is_flag=True,
    help="Read every page of every live data file (slow: "
    "reads the whole table), not just each file's footer.",
)
def verify_cmd(lake_path: str, repair: bool, deep: bool) -> None:
    """Check that the Delta table, its log, the state and the index agree.

    Every data file the log names must exist and read; SUCCESS chunks must be exactly the
    table's, at the log's versions; no commit may be left half-done; no temp file may remain.
    """
    r = _open(lake_path).verify(repair=repair, deep=deep)
    for p in r.problems:
        click.echo(f"problem: {p}")
    for p in r.repaired:
        click.echo(f"repaired: {p}")
    for p in r.notes:
        click.echo(f"note: {p}")
    if not r.problems:
        click.echo(f"ok: {r.files_checked} data file(s) checked, state and log agree")
    elif not repair:
        click.echo(
            "run `lakecurate verify --repair` to fix what can be fixed"
            if r.fixable
            else "`lakecurate verify --repair` cannot fix this: each problem says what to do"
        )
    if not r.ok or (r.problems and not repair):
        sys.exit(2)


@main.group("index")
def index_group() -> None:
    """The two-tier membership index (Bloom filters in front of DuckDB)."""


INDEX_STATS_FIRST = ("space", "file", "n", "tier2_rows", "fill_ratio", "estimated_p", "target_p")
"""The columns of `index stats` a narrow terminal keeps first."""


@index_group.command("stats")
@_lake_option
@_format_option
def index_stats_cmd(lake_path: str, fmt: str) -> None:
    """n, m, k, fill ratio, estimated and target p, memory, and tier-2 counts per key space."""
    res = _open(lake_path).index_stats()
    _echo(res.columns, res.rows, fmt, first=INDEX_STATS_FIRST)


@main.command("dedup-stats")
@_lake_option
@click.option(
    "--largest",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many of the largest clusters to list.",
)
@_format_option
def dedup_stats_cmd(lake_path: str, largest: int, fmt: str) -> None:
    """Near-duplicate clusters: the size distribution and the largest ones with sample ids.

    A giant cluster is the usual sign of a threshold that is too loose.
    """
    sizes, top = _open(lake_path).dedup_stats(largest)
    _sections([("cluster sizes", sizes), ("largest clusters", top)], fmt)


@main.command("compact")
@_lake_option
@click.option("--target-size", default=None, help="Target file size (default: 100MiB).")
def compact_cmd(lake_path: str, target_size: str | None) -> None:
    """Rewrite the table's small files into large ones, and the index's key files.

    A new version; the documents, the commit watermark and every older version are unchanged.
    """
    from lakecurate.config import parse_size

    r = _open(lake_path).compact(parse_size(target_size, "--target-size") if target_size else None)
    click.echo(
        f"compacted {r.files_before} file(s) into {r.files_after} ({r.rows:,} rows): "
        f"version {r.version_before} -> {r.version_after}; the index's key files "
        f"{r.key_files_before} -> {r.key_files_after}"
    )


@main.command("vacuum")
@_lake_option
@click.option(
    "--dry-run/--no-dry-run",
    default=True,
    show_default=True,
    help="Only list what would be deleted.",
)
@click.option(
    "--retention-hours",
    type=click.FloatRange(min=0),
    default=None,
    help="Keep files that versions of the last N hours need (default: the table's retention, 168).",
)
@click.option("--force", is_flag=True, help="Allow a retention below the table's.")
@_format_option
def vacuum_cmd(
    lake_path: str, dry_run: bool, retention_hours: float | None, force: bool, fmt: str
) -> None:
    """Delete data files only old versions need (a dry run unless --no-dry-run)."""
    r = _open(lake_path).vacuum(dry_run, retention_hours, force)
    _echo(["file"], [(f,) for f in r.files], fmt, wrap=("file",))
    verb = "would delete" if r.dry_run else "deleted"
    tail = f"; readable versions: {r.readable[0]} to {r.readable[1]}" if r.readable else ""
    click.echo(
        f"{verb} {len(r.files)} file(s), {r.bytes:,} bytes (retention "
        f"{r.retention_hours:g} h){tail}",
        err=fmt != "table",
    )


@main.command("checkpoint")
@_lake_option
def checkpoint_cmd(lake_path: str) -> None:
    """Write a Delta checkpoint of the latest version.

    Opening a later version then replays only the commits after it (delta-rs also writes one
    every 100 commits).
    """
    version = _open(lake_path).checkpoint()
    click.echo(f"checkpoint written at version {version}")


@main.command("report")
@_lake_option
@click.option(
    "--html",
    "html_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The page to write.",
)
@click.option(
    "--version",
    type=click.IntRange(min=0),
    default=None,
    help="Report on this version (default: the latest).",
)
def report_cmd(lake_path: str, html_path: Path, version: int | None) -> None:
    """Write one self-contained HTML page about a version of the lake.

    The filter funnel, document lengths before and after, languages, duplicate groups, chunk
    throughput over time, failures. Inline CSS and SVG: nothing is fetched.
    """
    out = _open(lake_path).report(html_path, version)
    click.echo(f"wrote {out}")
