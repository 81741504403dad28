"""The public Python surface: ``Lake.open(path).ingest(...)``, ``.sql(...)``, ``.status()``.

The CLI is a thin layer over this; everything a command can do, a program can do too. Each
method imports the layer it needs when it runs, so ``status`` does not load the ingest path,
Delta Lake or Arrow (it starts in well under half a second).
"""

from __future__ import annotations

import datetime
import json
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakecurate import config as configuration
from lakecurate import engine
from lakecurate.config import Config
from lakecurate.errors import ConfigError, LakeError, QueryError, UsageError, one_line
from lakecurate.lake.paths import LakePaths
from lakecurate.read import query

if TYPE_CHECKING:
    from lakecurate.ingest.runner import IngestReport
    from lakecurate.ingest.scheduler import Executor
    from lakecurate.ops.maintenance import CompactReport, VacuumReport
    from lakecurate.ops.verify import VerifyReport
    from lakecurate.progress import Reporter
    from lakecurate.read.export import ExportManifest
    from lakecurate.read.versions import Explanation, LakeVersion

__all__ = ["IngestReport", "Lake", "LakeStatus"]


def __getattr__(name: str) -> Any:
    """``IngestReport`` on first use (it lives with the ingest path, loaded only to ingest)."""
    if name == "IngestReport":
        from lakecurate.ingest.runner import IngestReport

        return IngestReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class LakeStatus:
    """The pipeline, chunks by status, the funnel, keep rates by file and by language, what the
    data files hold, recent failures and runs."""

    by_status: query.QueryResult
    funnel: query.QueryResult
    failures: query.QueryResult
    runs: query.QueryResult
    flagged: query.QueryResult
    pipeline: query.QueryResult
    by_file: query.QueryResult
    by_language: query.QueryResult
    storage: query.QueryResult


def _pipeline(cfg: Config | None) -> query.QueryResult:
    """The `pipeline` rows of `status`: the preset the lake's config came from, its hash, and
    its steps in order (one row each, so none is cut off in a narrow terminal)."""
    rows: list[tuple[Any, ...]] = []
    if cfg is not None:
        rows = [("preset", cfg.preset or "none (the lake's own config)"), ("config", cfg.hash)]
        rows += [(f"step {i}", name) for i, name in enumerate(cfg.step_names(), 1)]
    return query.QueryResult(["setting", "value"], rows)


class Lake:
    """One lake folder (design section 3)."""

    def __init__(self, root: Path | LakePaths) -> None:
        self.paths = root if isinstance(root, LakePaths) else LakePaths(Path(root))

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, state_dir: str | os.PathLike[str] | None = None
    ) -> Lake:
        """A handle on the lake at ``path`` (created by the first ``ingest``): a local folder,
        or ``s3://bucket/prefix`` whose DuckDB state lives in the local ``state_dir``
        (default: ``$LAKECURATE_STATE_DIR``, else a folder under ``~/.cache/lakecurate``)."""
        paths = LakePaths.of(path, state_dir)
        if paths.shared is None and paths.root.exists() and not paths.root.is_dir():
            raise LakeError(f"{paths.root} is a file, not a lake folder")
        lake = cls(paths)
        lake._take_over()
        return lake

    def _take_over(self) -> None:
        """An object-store lake with no state on this machine (a new machine, a lost disk):
        start from the state copied to the lake (``store.remote``), or else derive it from the
        lake's Delta log, as ``ingest`` would, so that every command works here. Only the
        local state folder is written."""
        paths = self.paths
        if paths.shared is None or paths.state.exists():
            return
        from lakecurate.store import remote
        from lakecurate.store.session import write_session

        try:
            there = paths.documents.exists()
        except OSError as exc:
            raise LakeError(
                f"cannot reach the lake {paths.name}: {one_line(exc)}; check the bucket name, "
                "AWS_ENDPOINT_URL, AWS_REGION and the credentials (AWS_ACCESS_KEY_ID, ...)"
            ) from exc
        if not there:
            return
        paths.root.mkdir(parents=True, exist_ok=True)
        copied = remote.load(paths)
        how = (
            f"state copied from {paths.name}/{remote.STATE_FOLDER} (watermark {copied})"
            if copied is not None
            else f"state derived from the Delta log of {paths.name}"
        )
        with write_session(paths, "take-over", paths.name, self.config(), create=True) as s:
            s.finish("OK", how)

    @property
    def root(self) -> Path:
        """The lake's local folder (on object storage: its state folder)."""
        return self.paths.root

    def config(self, given: Config | Path | None = None) -> Config:
        """The lake's config; a given one must make the same decisions as the lake's.

        A lake whose lakecurate.toml is gone gets it back from its Delta log (every chunk
        commit carries the config); without that, silently using the default pipeline would
        keep what the lake's own filters dropped (issue 12, D15).
        """
        cfg = configuration.load(given) if isinstance(given, Path) else given
        stored = self._lake_config()
        if stored is None and self.paths.documents.exists():
            stored = self._config_from_log(cfg)
        if stored is None:
            return cfg or Config()
        if cfg is None:
            return stored
        if cfg.hash != stored.hash:
            # the lake keeps the rules it was made with (config.NORMALISATION_VERSION, and the
            # near-dedup defaults before issue 17: config.NEAR_LEGACY)
            cfg = configuration.rules_of(cfg, stored.hash)
        if cfg.hash != stored.hash:
            raise ConfigError(
                f"this lake was built with config {stored.hash} ({self.paths.config}); the "
                f"given config is {cfg.hash} and would decide differently. Use a new lake for "
                "a new pipeline, or edit the lake's lakecurate.toml knowingly"
            )
        return cfg

    def _lake_config(self) -> Config | None:
        """The lake's lakecurate.toml. One that does not state its rules (``normalisation``,
        and the near-dedup keys whose defaults changed: ``config.states_its_rules``) was written
        before they were recorded: its documents were made with the rules whose config hash the
        Delta log's commits carry."""
        if not self.paths.config.exists():
            return None
        stored = configuration.load(self.paths.config)
        text = self.paths.config.read_text(encoding="utf-8")
        if configuration.states_its_rules(tomllib.loads(text)) or not self.paths.documents.exists():
            return stored
        from lakecurate.lake.delta import DeltaStore
        from lakecurate.store.rebuild import logged_config

        _, digest = logged_config(DeltaStore(self.paths.documents))
        return configuration.rules_of(stored, digest) if digest else stored

    def _config_from_log(self, given: Config | None) -> Config | None:
        """The config the log names, written back as the lake's lakecurate.toml."""
        from lakecurate.lake import atomic
        from lakecurate.lake.delta import DeltaStore
        from lakecurate.store.rebuild import logged_config

        text, digest = logged_config(DeltaStore(self.paths.documents))
        if text is not None:
            stored = configuration.from_dict(tomllib.loads(text))
            self.paths.root.mkdir(parents=True, exist_ok=True)  # a new state folder
            atomic.write_text(self.paths.config, text)
            return configuration.rules_of(stored, digest) if digest else stored
        if digest is None:
            return None
        if given is not None and configuration.rules_of(given, digest).hash == digest:
            return configuration.rules_of(given, digest)
        if given is None and configuration.rules_of(Config(), digest).hash == digest:
            return configuration.rules_of(Config(), digest)
        raise ConfigError(
            f"{self.paths.config} is missing and this lake's commits were made with config "
            f"{digest}, which its log does not hold: pass --config with the config the lake "
            "was built with to go on"
        )

    def ingest(
        self,
        inputs: list[str | os.PathLike[str]],
        *,
        config: Config | Path | None = None,
        preset: str | None = None,
        workers: int | None = None,
        verify: bool = False,
        reporter: Reporter | None = None,
        args: str = "",
        text_field: str | None = None,
        id_field: str | None = None,
        executor: str | None = None,
        address: str | None = None,
    ) -> IngestReport:
        """Ingest files or folders; safe to re-run and to kill at any moment.

        ``executor`` (``[ingest].executor`` unless given): ``"local"``, a process pool, or
        ``"ray"``, Ray tasks on the cluster at ``address`` (``[ingest].address``; none: a Ray
        instance started here). Both give the same lake.

        ``preset`` names a shipped preset (``config.PRESETS``); with a config file, the file
        extends it. A new lake given neither gets ``config.default_config()``.

        ``text_field`` / ``id_field`` override ``[input]`` of the config: the record fields the
        documents' text and id are read from. They change decisions, so on an existing lake
        they must agree with its config.

        Workers start with ``spawn``: a script must call this under ``if __name__ ==
        "__main__":`` (refused at once otherwise, see ``require_main_guard``)."""
        from lakecurate.ingest.chunking import find_inputs
        from lakecurate.ingest.runner import ingest, require_main_guard
        from lakecurate.lake import atomic

        require_main_guard()
        given = configuration.with_preset(config, preset)
        if given is None and not (self.paths.config.exists() or self.paths.documents.exists()):
            given = configuration.default_config()  # a new lake: the default preset
        cfg = self.config(given)
        if text_field is not None or id_field is not None:
            cfg = self.config(configuration.with_input(cfg, text_field, id_field))
        # Once per ingest; a typo'd path fails before a lake (and its config) is created.
        found = find_inputs([os.fspath(p) for p in inputs], self.paths.name)
        run_on = _executor(cfg, workers, executor, address)
        self.paths.root.mkdir(parents=True, exist_ok=True)
        if not self.paths.config.exists():
            atomic.write_text(self.paths.config, configuration.to_toml(cfg))
        return ingest(
            self.paths,
            found,
            cfg,
            workers=workers,
            verify=verify,
            reporter=reporter,
            args=args,
            executor=run_on,
        )

    def sql(
        self,
        text: str,
        *,
        version: int | None = None,
        as_of: str | datetime.datetime | None = None,
        params: dict[str, Any] | None = None,
    ) -> query.QueryResult:
        """Run a read-only query over the state tables and the docs/rejects views (of the
        latest version, or of ``version`` / the version current at ``as_of``)."""
        con = query.open_reader(
            self.paths.state, self.paths.documents, version, as_of, tables=query.tables_for(text)
        )
        try:
            return query.run(con, text, params)
        finally:
            con.close()

    def status(self) -> LakeStatus:
        """What `lakecurate status` shows, from the state tables; the table's log is opened
        too (without Arrow), so a damaged lake says so here as in every other command."""
        from lakecurate.lake.delta import DeltaStore
        from lakecurate.store.state import SNAPSHOT_TABLES

        self._require_state()
        table = DeltaStore(self.paths.documents).table()
        cfg = self._stored_config()
        files = table.file_uris() if table is not None else []
        con = query.open_reader(
            self.paths.state,
            self.paths.documents,
            tables=SNAPSHOT_TABLES,
            views=False,
            files=files,
        )
        try:
            by_file = by_language = storage = query.QueryResult([], [])
            if files:
                storage = query.run(con, engine.q("state.storage"))
                by_file = query.shorten_paths(
                    query.run(con, engine.q("report.by_file"), {"limit": 20}), "file"
                )
                if cfg is not None and "langid" in cfg.step_names():
                    by_language = query.run(con, engine.q("report.by_language"), {"limit": 20})
            return LakeStatus(
                by_status=query.run(con, engine.q("state.by_status")),
                funnel=query.run(con, engine.q("state.funnel")),
                failures=query.run(con, engine.q("state.failures")),
                runs=query.run(con, engine.q("state.runs"), {"limit": 5}),
                flagged=query.run(con, engine.q("state.flagged")),
                pipeline=_pipeline(cfg),
                by_file=by_file,
                by_language=by_language,
                storage=storage,
            )
        finally:
            con.close()

    def restore(self, version: int) -> int:
        """Make ``version`` the current version (a new commit) and bring the chunk state and
        the membership index back in line with it; returns the new version number.

        A later ingest is then exactly as if the commits after ``version`` never happened.
        """
        from lakecurate.ingest.commit import Committer
        from lakecurate.store.session import write_session

        with write_session(self.paths, "restore", str(version), None) as session:
            delta = session.delta
            current = delta.version()
            if current < 0:
                raise LakeError("the lake has no table yet: nothing to restore")
            if version == current:
                raise LakeError(
                    f"version {version} is already the current version; nothing to restore"
                )
            delta.resolve(version)  # outside the log: "does not exist", naming what can be read
            try:  # the rule `sql --version` and `export --version` follow too
                delta.readability().check(version)
            except LookupError as exc:
                raise delta.unreadable(version, exc) from exc
            new_version = Committer(session, None).restore(version)
            session.finish("OK", f"restored version {version} as version {new_version}")
            return new_version

    def verify(self, *, repair: bool = False, deep: bool = False) -> VerifyReport:
        """Check that table, log, state and index agree (``deep``: read every page of every
        live data file too); with ``repair``, fix what can be."""
        from lakecurate.ops.verify import verify

        return verify(self.paths, self._config_if_known(), repair=repair, deep=deep)

    def index_stats(self) -> query.QueryResult:
        """Tier 1 per key space (n, m, k, fill, estimated and target p, memory, from the Bloom
        files) beside tier 2 (rows in DuckDB) and the last run's lookup counters."""
        from lakecurate.store import bloom
        from lakecurate.store.index import describe_filter

        self._require_state()
        con = query.open_reader(self.paths.state, self.paths.documents)
        try:
            tier2 = query.run(con, engine.q("index.tier2_sizes")).dicts()[0]
            last = query.run(con, engine.q("state.get_meta"), {"key": "index.last_run"}).rows
        finally:
            con.close()
        runs = json.loads(last[0][0]) if last else {}
        rows = []
        for space in ("content", "ids"):
            info: dict[str, object] = {"space": space, "tier2_rows": tier2[space]}
            try:
                filt, watermark = bloom.load(self.paths.index / f"{space}.bloom")
                info |= describe_filter(filt) | {"watermark": watermark, "file": "ok"}
            except bloom.BloomFileError as exc:
                info["file"] = exc.problem
            rows.append(info)
        for info in rows:
            info |= {f"last_run_{k}": v for k, v in runs.items()}
        columns = list(dict.fromkeys(k for r in rows for k in r))
        return query.QueryResult(columns, [tuple(r.get(c) for c in columns) for r in rows])

    def dedup_stats(
        self, largest: int = 10, samples: int = 5
    ) -> tuple[query.QueryResult, query.QueryResult]:
        """Near-duplicate clusters: (size distribution, the largest clusters with sample ids).

        A giant cluster is the usual sign of a threshold that is too loose.
        """
        self._require_state()
        cfg = self.config()
        if not cfg.near_dedup.enabled:
            raise LakeError(
                f"near dedup is not enabled in {self.paths.config} ([near_dedup] enabled = true)"
            )
        con = query.open_reader(self.paths.state, self.paths.documents)
        try:
            sizes = query.run(con, engine.q("dedup.cluster_sizes"))
            top = query.run(
                con, engine.q("dedup.largest_clusters"), {"limit": largest, "samples": samples}
            )
        except QueryError as exc:
            raise LakeError(
                f"no near-dedup index in this lake yet ({exc}): run an ingest "
                "with near dedup enabled first"
            ) from exc
        finally:
            con.close()
        return sizes, top

    def retry(self, keys: list[str] | None = None) -> list[str]:
        """Re-queue DEAD chunks (all, or the named ones); the next ingest processes them."""
        from lakecurate.store.session import write_session

        with write_session(self.paths, "retry", " ".join(keys or []), None) as session:
            requeued = session.state.requeue_dead(keys, None)
            session.finish("OK", f"re-queued {len(requeued)} chunk(s)")
            return requeued

    # -- time travel, lineage, export, maintenance (issue 3) --------------------------------
    def at(
        self, version: int | None = None, as_of: str | datetime.datetime | None = None
    ) -> LakeVersion:
        """A read-only view of one version: ``lake.at(version=3).sql("SELECT ...")``,
        ``lake.at(as_of="2026-11-30 12:00")`` (UTC unless the time names its zone)."""
        from lakecurate.read.versions import LakeVersion

        return LakeVersion.bind(self.paths.state, self.paths.documents, version, as_of)

    def history(self, limit: int | None = None) -> query.QueryResult:
        """One row per Delta commit: version, time, operation, chunk keys, rows added and
        removed, run id, config hash (the newest ``limit`` when given)."""
        from lakecurate.read import history

        self._require_state()
        return history.history(self.paths.state, self.paths.documents, limit)

    def diff(
        self, a: int, b: int, rows: bool = False, limit: int | None = None
    ) -> query.QueryResult:
        """Documents added, removed and changed in decision from version ``a`` to ``b``:
        counts per kind, or (``rows=True``) the documents."""
        from lakecurate.read import history

        self._require_state()
        return history.diff(self.paths.state, self.paths.documents, a, b, rows, limit)

    def explain(self, doc_id: str, version: int | None = None) -> Explanation:
        """The lineage of a document: source file and line, chunk, input sha256, run, config,
        decision and reason, ``dup_of`` and its cluster."""
        return self.at(version).explain(doc_id)

    def export(
        self,
        version: int | None,
        out: str | os.PathLike[str],
        *,
        fmt: str = "parquet",
        shard_size: int | None = None,
    ) -> ExportManifest:
        """The kept documents of ``version`` (latest when None) as shards plus a manifest."""
        from lakecurate.read.export import DEFAULT_SHARD_BYTES

        size = DEFAULT_SHARD_BYTES if shard_size is None else shard_size
        return self.at(version).export(Path(out), fmt=fmt, shard_size=size)

    def report(self, html_path: str | os.PathLike[str], version: int | None = None) -> Path:
        """Write a self-contained HTML report of ``version`` (latest when None)."""
        return self.at(version).report(Path(html_path))

    def compact(self, target_size: int | None = None) -> CompactReport:
        """Rewrite small data files into large ones (a new version; no document changes)."""
        from lakecurate.ops import maintenance

        return maintenance.compact(self.paths, self._config_if_known(), target_size)

    def vacuum(
        self, dry_run: bool = True, retention_hours: float | None = None, force: bool = False
    ) -> VacuumReport:
        """Delete files only versions older than the retention need (a dry run by default)."""
        from lakecurate.ops import maintenance

        self._require_state()
        return maintenance.vacuum(
            self.paths, self._config_if_known(), dry_run, retention_hours, force
        )

    def checkpoint(self) -> int:
        """Write a Delta checkpoint of the latest version; returns the version."""
        from lakecurate.ops import maintenance

        return maintenance.checkpoint(self.paths, self._config_if_known())

    def _require_state(self) -> None:
        self.paths.require_state("read")

    def _stored_config(self) -> Config | None:
        """The lake's lakecurate.toml as it is (None when missing or unreadable): what `status`
        shows, never written back from the log by a read-only command."""
        try:
            return self._lake_config()
        except ConfigError:
            return None

    def _config_if_known(self) -> Config | None:
        """The lake's config for a command that makes no decisions (its near-dedup settings
        keep the band index whole); None when the lake has none on record."""
        try:
            return self.config() if self.paths.state.exists() else None
        except ConfigError:
            return None


def _executor(
    cfg: Config, workers: int | None, name: str | None, address: str | None
) -> Callable[[int], Executor]:
    """The executor an ingest runs on: its name and address from the call, else the config."""
    from lakecurate.ingest.executor import LocalExecutor

    name = name or cfg.ingest.executor
    if name not in configuration.EXECUTORS:
        raise UsageError(f"unknown executor {name!r}: one of " + ", ".join(configuration.EXECUTORS))
    if name == "local":
        return LocalExecutor
    from lakecurate.ingest.ray_executor import RayExecutor, check_address, require_ray

    require_ray()
    at = address or cfg.ingest.address or None
    check_address(at)
    return lambda _n: RayExecutor(workers or cfg.ingest.workers or None, at)
