"""The pipeline configuration (``lakecurate.toml``): parsed strictly, hashed canonically.

Unknown keys and bad values are errors that name the key and what is allowed, because a typo in a
filter threshold silently changing a corpus is the worst kind of bug. The hash covers only what
changes decisions, so tuning ``workers`` does not make a lake look re-configured.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lakecurate.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|KIB|MB|MIB|GB|GIB)?\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 1000, "KIB": 1024, "MB": 1000**2, "MIB": 1024**2, "GB": 1000**3,
          "GIB": 1024**3}

# Bump when normalisation or hashing of documents changes: old lakes then refuse to mix results.
NORMALISATION_VERSION = 1


def parse_size(value: object, key: str) -> int:
    """Parse ``"256MiB"`` / ``1000000`` into bytes, or raise naming ``key``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and (m := _SIZE.match(value)):
        n = int(float(m.group(1)) * _UNITS[(m.group(2) or "B").upper()])
        if n > 0:
            return n
    raise ConfigError(f"{key} = {value!r} is not a size: use bytes or e.g. \"256MiB\", \"1GB\"")


@dataclass(frozen=True)
class IngestConfig:
    """How inputs are cut and retried; none of it changes a document's decision."""

    chunk_size: int = 256 * 1024**2
    max_attempts: int = 3
    retry_backoff: float = 1.0
    workers: int = 0  # 0 = one per core


@dataclass(frozen=True)
class DedupConfig:
    """Lake-wide exact deduplication by normalised-content hash (first seen wins)."""

    exact: bool = True


@dataclass(frozen=True)
class Config:
    """The whole pipeline configuration."""

    ingest: IngestConfig = field(default_factory=IngestConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)

    def decision_dict(self) -> dict[str, Any]:
        """The parts that change which documents are kept, canonically ordered."""
        return {"normalisation": NORMALISATION_VERSION, "dedup": asdict(self.dedup)}

    @property
    def hash(self) -> str:
        """A short, stable hash recorded with every commit."""
        canon = json.dumps(self.decision_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]


def _check_keys(section: str, given: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown key [{section}].{unknown[0]} in lakecurate.toml; allowed keys: "
            + ", ".join(sorted(allowed))
        )


def _int(section: str, key: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"[{section}].{key} = {value!r}: must be an integer >= {minimum}")
    return value


def from_dict(data: dict[str, Any]) -> Config:
    """Build a validated ``Config`` from parsed TOML."""
    _check_keys("top level", data, {"ingest", "dedup"})
    ing = data.get("ingest", {})
    ded = data.get("dedup", {})
    for name, sec in (("ingest", ing), ("dedup", ded)):
        if not isinstance(sec, dict):
            raise ConfigError(f"[{name}] must be a table, got {type(sec).__name__}")
    _check_keys("ingest", ing, {"chunk_size", "max_attempts", "retry_backoff", "workers"})
    _check_keys("dedup", ded, {"exact"})
    defaults = IngestConfig()
    backoff = ing.get("retry_backoff", defaults.retry_backoff)
    # TOML allows nan and inf: nan passes `< 0` and would crash time.sleep, inf waits forever.
    if (not isinstance(backoff, int | float) or isinstance(backoff, bool) or backoff < 0
            or not math.isfinite(backoff)):
        raise ConfigError(f"[ingest].retry_backoff = {backoff!r}: must be seconds >= 0")
    exact = ded.get("exact", True)
    if not isinstance(exact, bool):
        raise ConfigError(f"[dedup].exact = {exact!r}: must be true or false")
    return Config(
        ingest=IngestConfig(
            chunk_size=parse_size(ing.get("chunk_size", defaults.chunk_size),
                                  "[ingest].chunk_size"),
            max_attempts=_int("ingest", "max_attempts",
                              ing.get("max_attempts", defaults.max_attempts), 1),
            retry_backoff=float(backoff),
            workers=_int("ingest", "workers", ing.get("workers", defaults.workers), 0),
        ),
        dedup=DedupConfig(exact=exact),
    )


def load(path: Path) -> Config:
    """Read and validate a ``lakecurate.toml``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    return from_dict(data)


def to_toml(cfg: Config) -> str:
    """Serialise a config so that ``load`` gives it back (written into new lakes)."""
    i, d = cfg.ingest, cfg.dedup
    return (
        "[ingest]\n"
        f"chunk_size = {i.chunk_size}\n"
        f"max_attempts = {i.max_attempts}\n"
        f"retry_backoff = {i.retry_backoff}\n"
        f"workers = {i.workers}\n\n"
        "[dedup]\n"
        f"exact = {'true' if d.exact else 'false'}\n"
    )
