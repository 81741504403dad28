"""The pipeline configuration (``lakecurate.toml``): parsed strictly, hashed canonically.

Unknown keys and bad values are errors that name the key and what is allowed, because a typo in a
filter threshold silently changing a corpus is the worst kind of bug. The hash covers only what
changes decisions, so tuning ``workers`` does not make a lake look re-configured.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

from lakecurate.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|KIB|MB|MIB|GB|GIB)?\s*$", re.IGNORECASE)
_UNITS = {
    "B": 1,
    "KB": 1000,
    "KIB": 1024,
    "MB": 1000**2,
    "MIB": 1024**2,
    "GB": 1000**3,
    "GIB": 1024**3,
}

# The version of the rules that turn a record into a document (normalisation, hashing, language
# codes). Bump it when they change, and keep the old rule behind the version: a lake records the
# version it was made with (top-level `normalisation` in its lakecurate.toml, or, for a lake made
# before that key existed, the config hash in its Delta log; ``Lake.config``) and keeps its rules,
# so its old and new documents never mix rules. 1: the first rules. 2 (issue 17): control
# characters and ANSI escapes stripped in normalisation, BCP-47 language codes. 3 (issue 17):
# per-language filter rules after language id (words counted per language, FineWeb-2's
# thresholds and stop words; lakecurate/steps/filters/languages.py, docs/filters.md).
NORMALISATION_VERSION = 3
NORMALISATION_VERSIONS = (1, 2, 3)


def parse_size(value: object, key: str, zero: bool = False) -> int:
    """Parse ``"256MiB"`` / ``1000000`` into bytes, or raise naming ``key`` (``zero``: 0 is
    allowed, meaning off)."""
    least = 0 if zero else 1
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return value
    if isinstance(value, str) and (m := _SIZE.match(value)):
        n = int(float(m.group(1)) * _UNITS[(m.group(2) or "B").upper()])
        if n >= least:
            return n
    zero_ok = " (0: off)" if zero else ""
    raise ConfigError(
        f'{key} = {value!r} is not a size{zero_ok}: use bytes or e.g. "256MiB", "1GB"'
    )


EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class IngestConfig:
    """How inputs are cut and retried; none of it changes a document's decision."""

    chunk_size: int = 256 * 1024**2
    max_attempts: int = 3
    retry_backoff: float = 1.0
    workers: int = 0  # 0 = one per core (local), every CPU of the cluster (ray)
    executor: str = "local"  # where chunks run: "local" (a process pool) or "ray"
    address: str = ""  # the Ray cluster to join ("" with executor = "ray": start one here)
    heartbeat_timeout: float = 60.0  # a worker silent this long is killed, its chunk retried
    chunk_timeout: float = 3600.0  # a chunk running longer is killed and retried; 0 = no limit
    # A compressed JSONL file is cut into chunks of chunk_size decompressed bytes at line ends (one
    # chunk while it fits); a chunk whose text is larger still (one enormous line, a chunk_size
    # above this) fails (DEAD, with what to do) instead of exhausting the worker's memory.
    max_compressed_chunk_bytes: int = 1024**3
    # One Delta commit carries a group of chunks; a group closes when it has this many chunks,
    # this many input bytes, or has been open this long (seconds), whichever comes first. A
    # commit costs tens of milliseconds whatever its size, so grouping keeps the driver's
    # commit time per chunk small; a crash loses at most the uncommitted group (its chunks'
    # staged files stay, so nothing is re-processed).
    commit_chunks: int = 64
    commit_bytes: int = 1024**3
    commit_seconds: float = 5.0
    # Small chunks (an eighth of this at most) go to a worker many to a task (up to 64), up to
    # this many input bytes: one filter query for them all, whose fixed cost (~190 ms with the
    # default preset) was most of a small chunk's time. A worker killed mid-task loses the
    # task. 0: one chunk a task.
    bundle_bytes: int = 4 * 1024**2
    # Processes that hold the near-dedup band index's rows and tier 2's keys for the driver,
    # partitioned by hash (store.band_shards): the driver's memory then stops growing with the
    # lake and its lookups run in parallel. 0: the driver holds them (fastest on a small machine).
    deciders: int = 0


@dataclass(frozen=True)
class InputConfig:
    """Where a record keeps its text and its id, the ``[input]`` section.

    The lake's columns stay ``text`` and ``id``; these only name the record fields (or Parquet
    columns) they are read from, e.g. ``content`` or ``body``. They change which documents a
    lake holds, so a value other than the default is part of the config hash.
    """

    text_field: str = "text"
    id_field: str = "id"

    def __post_init__(self) -> None:
        for key in ("text_field", "id_field"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                raise ConfigError(
                    f"[input].{key} = {value!r}: must be the non-empty name of a record field"
                )
        if self.text_field == self.id_field:
            raise ConfigError(
                f"[input].text_field and id_field are both {self.text_field!r}: a field "
                "cannot be both the text and the id; name two different fields"
            )


REJECTED_TEXT = {True: "keep", False: "drop", "sample": "sample"}
"""``[output] keep_rejected_text`` -> what a worker does with a filtered-out document's text."""


@dataclass(frozen=True)
class OutputConfig:
    """What the lake stores of documents it does not keep, the ``[output]`` section.

    ``keep_rejected_text``: ``true`` (default: lineage and audits read it), ``false`` (the
    text of a document a quality filter dropped is not stored; its id, reason, measured value,
    language and hash are), or ``"sample"`` (stored for one such document in a hundred, those at
    an input line or row number divisible by 100). Duplicates always keep their text: one
    becomes the kept copy when its original leaves the lake. It changes no decision, so it is
    not part of the config hash and may change between runs (it applies to what is committed
    from then on).
    """

    keep_rejected_text: bool | str = True

    def __post_init__(self) -> None:
        if not (isinstance(self.keep_rejected_text, bool) or self.keep_rejected_text == "sample"):
            raise ConfigError(
                f"[output].keep_rejected_text = {self.keep_rejected_text!r}: must be true, "
                'false or "sample"'
            )

    @property
    def rejected_text(self) -> str:
        """``keep``, ``drop`` or ``sample``."""
        return REJECTED_TEXT[self.keep_rejected_text]


def _output_from_dict(sec: object) -> OutputConfig:
    """The ``[output]`` section: unknown keys here, values by the class."""
    return OutputConfig(**_section("output", sec, {"keep_rejected_text"}))


def _input_from_dict(sec: object) -> InputConfig:
    """The ``[input]`` section: unknown keys here, values by the class."""
    return InputConfig(**_section("input", sec, {"text_field", "id_field"}))


def with_input(cfg: Config, text_field: str | None = None, id_field: str | None = None) -> Config:
    """``cfg`` reading text and id from these fields (None: as ``cfg`` does); validated."""
    if text_field is None and id_field is None:
        return cfg
    return replace(
        cfg,
        input=InputConfig(
            text_field=cfg.input.text_field if text_field is None else text_field,
            id_field=cfg.input.id_field if id_field is None else id_field,
        ),
    )


@dataclass(frozen=True)
class DedupConfig:
    """Lake-wide exact deduplication by normalised-content hash (first seen wins)."""

    exact: bool = True


NearUnit = Literal["word", "char", "auto", "script"]
NearLink = Literal["any", "kept"]
NearVerifyOn = Literal["signature", "shingles"]

NEAR_UNITS: tuple[NearUnit, ...] = ("word", "char", "auto", "script")
"""Allowed values of ``[near_dedup].unit``: word shingles, character shingles (Chinese,
Japanese), ``script`` (each script its own way inside a document: characters of scripts written
without spaces, words of the others) or ``auto`` (characters for a whole document whose letters
are mostly CJK, words otherwise: the rule of lakes made before ``script``)."""

NEAR_LINKS: tuple[NearLink, ...] = ("any", "kept")
"""Allowed values of ``[near_dedup].link`` (the same as ``store.band_index.LINKS``)."""

NEAR_VERIFY_ON: tuple[NearVerifyOn, ...] = ("signature", "shingles")
"""Allowed values of ``[near_dedup].verify_on``: what verification compares, the MinHash
signatures (an estimate) or the documents' shingle sets (the exact Jaccard)."""

NEAR_LEGACY: dict[str, tuple[Any, Any]] = {
    "unit": ("script", "auto"),
    "link": ("kept", "any"),
    "verify_on": ("shingles", "signature"),
}
"""The near-dedup defaults that changed (issue 17): key -> (default now, default before). A
lake made before keeps the old values (``rules_of``): its lakecurate.toml lacks ``verify_on``
(and ``link`` when older still), and its commits carry the config hash of the old rule."""

_NEAR_TYPES: dict[str, tuple[type, ...]] = {
    "enabled": (bool,),
    "threshold": (float, int),
    "num_perm": (int,),
    "ngram": (int,),
    "unit": (str,),
    "seed": (int,),
    "bands": (int,),
    "rows": (int,),
    "verify": (bool,),
    "link": (str,),
    "verify_on": (str,),
}


@dataclass(frozen=True)
class NearDedupConfig:
    """MinHash near-duplicate removal, the ``[near_dedup]`` section; off unless enabled.

    The one config of near dedup: the signatures (``steps.near.minhash``: ``layout``,
    ``fingerprint``, ``describe``) and the band index (``store.band_index``) take it as is. Every
    value is checked when the object is made, so a bad ``lakecurate.toml`` fails when it is
    loaded, with an error naming ``[near_dedup].key``.

    Defaults, and why: 128 permutations give a Jaccard estimate with standard error
    ``sqrt(J(1-J)/128)`` (0.035 at J = 0.8) for 512 bytes per document, the usual sweet spot
    (datatrove uses 112, datasketch and rensa 128). Word 5-grams are the common choice for web
    text (Gopher, datatrove, the benchmark's ground truth) and far more selective than 3-grams on
    boilerplate. ``threshold`` is the Jaccard above which two documents are near duplicates; the
    band layout is chosen for it (``steps.near.minhash.choose_bands``) unless ``bands`` and
    ``rows`` are given, and with ``verify`` the candidates LSH finds are confirmed by their
    estimated Jaccard, which removes most of the false positives banding lets through at a small
    cost.

    Since issue 17 the defaults are the best measured setting (docs/near-dedup.md, *Measured*):
    ``unit = "script"``, ``link = "kept"`` and ``verify_on = "shingles"`` (a candidate is dropped
    only when the exact Jaccard of the two shingle sets reaches the threshold, and only as a
    duplicate of a kept document it is itself near). Lakes made before keep their rule
    (:data:`NEAR_LEGACY`, ``rules_of``).
    """

    enabled: bool = False
    threshold: float = 0.8
    num_perm: int = 128
    ngram: int = 5
    unit: NearUnit = "script"
    seed: int = 1
    bands: int | None = None
    rows: int | None = None
    verify: bool = True
    # The clustering rule (``store.band_index.LINKS``, docs/near-dedup.md): "any" joins the
    # smallest cluster among a document's earlier neighbours (chains through dropped documents
    # merge); "kept" joins only a cluster whose kept document the document is itself near (needs
    # verify). Lakes made before the key existed have "any" (NEAR_LEGACY, rules_of).
    link: NearLink = "kept"
    # What verification compares: "shingles", the exact Jaccard of the shingle sets (stored in
    # the lake's index/signatures files instead of the signatures), or "signature", the MinHash
    # estimate (the rule of lakes made before the key existed).
    verify_on: NearVerifyOn = "shingles"

    def __post_init__(self) -> None:
        for key, types in _NEAR_TYPES.items():
            value = getattr(self, key)
            if value is None and key in ("bands", "rows"):
                continue
            if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
                allowed = " or ".join(t.__name__ for t in types)
                raise ConfigError(f"[near_dedup].{key} = {value!r}: must be {allowed}")
        if self.verify_on not in NEAR_VERIFY_ON:
            allowed = " or ".join(f'"{v}"' for v in NEAR_VERIFY_ON)
            raise ConfigError(f"[near_dedup].verify_on = {self.verify_on!r}: must be {allowed}")
        if self.link not in NEAR_LINKS:
            allowed = " or ".join(f'"{v}"' for v in NEAR_LINKS)
            raise ConfigError(f"[near_dedup].link = {self.link!r}: must be {allowed}")
        if self.link == "kept" and not self.verify:
            raise ConfigError(
                '[near_dedup].link = "kept" (the default) compares each document with its '
                "cluster's kept document, as verification does: it needs verify = true; "
                'with verify = false set link = "any"'
            )
        self._check_ranges()

    def _check_ranges(self) -> None:
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"[near_dedup].{key} = {getattr(self, key)!r}: {why}")

        if not 16 <= self.num_perm <= 1024:
            raise bad("num_perm", "must be between 16 and 1024")
        if not 1 <= self.ngram <= 32:
            raise bad("ngram", "must be between 1 and 32")
        if self.unit not in NEAR_UNITS:
            raise bad("unit", 'must be "word", "char", "script" or "auto"')
        if not 0.0 < self.threshold < 1.0:
            raise bad("threshold", "must be between 0 and 1 (both excluded)")
        if not 0 <= self.seed < 2**63:
            raise bad("seed", "must be between 0 and 2**63 - 1")
        if (self.bands is None) != (self.rows is None):
            raise ConfigError(
                f"[near_dedup].bands = {self.bands!r}, rows = {self.rows!r}: give both bands "
                "and rows, or neither (then the threshold picks them)"
            )
        if self.bands is not None and self.rows is not None:
            if self.bands < 1 or self.rows < 1 or self.bands * self.rows > self.num_perm:
                raise ConfigError(
                    f"[near_dedup].bands x rows = {self.bands} x {self.rows} must be at least "
                    f"1 x 1 and fit in num_perm = {self.num_perm}"
                )
            if self.bands > 255:
                raise bad("bands", "at most 255 (stored as UTINYINT)")

    def decision_params(self) -> dict[str, Any]:
        """What enters the config hash: the MinHash settings, plus ``link`` and ``verify_on``
        when they are not the rule before they existed (so the hash of a lake made before does
        not change)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("enabled", "link", "verify_on")}
        if self.link != "any":
            out["link"] = self.link
        if self.verify_on != "signature":
            out["verify_on"] = self.verify_on
        return out


def _near_from_dict(sec: object) -> NearDedupConfig:
    """The ``[near_dedup]`` section: unknown keys here, types and ranges by the class."""
    sec = _section("near_dedup", sec, set(_NEAR_TYPES))
    threshold = sec.get("threshold")
    if isinstance(threshold, int) and not isinstance(threshold, bool):
        sec = {**sec, "threshold": float(threshold)}
    return NearDedupConfig(**sec)


@dataclass(frozen=True)
class Config:
    """The whole pipeline configuration."""

    ingest: IngestConfig = field(default_factory=IngestConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    near_dedup: NearDedupConfig = field(default_factory=NearDedupConfig)
    # Lambdas: both classes are defined further down, with the filter sections.
    filters: FiltersConfig = field(default_factory=lambda: FiltersConfig())  # noqa: PLW0108
    gates: GatesConfig = field(default_factory=lambda: GatesConfig())  # noqa: PLW0108
    input: InputConfig = field(default_factory=InputConfig)  # last: positional use predates it
    output: OutputConfig = field(default_factory=OutputConfig)
    # The preset this config was resolved from ("" for a config file that names none). Not part
    # of the hash or of equality: a preset is a shorthand for the settings it resolves to.
    preset: str = field(default="", compare=False)

    def decision_dict(self) -> dict[str, Any]:
        """The parts that change which documents are kept, canonically ordered.

        Filters, strict gates and input fields appear only when configured, so lakes made
        before they existed keep their hash.
        """
        out: dict[str, Any] = {
            "normalisation": self.filters.normalisation,
            "dedup": asdict(self.dedup),
        }
        if self.input != InputConfig():
            out["input"] = asdict(self.input)
        if self.filters.steps:
            out["filters"] = self.filters.decision_list()
        if self.gates.strict and self.gates.bounds:
            out["gates"] = [list(b) for b in self.gates.bounds]
        if self.near_dedup.enabled:
            out["near_dedup"] = self.near_dedup.decision_params()
        return out

    @property
    def hash(self) -> str:
        """A short, stable hash recorded with every commit."""
        canon = json.dumps(self.decision_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    def step_names(self) -> list[str]:
        """Every step a document goes through, in order (what `status` shows)."""
        steps = [s.name for s in self.filters.steps]
        if self.dedup.exact:
            steps.append("exact_dup")
        if self.near_dedup.enabled:
            steps.append("near_dup")
        return steps


def _section(section: str, sec: object, allowed: set[str]) -> dict[str, Any]:
    """A config section: a TOML table with only ``allowed`` keys."""
    if not isinstance(sec, dict):
        raise ConfigError(f"[{section}] must be a table, got {type(sec).__name__}")
    _check_keys(section, sec, allowed)
    return sec


def _check_keys(section: str, given: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown key [{section}].{unknown[0]}; allowed keys: " + ", ".join(sorted(allowed))
        )


def _int(section: str, key: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"[{section}].{key} = {value!r}: must be an integer >= {minimum}")
    return value


def _seconds(key: str, value: object) -> float:
    # TOML allows nan and inf: nan passes `< 0` and would crash time.sleep, inf waits forever.
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or value < 0
        or not math.isfinite(value)
    ):
        raise ConfigError(f"[ingest].{key} = {value!r}: must be seconds >= 0")
    return float(value)


def from_dict(data: dict[str, Any]) -> Config:
    """Build a validated ``Config`` from parsed TOML (a top-level ``preset`` resolved first)."""
    data, preset = _resolve_preset(data)
    sections = {"ingest", "input", "output", "dedup", "near_dedup", "normalisation"}
    unknown = sorted(set(data) - sections - set(_FILTER_SECTIONS))
    if unknown:
        raise ConfigError(
            f"unknown key [top level].{unknown[0]}; allowed keys: dedup, ingest, input, "
            "near_dedup, normalisation, output, preset, " + ", ".join(_FILTER_SECTIONS)
        )
    ing = _section(
        "ingest",
        data.get("ingest", {}),
        {
            "chunk_size",
            "max_attempts",
            "retry_backoff",
            "workers",
            "executor",
            "address",
            "heartbeat_timeout",
            "chunk_timeout",
            "max_compressed_chunk_bytes",
            "commit_chunks",
            "commit_bytes",
            "commit_seconds",
            "bundle_bytes",
            "deciders",
        },
    )
    ded = _section("dedup", data.get("dedup", {}), {"exact"})
    defaults = IngestConfig()
    backoff = _seconds("retry_backoff", ing.get("retry_backoff", defaults.retry_backoff))
    heartbeat = _seconds(
        "heartbeat_timeout", ing.get("heartbeat_timeout", defaults.heartbeat_timeout)
    )
    if heartbeat < 2:  # workers beat every second: less would kill healthy ones
        raise ConfigError(f"[ingest].heartbeat_timeout = {heartbeat!r}: must be seconds >= 2")
    chunk_timeout = _seconds("chunk_timeout", ing.get("chunk_timeout", defaults.chunk_timeout))
    executor = ing.get("executor", defaults.executor)
    if executor not in EXECUTORS:
        raise ConfigError(
            f"[ingest].executor = {executor!r}: must be one of " + ", ".join(EXECUTORS)
        )
    address = ing.get("address", defaults.address)
    if not isinstance(address, str):
        raise ConfigError(f"[ingest].address = {address!r}: must be a string (host:port)")
    exact = ded.get("exact", True)
    if not isinstance(exact, bool):
        raise ConfigError(f"[dedup].exact = {exact!r}: must be true or false")
    return Config(
        preset=preset,
        ingest=IngestConfig(
            chunk_size=parse_size(
                ing.get("chunk_size", defaults.chunk_size), "[ingest].chunk_size"
            ),
            max_attempts=_int(
                "ingest", "max_attempts", ing.get("max_attempts", defaults.max_attempts), 1
            ),
            retry_backoff=backoff,
            workers=_int("ingest", "workers", ing.get("workers", defaults.workers), 0),
            executor=executor,
            address=address,
            heartbeat_timeout=heartbeat,
            chunk_timeout=chunk_timeout,
            max_compressed_chunk_bytes=parse_size(
                ing.get("max_compressed_chunk_bytes", defaults.max_compressed_chunk_bytes),
                "[ingest].max_compressed_chunk_bytes",
            ),
            commit_chunks=_int(
                "ingest", "commit_chunks", ing.get("commit_chunks", defaults.commit_chunks), 1
            ),
            commit_bytes=parse_size(
                ing.get("commit_bytes", defaults.commit_bytes), "[ingest].commit_bytes"
            ),
            commit_seconds=_seconds(
                "commit_seconds", ing.get("commit_seconds", defaults.commit_seconds)
            ),
            bundle_bytes=parse_size(
                ing.get("bundle_bytes", defaults.bundle_bytes), "[ingest].bundle_bytes", zero=True
            ),
            deciders=_int("ingest", "deciders", ing.get("deciders", defaults.deciders), 0),
        ),
        input=_input_from_dict(data.get("input", {})),
        output=_output_from_dict(data.get("output", {})),
        dedup=DedupConfig(exact=exact),
        near_dedup=_near_from_dict(data.get("near_dedup", {})),
        filters=(filters := _filters_from_dict(data)),
        gates=_gates_from_dict(data.get("gates", {}), filters),
    )


def load(path: Path, preset: str | None = None) -> Config:
    """Read and validate a ``lakecurate.toml``; with ``preset`` (``--preset``), the file
    extends that preset unless it names its own."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}): save it as UTF-8") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    data = _given_preset(data, preset, path)  # its errors name the file already
    try:
        return _noted_preset(from_dict(data), text)
    except ConfigError as exc:  # name the file: it is not always the lake's lakecurate.toml
        raise ConfigError(f"{path}: {exc}") from exc


def with_rules(cfg: Config, version: int) -> Config:
    """``cfg`` under rule version ``version`` (:data:`NORMALISATION_VERSION`)."""
    return replace(cfg, filters=replace(cfg.filters, normalisation=version))


def rules_of(cfg: Config, digest: str) -> Config:
    """``cfg`` under the rules that give it the config hash ``digest`` (that of a lake's
    commits), or ``cfg`` as it is when none do: the rule version, and near-dedup keys at today's
    default taken back to the default they had before (:data:`NEAR_LEGACY`)."""
    for near in _near_variants(cfg.near_dedup):
        for version in NORMALISATION_VERSIONS:
            candidate = with_rules(replace(cfg, near_dedup=near), version)
            if candidate.hash == digest:
                return candidate
    return cfg


def _near_variants(near: NearDedupConfig) -> list[NearDedupConfig]:
    """``near`` itself first, then with every subset of its keys that are at today's default
    set to the old default (a lake made before those defaults changed)."""
    keys = [k for k, (now, _) in NEAR_LEGACY.items() if getattr(near, k) == now]
    subsets = (s for size in range(1, len(keys) + 1) for s in itertools.combinations(keys, size))
    return [near, *(replace(near, **{k: NEAR_LEGACY[k][1] for k in s}) for s in subsets)]


def states_its_rules(data: dict[str, Any]) -> bool:
    """Whether a lake's lakecurate.toml (parsed) names every rule that changed since lakes were
    first made: the rule version, and the near-dedup keys of :data:`NEAR_LEGACY` when near dedup
    is on. One that does not was written before: ``rules_of`` finds its rules from the hash."""
    near = data.get("near_dedup", {})
    if isinstance(near, dict) and near.get("enabled", False) and not set(NEAR_LEGACY) <= set(near):
        return False
    return "normalisation" in data


def to_toml(cfg: Config) -> str:
    """Serialise a config so that ``load`` gives it back (written into new lakes)."""
    i, d = cfg.ingest, cfg.dedup
    return (
        _preset_note(cfg.preset)
        + f"normalisation = {cfg.filters.normalisation}\n\n"
        + (
            "[ingest]\n"
            f"chunk_size = {i.chunk_size}\n"
            f"max_attempts = {i.max_attempts}\n"
            f"retry_backoff = {i.retry_backoff}\n"
            f"workers = {i.workers}\n"
            f"executor = {json.dumps(i.executor)}\n"
            f"address = {json.dumps(i.address)}\n"
            f"heartbeat_timeout = {i.heartbeat_timeout}\n"
            f"chunk_timeout = {i.chunk_timeout}\n"
            f"max_compressed_chunk_bytes = {i.max_compressed_chunk_bytes}\n"
            f"commit_chunks = {i.commit_chunks}\n"
            f"commit_bytes = {i.commit_bytes}\n"
            f"commit_seconds = {i.commit_seconds}\n"
            f"bundle_bytes = {i.bundle_bytes}\n"
            f"deciders = {i.deciders}\n\n"
            "[dedup]\n"
            f"exact = {'true' if d.exact else 'false'}\n"
        )
        + _input_to_toml(cfg.input)
        + _output_to_toml(cfg.output)
        + _near_to_toml(cfg.near_dedup)
        + _filters_to_toml(cfg.filters, cfg.gates)
    )


def _input_to_toml(i: InputConfig) -> str:
    # Only when set: the TOML of a default config (and of every lake made before) is unchanged.
    if i == InputConfig():
        return ""
    lines = [f"{k} = {_toml_value(v)}" for k, v in asdict(i).items()]
    return "\n[input]\n" + "\n".join(lines) + "\n"


def _output_to_toml(o: OutputConfig) -> str:
    if o == OutputConfig():  # only when set, as [input]
        return ""
    return f"\n[output]\nkeep_rejected_text = {_toml_value(o.keep_rejected_text)}\n"


def _near_to_toml(n: NearDedupConfig) -> str:
    if n == NearDedupConfig():
        return ""
    lines = [f"{k} = {_toml_value(v)}" for k, v in asdict(n).items() if v is not None]
    return "\n[near_dedup]\n" + "\n".join(lines) + "\n"


# -- filters, language id, PII redaction, quality gates ------------------------------------------
# The SQL macros in sql/filters/ are the source of truth for parameter names and defaults: they
# are read from the macro signatures, so a parameter added in SQL is configurable at once.

STEPS: dict[str, str] = {
    "utf8": "utf8_filter",
    "length": "length_filter",
    "url_blocklist": "url_blocklist_filter",
    "gopher_quality": "gopher_quality_filter",
    "gopher_repetition": "gopher_repetition_filter",
    "c4": "c4_filter",
    "fineweb": "fineweb_filter",
    "langid": "langid_filter",
    "pii": "",
}
# Steps whose parameters live in a top-level section of their own rather than [filters.<step>].
_OWN_SECTION = {"langid": "langid", "pii": "pii"}
# Parameters handled in Python, besides the macro's: name -> default.
_EXTRA_PARAMS: dict[str, dict[str, Any]] = {
    "langid": {"max_chars": 2000},
    "url_blocklist": {"file": ""},
    # Language scopes (pipeline.py): `languages`, the languages a quality step applies to (empty:
    # every document); `stop_words_languages`, those Gopher's stop-word rule applies to (its
    # list is English). Both need language id earlier in the steps to mean anything.
    "gopher_quality": {"languages": (), "stop_words_languages": ("en",)},
    "gopher_repetition": {"languages": ()},
    "c4": {"languages": ()},
    "fineweb": {"languages": ()},
}
LANGUAGE_PARAMS = ("languages", "stop_words_languages")
"""Step parameters handled by the pipeline around the macro call, never passed to it."""
PII_TYPES = ("email", "ipv4", "ipv6", "phone")
_FILTER_SECTIONS = ("filters", "gates", "langid", "pii")
PII_STRATEGIES = ("tag", "hash", "drop", "off")
LANGID_LIBRARY = "pycld2"
_MACRO = re.compile(r"CREATE OR REPLACE MACRO (\w+)\((.*?)\)\s+AS\b", re.DOTALL)


def _sql_filters_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "sql" / "filters", here.parent / "sql" / "filters"):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"lakecurate's sql/filters folder is missing next to {here}: reinstall")


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets and quotes."""
    out, depth, quote, cur = [], 0, False, ""
    for ch in text:
        if ch == "'":
            quote = not quote
        elif not quote and ch in "([":
            depth += 1
        elif not quote and ch in ")]":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _sql_literal(text: str) -> Any:
    text = text.strip()
    if text.endswith("::VARCHAR[]"):
        text = text[: -len("::VARCHAR[]")]
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    if text.startswith("["):
        return tuple(_sql_literal(x) for x in _split_top(text[1:-1]))
    return float(text) if "." in text else int(text)


@cache
def macro_signatures() -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
    """Every filter macro: (data arguments, {parameter: default}), read from sql/filters/."""
    found: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {}
    for path in sorted(_sql_filters_dir().glob("*.sql")):
        for m in _MACRO.finditer(path.read_text(encoding="utf-8")):
            args, params = [], {}
            for part in _split_top(m.group(2)):
                if ":=" in part:
                    key, default = part.split(":=", 1)
                    params[key.strip()] = _sql_literal(default)
                else:
                    args.append(part)
            found[m.group(1)] = (tuple(args), params)
    return found


def step_defaults(step: str) -> dict[str, Any]:
    """Every parameter of a step with its default (the published values, see docs/filters.md)."""
    if step == "pii":
        return dict.fromkeys(PII_TYPES, "tag")
    params = dict(macro_signatures()[STEPS[step]][1])
    params.update(_EXTRA_PARAMS.get(step, {}))
    return params


@dataclass(frozen=True)
class StepConfig:
    """One filter step with every parameter resolved (defaults filled in)."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, key: str) -> Any:
        return dict(self.params)[key]


@dataclass(frozen=True)
class FiltersConfig:
    """Which filter steps run, in which order; empty (the default) runs none.

    ``normalisation`` is the lake's rule version (:data:`NORMALISATION_VERSION`, top-level key in
    the TOML). It lives here because the worker's normalise query takes its parameters from the
    filter pipeline (``steps.filters.pipeline.build``).
    """

    steps: tuple[StepConfig, ...] = ()
    normalisation: int = NORMALISATION_VERSION

    def decision_list(self) -> list[Any]:
        out: list[Any] = []
        for i, s in enumerate(self.steps):
            inert = {"file", *_inert_language_params(self.steps, i)}
            params = {
                k: list(v) if isinstance(v, tuple) else v for k, v in s.params if k not in inert
            }
            if s.name == "langid":
                params["library"] = LANGID_LIBRARY
            out.append([s.name, params])
        return out


@dataclass(frozen=True)
class GatesConfig:
    """Bounds on a chunk's drop rate per step: outside, a chunk is flagged (or fails, if strict)."""

    strict: bool = False
    bounds: tuple[tuple[str, float, float], ...] = ()  # (step, min_drop, max_drop)


def _check_value(where: str, value: Any, default: Any) -> Any:
    """``value`` converted to the type of ``default``, or a ConfigError naming the key."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} = {value!r}: must be true or false")
        return value
    if isinstance(default, int):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{where} = {value!r}: must be an integer (default {default})")
        return value
    if isinstance(default, float):
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            raise ConfigError(f"{where} = {value!r}: must be a number (default {default})")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where} = {value!r}: must be a string")
        return value
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ConfigError(f"{where} = {value!r}: must be a list of strings")
    return tuple(value)


def _read_blocklist(path_text: str) -> tuple[str, ...]:
    path = Path(path_text).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(
            f"[filters.url_blocklist].file = {path_text!r}: cannot read it ({exc.strerror})"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"[filters.url_blocklist].file = {path_text!r} is not UTF-8 text ({exc}): save it "
            "as UTF-8"
        ) from exc
    domains = (ln.split("#", 1)[0].strip().lower() for ln in lines)
    return tuple(d.removeprefix("www.") for d in domains if d)


def _filters_from_dict(data: dict[str, Any]) -> FiltersConfig:
    sec = data.get("filters", {})
    if not isinstance(sec, dict):
        raise ConfigError(f"[filters] must be a table, got {type(sec).__name__}")
    steps = sec.get("steps", [])
    _check_keys("filters", sec, {"steps", *(s for s in STEPS if s not in _OWN_SECTION)})
    allowed = ", ".join(STEPS)
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise ConfigError(
            f"[filters].steps = {steps!r}: must be a list of step names from: " + allowed
        )
    for s in steps:
        if s not in STEPS:
            raise ConfigError(f"[filters].steps: unknown step {s!r}; allowed steps: {allowed}")
    if len(set(steps)) != len(steps):
        raise ConfigError(f"[filters].steps = {steps!r}: a step may appear only once")
    for name, section in [
        *((k, f"filters.{k}") for k in sec if k != "steps"),
        *((k, _OWN_SECTION[k]) for k in _OWN_SECTION if k in data),
    ]:
        if name not in steps:
            raise ConfigError(f"[{section}] is set but {name!r} is not in [filters].steps")
    out = []
    for s in steps:
        section = _OWN_SECTION.get(s, f"filters.{s}")
        defaults = step_defaults(s)
        given = _section(
            section, data.get(s, {}) if s in _OWN_SECTION else sec.get(s, {}), set(defaults)
        )
        params = dict(defaults)
        for key, value in given.items():
            params[key] = _check_value(f"[{section}].{key}", value, defaults[key])
        if s == "pii":
            for key, value in params.items():
                if value not in PII_STRATEGIES:
                    raise ConfigError(
                        f"[pii].{key} = {value!r}: allowed values: " + ", ".join(PII_STRATEGIES)
                    )
        if s == "langid" and params["max_chars"] < 1:
            raise ConfigError(f"[langid].max_chars = {params['max_chars']}: must be >= 1")
        if s == "url_blocklist":
            listed = _read_blocklist(params["file"]) if params["file"] else ()
            params["domains"] = tuple(
                sorted(
                    {d.strip().lower().removeprefix("www.") for d in (*params["domains"], *listed)}
                )
            )
            params["file"] = ""
        out.append(StepConfig(s, tuple(params.items())))
    version = data.get("normalisation", NORMALISATION_VERSION)
    if version not in NORMALISATION_VERSIONS or isinstance(version, bool):
        raise ConfigError(
            f"[top level].normalisation = {version!r}: must be one of "
            + ", ".join(map(str, NORMALISATION_VERSIONS))
            + f" (the rule version a lake was made with; new lakes: {NORMALISATION_VERSION})"
        )
    return _check_language_scopes(FiltersConfig(tuple(out), version))


def _langid_before(steps: tuple[StepConfig, ...], i: int) -> StepConfig | None:
    """The language-id step when it runs before ``steps[i]`` (so that step sees a language)."""
    return next((s for s in steps[:i] if s.name == "langid"), None)


def _inert_language_params(steps: tuple[StepConfig, ...], i: int) -> set[str]:
    """The language scopes of ``steps[i]`` that cannot change a decision, left out of the hash
    (so lakes made before they existed keep theirs): an empty ``languages``, and a
    ``stop_words_languages`` under which the rule applies to every document reaching the step
    (it is empty; no language id before it; or language id keeps only languages in it)."""
    params = dict(steps[i].params)
    out = set()
    if params.get("languages") == ():
        out.add("languages")
    if "stop_words_languages" in params:
        scope = set(params["stop_words_languages"])
        langid = _langid_before(steps, i)
        keep = set(langid.param("keep")) if langid else set()
        if not scope or langid is None or (keep and keep <= scope):
            out.add("stop_words_languages")
    return out


def _check_language_scopes(filters: FiltersConfig) -> FiltersConfig:
    """A step limited to some languages needs language id to run before it."""
    for i, s in enumerate(filters.steps):
        if dict(s.params).get("languages") and _langid_before(filters.steps, i) is None:
            raise ConfigError(
                f"[filters.{s.name}].languages is set but no language is known when {s.name} "
                f'runs: put "langid" before "{s.name}" in [filters].steps'
            )
    return filters


def _gates_from_dict(sec: Any, filters: FiltersConfig) -> GatesConfig:
    names = [s.name for s in filters.steps if s.name != "pii"]
    sec = _section("gates", sec, {"strict", *names})
    strict = sec.get("strict", False)
    if not isinstance(strict, bool):
        raise ConfigError(f"[gates].strict = {strict!r}: must be true or false")
    bounds = []
    for name in names:
        if name not in sec:
            continue
        b = sec[name]
        if not isinstance(b, dict):
            raise ConfigError(f"[gates.{name}] must be a table with min_drop and/or max_drop")
        _check_keys(f"gates.{name}", b, {"min_drop", "max_drop"})
        lo = _check_value(f"[gates.{name}].min_drop", b.get("min_drop", 0.0), 0.0)
        hi = _check_value(f"[gates.{name}].max_drop", b.get("max_drop", 1.0), 0.0)
        if not 0.0 <= lo <= hi <= 1.0:
            raise ConfigError(
                f"[gates.{name}]: need 0 <= min_drop <= max_drop <= 1, got {lo}..{hi}"
            )
        bounds.append((name, lo, hi))
    return GatesConfig(strict=strict, bounds=tuple(bounds))


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        # Not ASCII-escaped: JSON writes 😀 as a surrogate pair, which TOML rejects; TOML also
        # forbids a raw DEL, which JSON leaves as is.
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007F")
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"


def _filters_to_toml(f: FiltersConfig, g: GatesConfig) -> str:
    if not f.steps:
        return ""
    out = ["", "[filters]", "steps = " + _toml_value([s.name for s in f.steps])]
    for s in f.steps:
        out += ["", f"[{_OWN_SECTION.get(s.name, 'filters.' + s.name)}]"]
        out += [f"{k} = {_toml_value(v)}" for k, v in s.params if k != "file"]
    if g.strict or g.bounds:
        out += ["", "[gates]", f"strict = {_toml_value(g.strict)}"]
        for name, lo, hi in g.bounds:
            out += ["", f"[gates.{name}]", f"min_drop = {lo!r}", f"max_drop = {hi!r}"]
    return "\n".join(out) + "\n"


# -- presets -------------------------------------------------------------------------------------
# A preset is a config file shipped in lakecurate/presets/; a config names one with a top-level
# `preset = "..."` and overrides its keys. Once resolved, only the settings count: the hash is
# that of the resolved config, and a lake stores every resolved setting (with the preset's name
# in a comment), so editing a preset in a later release never changes an existing lake.

PRESETS = ("minimal", "fineweb", "multilingual")
DEFAULT_PRESET = "multilingual"
"""The preset used when a new lake gets neither a config nor a preset (README, "Presets")."""
PRESET_ENV = "LAKECURATE_PRESET"
"""Names another default preset (the test suite sets "minimal", what its counts assume)."""
_NOTE = re.compile(r'^# resolved from preset "(\w+)"')


def _presets_dir() -> Path:
    return Path(__file__).resolve().parent / "presets"


def _check_preset(name: object, where: str) -> str:
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(f"{where} = {name!r} is not a preset: use one of " + ", ".join(PRESETS))
    return name


@cache
def preset_data(name: str) -> dict[str, Any]:
    """The settings of a shipped preset, as parsed TOML."""
    path = _presets_dir() / f"{_check_preset(name, 'preset')}.toml"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"preset file {path} cannot be read ({exc}): reinstall lakecurate"
        ) from exc


def default_preset() -> str:
    """The preset of a new lake given no config: ``$LAKECURATE_PRESET``, else ``DEFAULT_PRESET``."""
    return _check_preset(os.environ.get(PRESET_ENV) or DEFAULT_PRESET, PRESET_ENV)


def default_config() -> Config:
    """The config of a new lake given neither a config nor a preset."""
    return from_dict({"preset": default_preset()})


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: tables merged key by key, any other value replaced."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        out[key] = (
            _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out


def _resolve_preset(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The config a top-level ``preset`` key stands for, and the preset's name ("" if none).

    A step the preset configures but the config's own ``[filters].steps`` leaves out loses the
    preset's settings and gate for it (they would otherwise be "set but not in steps" errors).
    """
    if "preset" not in data:
        return data, ""
    own = {k: v for k, v in data.items() if k != "preset"}
    name = _check_preset(data["preset"], "preset")
    merged = _merge(preset_data(name), own)
    steps = _table(merged, "filters").get("steps", [])
    for step in STEPS:
        if isinstance(steps, list) and step in steps:
            continue
        if step in _OWN_SECTION:
            if step not in own:
                merged.pop(step, None)
        elif step not in _table(own, "filters"):
            _table(merged, "filters").pop(step, None)
        if step not in _table(own, "gates"):
            _table(merged, "gates").pop(step, None)
    return merged, name


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is a table, else an empty one (a non-table is reported later)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _given_preset(data: dict[str, Any], preset: str | None, path: Path) -> dict[str, Any]:
    """A config file read with ``--preset``: it extends that preset, unless it names another."""
    if preset is None:
        return data
    if "preset" in data and data["preset"] != preset:
        raise ConfigError(
            f"{path} names preset = {data['preset']!r} but --preset {preset} was given: "
            "drop one of them"
        )
    return {"preset": preset, **data}


def _preset_note(name: str) -> str:
    """The first line of a resolved config written into a lake: the preset's name, as a note."""
    if not name:
        return ""
    return (
        f'# resolved from preset "{name}": every setting is written out below, so this lake '
        "does not change when the preset does\n"
    )


def _noted_preset(cfg: Config, text: str) -> Config:
    """A config read from a lake's resolved file keeps the name its note gives."""
    m = _NOTE.match(text)
    if cfg.preset or not m:
        return cfg
    return replace(cfg, preset=m.group(1))


def with_preset(given: Config | Path | None, preset: str | None) -> Config | Path | None:
    """What ``Lake.ingest(config=..., preset=...)`` means: a preset alone is its config, a file
    with a preset extends it; a ``Config`` object is already resolved (no preset with it)."""
    if preset is None:
        return given
    if given is None:
        return from_dict({"preset": preset})
    if isinstance(given, Path):
        return load(given, preset)
    raise ConfigError(
        "a Config object is already resolved: pass preset= only with a config file or alone"
    )
