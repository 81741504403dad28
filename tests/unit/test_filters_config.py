"""The [filters], [langid], [pii] and [gates] sections: strict parsing, defaults from SQL, hash."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from lakecurate import config
from lakecurate.errors import ConfigError


def test_defaults_come_from_the_macro_signatures() -> None:
    d = config.step_defaults("gopher_quality")
    assert d["min_doc_words"] == 50 and d["max_avg_word_length"] == 10.0
    assert config.step_defaults("gopher_repetition")["dup_10_gram_frac"] == 0.1
    assert config.step_defaults("c4")["min_num_sentences"] == 5
    assert config.step_defaults("fineweb")["line_punct_thr"] == 0.12
    assert config.step_defaults("langid") == {"keep": ("en",), "min_score": 0.65, "max_chars": 2000}


def test_no_filters_by_default_and_the_old_hash_holds() -> None:
    assert config.Config().filters.steps == ()
    assert "filters" not in config.Config().decision_dict()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"filters": {"steps": ["gopher"]}}, r"unknown step 'gopher'; allowed steps: utf8, length"),
        ({"filters": {"steps": "c4"}}, r"\[filters\]\.steps = 'c4': must be a list"),
        ({"filters": {"steps": ["c4", "c4"]}}, "only once"),
        (
            {"filters": {"steps": ["c4"], "c4": {"min_sentences": 3}}},
            r"unknown key \[filters.c4\]\.min_sentences.*allowed keys: .*min_num_sentences",
        ),
        (
            {"filters": {"steps": ["c4"], "c4": {"min_num_sentences": "5"}}},
            r"\[filters.c4\]\.min_num_sentences = '5': must be an integer",
        ),
        (
            {"filters": {"steps": ["fineweb"], "fineweb": {"line_punct_thr": float("nan")}}},
            "must be a number",
        ),
        ({"filters": {"steps": ["c4"], "fineweb": {}}}, r"\[filters.fineweb\] is set but"),
        (
            {"filters": {"steps": ["pii"]}, "pii": {"email": "mask"}},
            r"\[pii\]\.email = 'mask': allowed values: tag, hash, drop, off",
        ),
        ({"pii": {"email": "tag"}}, r"\[pii\] is set but 'pii' is not in"),
        ({"filters": {"steps": ["langid"]}, "langid": {"keep": "en"}}, "list of strings"),
        (
            {"filters": {"steps": ["length"]}, "gates": {"c4": {"max_drop": 0.5}}},
            r"unknown key \[gates\]\.c4",
        ),
        (
            {"filters": {"steps": ["length"]}, "gates": {"length": {"max_drop": 1.5}}},
            "min_drop <= max_drop <= 1",
        ),
    ],
)
def test_bad_filter_config_names_the_key(data: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        config.from_dict(data)


def test_round_trip_and_hash_covers_parameters(tmp_path: Path) -> None:
    block = tmp_path / "block.txt"
    block.write_text("# ads\nwww.Ads.example\nspam.com\n")
    data = {
        "filters": {
            "steps": ["url_blocklist", "gopher_quality", "pii", "langid"],
            "url_blocklist": {"file": str(block)},
            "gopher_quality": {"min_doc_words": 40},
        },
        "pii": {"phone": "hash"},
        "langid": {"keep": ["en", "fr"]},
        "gates": {"langid": {"min_drop": 0.1, "max_drop": 0.6}},
    }
    cfg = config.from_dict(data)
    assert cfg.filters.steps[0].param("domains") == ("ads.example", "spam.com")
    again = config.from_dict(tomllib.loads(config.to_toml(cfg)))
    assert again == cfg and again.hash == cfg.hash
    tuned = config.from_dict(
        {**data, "filters": {**data["filters"], "gopher_quality": {"min_doc_words": 41}}}
    )
    assert tuned.hash != cfg.hash
    reordered = config.from_dict(
        {
            **data,
            "filters": {
                **data["filters"],
                "steps": ["gopher_quality", "url_blocklist", "pii", "langid"],
            },
        }
    )
    assert reordered.hash != cfg.hash
    # Non-strict gates only flag: they do not change decisions, so not the hash.
    assert config.from_dict({k: v for k, v in data.items() if k != "gates"}).hash == cfg.hash
    strict = config.from_dict({**data, "gates": {**data["gates"], "strict": True}})
    assert strict.hash != cfg.hash


def test_round_trip_keeps_characters_outside_the_bmp(tmp_path: Path) -> None:
    """to_toml once wrote 😀 as a JSON surrogate pair, which TOML refuses to read back."""
    block = tmp_path / "block.txt"
    block.write_text("例え.jp\n😀.example\nx\x7fy.example\n", encoding="utf-8")
    cfg = config.from_dict(
        {"filters": {"steps": ["url_blocklist"], "url_blocklist": {"file": str(block)}}}
    )
    text = config.to_toml(cfg)
    assert "\\ud83d" not in text.lower()
    again = config.from_dict(tomllib.loads(text))
    assert again == cfg and again.hash == cfg.hash
    assert "😀.example" in again.filters.steps[0].param("domains")
