"""Where everything of one lake lives (design section 3): one ``LakePaths`` for every command."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lakecurate.errors import LakeError

SNAPSHOT_NAME = "state.snapshot.duckdb"
"""The copy of the small state tables readers use while a writer holds ``state.duckdb``."""

# `s3://b/x` as a Path is `s3:/b/x`; a scheme has two letters or more (`C:/` is a drive).
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+(.*)$", re.DOTALL)


@dataclass(frozen=True)
class LakePaths:
    """The files and folders of the lake at ``root``."""

    root: Path

    def __post_init__(self) -> None:
        """Refuse a URI before anything is created: as a path, ``s3://b/x`` would be a local
        folder ``./s3:/b/x``."""
        if m := _URI.match(str(self.root)):
            scheme, rest = m.group(1).lower(), m.group(2)
            if scheme == "file":
                raise LakeError(f"lake file:///{rest} is a URL: pass the folder as a path: /{rest}")
            raise LakeError(
                f"lake {scheme}://{rest}: object storage and URLs are not supported yet, only "
                "local folders; pass a local folder (a mounted bucket works too)"
            )

    @property
    def state(self) -> Path:
        return self.root / "state.duckdb"

    @property
    def documents(self) -> Path:
        return self.root / "documents"

    @property
    def staging(self) -> Path:
        return self.root / "staging"

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
            raise LakeError(
                f"no lake at {self.root} (no state.duckdb): nothing to {doing}; run "
                "`lakecurate ingest` first, or pass --lake"
            )
