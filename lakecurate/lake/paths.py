"""Where everything of one lake lives (design section 3): one ``LakePaths`` for every command.

A lake on local disk is one folder. A lake on object storage (``s3://bucket/prefix``) keeps
its Delta table and staged files there, where every node reaches them, and its DuckDB state,
indexes and lock in a local *state folder* on the driver's disk (one per lake URI under
``$LAKECURATE_STATE_DIR``, by default ``~/.cache/lakecurate``). The Delta log is the truth: a
state folder that is missing or behind is re-derived from it (``store.rebuild.catch_up``), so
another machine can take over the lake from object storage alone.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from lakecurate.errors import LakeError
from lakecurate.lake.storage import Location, check_uri, is_uri

SNAPSHOT_NAME = "state.snapshot.duckdb"
"""The copy of the small state tables readers use while a writer holds ``state.duckdb``."""

STATE_DIR_ENV = "LAKECURATE_STATE_DIR"


def default_state_dir(uri: str) -> Path:
    """The local state folder of an object-store lake: one per URI, readable, under
    ``$LAKECURATE_STATE_DIR`` (else ``~/.cache/lakecurate``)."""
    base = os.environ.get(STATE_DIR_ENV) or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "lakecurate"
    )
    tail = uri.removeprefix("s3://").replace("/", "_")[:80]
    return Path(base) / f"{tail}-{hashlib.sha256(uri.encode()).hexdigest()[:8]}"


def key_folder(state: str | os.PathLike[str]) -> Path:
    """The folder of the membership index's key files (``store.key_files``) of the state
    database at ``state``: the ``index/keys`` folder beside it."""
    return Path(state).parent / "index" / "keys"


@dataclass(frozen=True)
class LakePaths:
    """The files and folders of the lake whose local folder is ``root`` (the lake itself on
    local disk; the state folder of a lake on object storage, ``shared``)."""

    root: Path
    shared: Location | None = None

    def __post_init__(self) -> None:
        """Refuse a URI as a local folder: as a path, ``s3://b/x`` would be ``./s3:/b/x``."""
        if is_uri(str(self.root)):
            raise LakeError(f"{self.root} is a URL: open it with LakePaths.of")

    @classmethod
    def of(
        cls, lake: str | os.PathLike[str], state_dir: str | os.PathLike[str] | None = None
    ) -> LakePaths:
        """The paths of the lake ``lake``: a local folder, or ``s3://bucket/prefix`` with its
        state in the folder ``state_dir`` (default: ``default_state_dir``)."""
        text = os.fspath(lake)
        if not is_uri(text):
            return cls(Path(text))
        uri = check_uri(text)
        return cls(Path(state_dir) if state_dir else default_state_dir(uri), Location(uri))

    @property
    def storage(self) -> Location:
        """Where the Delta table and the staged files live."""
        return self.shared or Location.of(self.root)

    @property
    def name(self) -> str:
        """The lake as its user names it (in messages)."""
        return str(self.shared or self.root)

    @property
    def state(self) -> Path:
        return self.root / "state.duckdb"

    @property
    def documents(self) -> Location:
        return self.storage / "documents"

    @property
    def staging(self) -> Location:
        return self.storage / "staging"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def signatures(self) -> Path:
        """The near-dedup signature files (``store.signatures``), beside the Bloom files."""
        return self.index / "signatures"

    @property
    def snapshot(self) -> Path:
        return self.root / SNAPSHOT_NAME

    @property
    def config(self) -> Path:
        return self.root / "lakecurate.toml"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    def require_state(self, doing: str) -> None:
        """Refuse a command on a folder that is not a lake (yet): say what to run first."""
        if not self.state.exists():
            if (self.documents / "_delta_log").exists():  # the table is there: not "no lake"
                raise LakeError(
                    f"the lake at {self.name} has its table but not its state ({self.state} "
                    f"is missing: deleted, or on a lost disk); nothing to {doing} until it is "
                    f"back: run `lakecurate verify --repair --lake {self.name}` to derive it "
                    "from the table's Delta log (or restore a backup of it)"
                )
            raise LakeError(
                f"no lake at {self.name} (no state.duckdb): nothing to {doing}; run "
                "`lakecurate ingest` first, or pass --lake"
            )
