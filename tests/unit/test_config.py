"""``lakecurate.toml`` parsing: strict keys and types, sizes, round-trips and the config hash."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import PINNED_NEAR_SETTINGS

from lakecurate import config
from lakecurate.config import Config, DedupConfig, IngestConfig
from lakecurate.errors import ConfigError


def test_empty_config_gives_the_defaults() -> None:
    cfg = config.from_dict({})
    assert cfg == Config()
    assert cfg.ingest.chunk_size == 256 * 1024**2
    assert cfg.ingest.max_attempts == 3
    assert cfg.ingest.retry_backoff == 1.0
    assert cfg.ingest.workers == 0
    assert cfg.dedup.exact is True


def test_empty_sections_give_the_defaults() -> None:
    assert config.from_dict({"ingest": {}, "dedup": {}}) == Config()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("256MiB", 256 * 1024**2),
        ("1GB", 1000**3),
        ("1gib", 1024**3),
        ("64KiB", 64 * 1024),
        ("10kb", 10_000),
        ("1.5KB", 1500),
        (" 2 MB ", 2_000_000),
        ("123", 123),
        ("7B", 7),
        (1000, 1000),
        (1, 1),
    ],
)
def test_parse_size_accepts(value: object, expected: int) -> None:
    assert config.parse_size(value, "[ingest].chunk_size") == expected


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        "0",
        "0MB",
        "0.4B",
        "-1MB",
        "",
        "MB",
        "12 parsecs",
        "1TB",
        "1e6",
        "1,000",
        1.5,
        True,
        None,
        [1],
    ],
)
def test_parse_size_rejects(value: object) -> None:
    with pytest.raises(ConfigError) as exc:
        config.parse_size(value, "[ingest].chunk_size")
    assert "[ingest].chunk_size" in str(exc.value)
    assert repr(value) in str(exc.value)


def test_chunk_size_from_dict() -> None:
    cfg = config.from_dict({"ingest": {"chunk_size": "64KiB"}})
    assert cfg.ingest.chunk_size == 65536
    with pytest.raises(ConfigError, match=r"\[ingest\]\.chunk_size"):
        config.from_dict({"ingest": {"chunk_size": "lots"}})
    with pytest.raises(ConfigError, match=r"\[ingest\]\.chunk_size = 0 is not a size:"):
        config.from_dict({"ingest": {"chunk_size": 0}})


def test_bundle_bytes_is_a_size_and_zero_turns_bundles_off() -> None:
    assert config.from_dict({}).ingest.bundle_bytes == 4 * 1024**2
    assert config.from_dict({"ingest": {"bundle_bytes": "1MiB"}}).ingest.bundle_bytes == 2**20
    assert config.from_dict({"ingest": {"bundle_bytes": 0}}).ingest.bundle_bytes == 0
    for bad in (-1, "-1MB", "lots", 1.5):
        with pytest.raises(ConfigError, match=r"bundle_bytes = .* is not a size \(0: off\)"):
            config.from_dict({"ingest": {"bundle_bytes": bad}})


@pytest.mark.parametrize(
    ("data", "key", "allowed"),
    [
        ({"ingets": {}}, "ingets", ["dedup", "ingest"]),
        (
            {"ingest": {"chunksize": 5}},
            "chunksize",
            [
                "address",
                "bundle_bytes",
                "chunk_size",
                "chunk_timeout",
                "commit_bytes",
                "commit_chunks",
                "commit_seconds",
                "deciders",
                "executor",
                "heartbeat_timeout",
                "max_attempts",
                "max_compressed_chunk_bytes",
                "retry_backoff",
                "workers",
            ],
        ),
        ({"dedup": {"fuzzy": True}}, "fuzzy", ["exact"]),
    ],
)
def test_unknown_keys_are_named_with_the_allowed_ones(
    data: dict[str, object], key: str, allowed: list[str]
) -> None:
    with pytest.raises(ConfigError) as exc:
        config.from_dict(data)
    msg = str(exc.value)
    assert key in msg
    assert "allowed keys: " + ", ".join(allowed) in msg


def test_section_must_be_a_table() -> None:
    with pytest.raises(ConfigError, match=r"\[ingest\] must be a table"):
        config.from_dict({"ingest": 5})
    with pytest.raises(ConfigError, match=r"\[dedup\] must be a table"):
        config.from_dict({"dedup": "exact"})


@pytest.mark.parametrize("value", [0, -3, "3", True, 2.0, None])
def test_bad_max_attempts(value: object) -> None:
    with pytest.raises(ConfigError) as exc:
        config.from_dict({"ingest": {"max_attempts": value}})
    assert "[ingest].max_attempts" in str(exc.value)
    assert ">= 1" in str(exc.value)


@pytest.mark.parametrize("value", [-1, "0", False, 1.5])
def test_bad_workers(value: object) -> None:
    with pytest.raises(ConfigError, match=r"\[ingest\]\.workers"):
        config.from_dict({"ingest": {"workers": value}})


@pytest.mark.parametrize("value", [-0.5, -1, "1", True, math.nan, math.inf])
def test_bad_retry_backoff(value: object) -> None:
    with pytest.raises(ConfigError, match=r"\[ingest\]\.retry_backoff"):
        config.from_dict({"ingest": {"retry_backoff": value}})


def test_retry_backoff_accepts_zero_and_int() -> None:
    assert config.from_dict({"ingest": {"retry_backoff": 0}}).ingest.retry_backoff == 0.0
    cfg = config.from_dict({"ingest": {"retry_backoff": 2}})
    assert cfg.ingest.retry_backoff == 2.0
    assert isinstance(cfg.ingest.retry_backoff, float)


@pytest.mark.parametrize("value", ["yes", 1, 0, None, "true"])
def test_bad_exact(value: object) -> None:
    with pytest.raises(ConfigError, match=r"\[dedup\]\.exact.*true or false"):
        config.from_dict({"dedup": {"exact": value}})


def test_load_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "lakecurate.toml"
    path.write_text(
        '[ingest]\nchunk_size = "1MiB"\nworkers = 4\n\n[dedup]\nexact = false\n', encoding="utf-8"
    )
    cfg = config.load(path)
    assert cfg.ingest.chunk_size == 1024**2
    assert cfg.ingest.workers == 4
    assert cfg.ingest.max_attempts == 3
    assert cfg.dedup.exact is False


def test_load_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[ingest\nchunk_size = 5\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        config.load(path)
    assert str(path) in str(exc.value)
    assert "not valid TOML" in str(exc.value)


def test_load_missing_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as exc:
        config.load(path)
    assert str(path) in str(exc.value)


def test_load_reports_unknown_key_from_file(tmp_path: Path) -> None:
    path = tmp_path / "lakecurate.toml"
    path.write_text("[ingest]\nmax_attempt = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="max_attempt"):
        config.load(path)


@pytest.mark.parametrize(
    "cfg",
    [
        Config(),
        Config(
            IngestConfig(chunk_size=65536, max_attempts=1, retry_backoff=0.05, workers=8),
            DedupConfig(exact=False),
        ),
        Config(IngestConfig(chunk_size=1, max_attempts=99, retry_backoff=0.0, workers=0)),
        Config(IngestConfig(chunk_size=5 * 1024**4, retry_backoff=1e-05)),
        Config(IngestConfig(retry_backoff=12345.678)),
        Config(IngestConfig(bundle_bytes=0)),
    ],
)
def test_to_toml_round_trips(tmp_path: Path, cfg: Config) -> None:
    path = tmp_path / "lakecurate.toml"
    path.write_text(config.to_toml(cfg), encoding="utf-8")
    loaded = config.load(path)
    assert loaded == cfg
    assert loaded.hash == cfg.hash


def test_hash_ignores_tuning_but_not_dedup() -> None:
    base = Config()
    tuned = Config(
        ingest=IngestConfig(
            chunk_size=1024, workers=7, max_attempts=9, retry_backoff=0.1, bundle_bytes=0
        )
    )
    assert tuned.hash == base.hash
    no_dedup = replace(base, dedup=DedupConfig(exact=False))
    assert no_dedup.hash != base.hash


def test_hash_is_stable_and_short() -> None:
    first = config.from_dict({"dedup": {"exact": True}}).hash
    second = Config().hash
    assert first == second == Config().hash
    # Canonical: sorted keys, no spaces, so the value cannot depend on dict order or process.
    canon = f'{{"dedup":{{"exact":true}},"normalisation":{config.NORMALISATION_VERSION}}}'
    assert first == hashlib.sha256(canon.encode()).hexdigest()[:16]
    assert (
        config.from_dict({"dedup": {"exact": False}}).hash
        == Config(dedup=DedupConfig(exact=False)).hash
    )


# Config hashes pinned from the code before MinHashConfig was folded into NearDedupConfig: every
# commit records its config's hash, so these must never change for the same settings.
PINNED_HASHES = [
    ({}, "96eba498810bd6ab"),
    ({"near_dedup": {"enabled": False, "num_perm": 256}}, "96eba498810bd6ab"),
    ({"near_dedup": {"enabled": True}}, "b7d01782bc20a8e0"),
    (
        {"near_dedup": {"enabled": True, **PINNED_NEAR_SETTINGS}},
        "e488799891f374e0",
    ),
    (
        {"near_dedup": {"enabled": True, "num_perm": 64, "bands": 8, "rows": 8, "unit": "char"}},
        "c3de91364dfba55e",
    ),
    ({"near_dedup": {"enabled": True, "link": "kept", "num_perm": 256}}, "dcf374077ad7ab96"),
]


def with_old_near_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the near-dedup defaults of before issue 17 written out (config.NEAR_LEGACY):
    what the pinned settings meant when their hashes were recorded."""
    near = data.get("near_dedup", {})
    old = {k: was for k, (_, was) in config.NEAR_LEGACY.items()}
    return {**data, "near_dedup": {**old, **near}}


@pytest.mark.parametrize(("data", "expected"), PINNED_HASHES)
def test_near_dedup_config_hash_is_pinned(data: dict[str, Any], expected: str) -> None:
    # Pinned under rule version 1 and the old near-dedup defaults: a lake made then keeps its
    # rules and so its hash, and today's defaults given to it resolve to those rules.
    assert config.from_dict({**with_old_near_defaults(data), "normalisation": 1}).hash == expected
    assert config.rules_of(config.from_dict(data), expected).hash == expected


def test_new_near_defaults_have_their_own_hash() -> None:
    """Today's defaults are another rule: another hash, and legacy keys that say so."""
    new = config.from_dict({"near_dedup": {"enabled": True}})
    params = new.decision_dict()["near_dedup"]
    assert params["link"] == "kept" and params["verify_on"] == "shingles"
    assert params["unit"] == "script"
    old = config.from_dict(with_old_near_defaults({"near_dedup": {"enabled": True}}))
    assert new.hash != old.hash
    assert config.rules_of(new, old.hash) == old


def test_rule_version_2_has_its_own_pinned_hash() -> None:
    assert config.NORMALISATION_VERSION == 3  # per-language filter rules (docs/filters.md)
    assert config.from_dict({"normalisation": 2}).hash == "99ce1db275c878a5"
    assert config.rules_of(config.from_dict({}), "99ce1db275c878a5").filters.normalisation == 2


def test_rule_version_3_has_its_own_pinned_hash() -> None:
    assert config.from_dict({}).hash == "88ab87249dc10112"
    assert config.from_dict({"normalisation": 3}).hash == "88ab87249dc10112"
    with pytest.raises(ConfigError, match="normalisation = 4: must be one of 1, 2, 3"):
        config.from_dict({"normalisation": 4})


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"num_perm": 8}, r"\[near_dedup\]\.num_perm = 8: must be between 16 and 1024"),
        ({"num_perm": 2048}, r"\[near_dedup\]\.num_perm = 2048: must be between 16 and 1024"),
        ({"ngram": 0}, r"\[near_dedup\]\.ngram = 0: must be between 1 and 32"),
        (
            {"unit": "token"},
            r"\[near_dedup\]\.unit = 'token': must be \"word\", \"char\", \"scr",
        ),
        ({"threshold": 1.0}, r"\[near_dedup\]\.threshold = 1\.0: must be between 0 and 1"),
        ({"threshold": 0}, r"\[near_dedup\]\.threshold = 0\.0: must be between 0 and 1"),
        ({"threshold": math.nan}, r"\[near_dedup\]\.threshold = nan: must be between 0 and 1"),
        ({"seed": -1}, r"\[near_dedup\]\.seed = -1: must be between 0 and 2\*\*63 - 1"),
        ({"bands": 4}, r"\[near_dedup\]\.bands = 4, rows = None: give both bands and rows"),
        ({"bands": 20, "rows": 10}, r"bands x rows = 20 x 10 .* fit in num_perm = 128"),
        ({"bands": 0, "rows": 4}, r"bands x rows = 0 x 4 must be at least 1 x 1"),
        ({"bands": 256, "rows": 1, "num_perm": 1024}, r"\.bands = 256: at most 255"),
        ({"num_perm": "128"}, r"\[near_dedup\]\.num_perm = '128': must be int"),
        ({"verify": 1}, r"\[near_dedup\]\.verify = 1: must be bool"),
    ],
)
@pytest.mark.parametrize("enabled", [True, False])
def test_near_dedup_ranges_fail_at_load(
    keys: dict[str, object], message: str, enabled: bool
) -> None:
    """A bad ``[near_dedup]`` value fails when the config is parsed, enabled or not, naming the
    key (not when an ingest starts)."""
    with pytest.raises(ConfigError, match=message):
        config.from_dict({"near_dedup": {"enabled": enabled, **keys}})


def test_near_dedup_config_is_frozen_hashable_and_checked_when_made() -> None:
    from lakecurate.config import NearDedupConfig

    cfg = NearDedupConfig(enabled=True, num_perm=256)
    assert hash(cfg) == hash(NearDedupConfig(enabled=True, num_perm=256))
    assert len({cfg, NearDedupConfig(enabled=True, num_perm=256), NearDedupConfig()}) == 2
    with pytest.raises(AttributeError):
        cfg.num_perm = 64  # type: ignore[misc]
    with pytest.raises(ConfigError, match=r"\[near_dedup\]\.num_perm = 8"):
        replace(cfg, num_perm=8)
    assert config.from_dict({"near_dedup": {"threshold": 0.5}}).near_dedup.threshold == 0.5
