"""Named presets: what each resolves to, a config extending one, the hash rule, the default.

A preset is a TOML file shipped in the package; once resolved only its settings count, so a
preset and an explicit config with the same content hash the same, and a lake stores every
resolved setting (the preset's name only as a note)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from helpers import PROSE, cli_env, run_lakecurate

from lakecurate import Lake, config
from lakecurate.config import PRESET_ENV, ConfigError

FINEWEB_STEPS = ["url_blocklist", "langid", "gopher_repetition", "gopher_quality", "c4", "fineweb"]


def test_each_preset_resolves_to_its_steps_in_order() -> None:
    fineweb = config.from_dict({"preset": "fineweb"})
    multi = config.from_dict({"preset": "multilingual"})
    minimal = config.from_dict({"preset": "minimal"})
    for cfg in (fineweb, multi):
        assert cfg.step_names() == [*FINEWEB_STEPS, "exact_dup", "near_dup"]
    assert minimal.step_names() == ["exact_dup"]
    assert minimal.hash == config.Config().hash  # today's default, hash unchanged
    langid = {c.preset: dict(c.filters.steps[1].params) for c in (fineweb, multi)}
    assert langid["fineweb"]["keep"] == ("en",) and langid["fineweb"]["min_score"] == 0.65
    assert langid["multilingual"]["keep"] == ()  # every language it is confident about
    # English-only settings apply to English only: C4 (multilingual) and Gopher's stop words.
    c4 = {c.preset: dict(c.filters.steps[4].params) for c in (fineweb, multi)}
    assert c4["multilingual"]["languages"] == ("en",) and c4["fineweb"]["languages"] == ()
    assert not c4["fineweb"]["filter_no_terminal_punct"]  # as FineWeb runs C4
    assert dict(multi.filters.steps[3].params)["stop_words_languages"] == ("en",)
    assert len({fineweb.hash, multi.hash, minimal.hash}) == 3


def test_presets_are_data_files_in_the_package() -> None:
    folder = Path(config.__file__).parent / "presets"
    assert sorted(p.stem for p in folder.glob("*.toml")) == sorted(config.PRESETS)
    for name in config.PRESETS:
        data = tomllib.loads((folder / f"{name}.toml").read_text(encoding="utf-8"))
        assert config.from_dict(data).hash == config.from_dict({"preset": name}).hash


def test_a_config_extends_a_preset_and_overrides_its_keys() -> None:
    cfg = config.from_dict(
        {
            "preset": "fineweb",
            "ingest": {"chunk_size": "1MiB"},
            "langid": {"keep": ["en", "de"]},
            "filters": {"gopher_quality": {"min_doc_words": 80}},
            "near_dedup": {"threshold": 0.7},
        }
    )
    assert cfg.preset == "fineweb" and cfg.ingest.chunk_size == 1024**2
    assert [s.name for s in cfg.filters.steps] == FINEWEB_STEPS  # steps from the preset
    assert cfg.filters.steps[1].param("keep") == ("en", "de")
    assert cfg.filters.steps[1].param("min_score") == 0.65  # the preset's, not overridden
    assert cfg.filters.steps[3].param("min_doc_words") == 80
    assert not cfg.filters.steps[4].param("filter_no_terminal_punct")  # the preset's c4
    assert cfg.near_dedup.enabled and cfg.near_dedup.threshold == 0.7


def test_a_config_may_drop_steps_the_preset_configures() -> None:
    # multilingual configures [filters.c4]; leaving c4 out must not be "set but not in steps".
    cfg = config.from_dict({"preset": "multilingual", "filters": {"steps": ["langid"]}})
    assert cfg.step_names() == ["langid", "exact_dup", "near_dup"]
    # ... but the config's own section for a step it leaves out still is an error.
    with pytest.raises(ConfigError, match=r"\[filters.c4\] is set but 'c4' is not in"):
        config.from_dict(
            {"preset": "fineweb", "filters": {"steps": ["langid"], "c4": {"min_num_sentences": 2}}}
        )


def test_the_hash_is_that_of_the_resolved_settings(tmp_path: Path) -> None:
    preset = config.from_dict({"preset": "fineweb"})
    explicit = tmp_path / "explicit.toml"  # the same settings, written out, no preset named
    explicit.write_text(
        """
[near_dedup]
enabled = true
[filters]
steps = ["url_blocklist", "langid", "gopher_repetition", "gopher_quality", "c4", "fineweb"]
[langid]
keep = ["en"]
[filters.c4]
filter_no_terminal_punct = false
""",
        encoding="utf-8",
    )
    assert config.load(explicit).hash == preset.hash
    assert config.load(explicit).preset == ""
    # Changing any resolved setting changes the hash.
    other = config.from_dict({"preset": "fineweb", "langid": {"min_score": 0.5}})
    assert other.hash != preset.hash
    # What a lake stores loads back to the same hash and names its preset, without the
    # preset's file: editing a preset later never changes an existing lake.
    stored = tmp_path / "stored.toml"
    stored.write_text(config.to_toml(preset), encoding="utf-8")
    assert "preset =" not in stored.read_text(encoding="utf-8")
    back = config.load(stored)
    assert back.hash == preset.hash and back.preset == "fineweb" and back == preset


def test_new_language_settings_leave_old_hashes_alone() -> None:
    # Configs from before language scopes (langid after the quality steps, or keeping only
    # English) decide as before, so their hash must not change.
    old = {"filters": {"steps": ["gopher_quality", "c4", "langid"]}}
    decisions = config.from_dict(old).filters.decision_list()
    assert all("languages" not in p and "stop_words_languages" not in p for _, p in decisions)
    english = {"filters": {"steps": ["langid", "gopher_quality"]}, "langid": {"keep": ["en"]}}
    assert "stop_words_languages" not in config.from_dict(english).filters.decision_list()[1][1]
    # With French kept before Gopher, the rule's languages decide: they are in the hash.
    french = {"filters": {"steps": ["langid", "gopher_quality"]}, "langid": {"keep": ["fr"]}}
    assert config.from_dict(french).filters.decision_list()[1][1]["stop_words_languages"] == ["en"]


def test_bad_preset_names_and_conflicts_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"preset = 'fine' is not a preset: use one of"):
        config.from_dict({"preset": "fine"})
    named = tmp_path / "named.toml"
    named.write_text('preset = "fineweb"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"names preset = 'fineweb' but --preset minimal"):
        config.load(named, "minimal")
    assert config.load(named, "fineweb").preset == "fineweb"
    plain = tmp_path / "plain.toml"
    plain.write_text("[langid]\nkeep = ['de']\n", encoding="utf-8")
    assert config.load(plain, "multilingual").filters.steps[1].param("keep") == ("de",)


def _tiny_corpus(tmp_path: Path) -> Path:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(f'{{"text": "{p}"}}\n' for p in PROSE), encoding="utf-8")
    return data


def test_a_new_lake_without_config_gets_the_default_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PRESET_ENV)  # the suite's "minimal" off: the shipped default
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([_tiny_corpus(tmp_path)], workers=1).ok
    cfg = lake.config()
    assert cfg.preset == config.DEFAULT_PRESET == "multilingual"
    assert cfg.hash == config.from_dict({"preset": "multilingual"}).hash
    # A re-run without a config keeps the lake's config; another preset is refused.
    assert lake.ingest([_tiny_corpus(tmp_path)], workers=1).ok
    with pytest.raises(ConfigError, match="would decide differently"):
        lake.ingest([_tiny_corpus(tmp_path)], preset="minimal", workers=1)


def test_preset_on_the_command_line_shows_in_status(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    proc = run_lakecurate(
        "ingest", _tiny_corpus(tmp_path), "--lake", lake, "--preset", "fineweb", "--workers", 1
    )
    assert proc.returncode == 0, proc.stderr
    proc = run_lakecurate("status", "--lake", lake, env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    pipeline = proc.stdout.split("== chunks")[0]
    assert "preset   fineweb" in pipeline
    shown = [ln.split()[2] for ln in pipeline.splitlines() if ln.startswith("step ")]
    assert shown == [*FINEWEB_STEPS, "exact_dup", "near_dup"]
    bad = run_lakecurate("ingest", _tiny_corpus(tmp_path), "--lake", lake, "--preset", "fine")
    assert bad.returncode != 0 and "fine" in bad.stderr


def test_cli_default_without_config_is_the_default_preset(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    env = {PRESET_ENV: ""}  # as a user's shell: no preset named anywhere
    assert cli_env(env)[PRESET_ENV] == ""
    proc = run_lakecurate("ingest", _tiny_corpus(tmp_path), "--lake", lake, env=env)
    assert proc.returncode == 0, proc.stderr
    text = (lake / "lakecurate.toml").read_text(encoding="utf-8")
    assert text.startswith('# resolved from preset "multilingual"')
