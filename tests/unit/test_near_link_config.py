"""``[near_dedup].link``: allowed values, errors that name the key, and the config hash."""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from lakecurate import config
from lakecurate.config import Config, NearDedupConfig
from lakecurate.errors import ConfigError


def near(**keys: object) -> Config:
    return config.from_dict({"near_dedup": {"enabled": True, **keys}})


def test_link_defaults_to_kept() -> None:
    """Since issue 17 (the best measured setting); lakes made before keep "any" (rules_of)."""
    assert near().near_dedup.link == "kept"
    assert NearDedupConfig().link == "kept"


@pytest.mark.parametrize("value", ["any", "kept"])
def test_allowed_values(value: str) -> None:
    assert near(link=value).near_dedup.link == value


@pytest.mark.parametrize("value", ["all", "Kept", "", "components"])
def test_unknown_value_names_the_key_and_the_allowed_values(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        near(link=value)
    assert str(err.value) == f'[near_dedup].link = {value!r}: must be "any" or "kept"'


@pytest.mark.parametrize("value", [1, True, ["kept"]])
def test_wrong_type_names_the_key(value: object) -> None:
    with pytest.raises(ConfigError, match=r"\[near_dedup\]\.link = .*: must be str"):
        near(link=value)


def test_kept_needs_verify() -> None:
    with pytest.raises(ConfigError, match=r'\[near_dedup\]\.link = "kept" .* needs verify = true'):
        near(link="kept", verify=False)
    assert near(link="any", verify=False).near_dedup.verify is False


def test_link_is_not_a_minhash_setting() -> None:
    """The rule is the index's, not the signatures': it leaves the fingerprint alone."""
    from lakecurate.steps.near import minhash

    kept = near(link="kept", num_perm=256).near_dedup
    assert kept.num_perm == 256
    assert minhash.fingerprint(kept) == minhash.fingerprint(near(num_perm=256).near_dedup)


def test_link_any_keeps_the_hash_of_lakes_made_before_the_key() -> None:
    """A lake made before ``link`` existed has no such key in its lakecurate.toml: its hash,
    recorded with every commit, must not change (the hash canon written out by hand)."""
    old = NearDedupConfig(unit="auto", link="any", verify_on="signature")
    before = {
        "normalisation": config.NORMALISATION_VERSION,
        "dedup": {"exact": True},
        "near_dedup": {
            k: v for k, v in asdict(old).items() if k not in ("enabled", "link", "verify_on")
        },
    }
    canon = json.dumps(before, sort_keys=True, separators=(",", ":"))
    expected = hashlib.sha256(canon.encode()).hexdigest()[:16]
    assert near(link="any", unit="auto", verify_on="signature").hash == expected
    assert config.rules_of(near(), expected).near_dedup == replace(old, enabled=True)


def test_kept_changes_the_hash() -> None:
    assert near(link="kept").hash != near(link="any").hash
    assert near(link="kept").decision_dict()["near_dedup"]["link"] == "kept"


@pytest.mark.parametrize("link", ["any", "kept"])
def test_to_toml_round_trips_the_link(tmp_path: Path, link: str) -> None:
    cfg = near(link=link, num_perm=256)
    path = tmp_path / "lakecurate.toml"
    path.write_text(config.to_toml(cfg), encoding="utf-8")
    assert f'link = "{link}"' in path.read_text(encoding="utf-8")
    loaded = config.load(path)
    assert loaded == cfg and loaded.hash == cfg.hash


def test_a_lake_toml_without_link_keeps_any(tmp_path: Path) -> None:
    """Read alone, a file without ``link`` gets today's default; a lake's file says whether it
    states its rules (``states_its_rules``), and when not, its hash gives them back."""
    text = '[near_dedup]\nenabled = true\nthreshold = 0.8\nnum_perm = 128\nunit = "auto"\n'
    path = tmp_path / "lakecurate.toml"
    path.write_text(text, encoding="utf-8")
    loaded = config.load(path)
    assert loaded.near_dedup.link == "kept"
    assert not config.states_its_rules(tomllib.loads(text))
    old = near(threshold=0.8, num_perm=128, unit="auto", link="any", verify_on="signature")
    assert config.rules_of(loaded, old.hash).near_dedup.link == "any"
