"""The ``[input]`` section: where a record's text and id are read from (issue 16, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakecurate import config
from lakecurate.config import Config, InputConfig
from lakecurate.errors import ConfigError


def test_default_input_leaves_the_hash_and_the_toml_of_existing_lakes_alone() -> None:
    cfg = config.from_dict({"input": {"text_field": "text", "id_field": "id"}})
    assert cfg == Config() and cfg.hash == Config().hash
    assert "input" not in Config().decision_dict()
    assert "[input]" not in config.to_toml(Config())


@pytest.mark.parametrize("section", [{"text_field": "content"}, {"id_field": "doc_id"}])
def test_another_field_is_another_pipeline(tmp_path: Path, section: dict[str, str]) -> None:
    cfg = config.from_dict({"input": section})
    assert cfg.hash != Config().hash  # it changes which documents a lake holds
    path = tmp_path / "lakecurate.toml"
    path.write_text(config.to_toml(cfg), encoding="utf-8")
    assert config.load(path) == cfg


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"text": "content"}, "unknown key [input].text; allowed keys: id_field, text_field"),
        ({"text_field": ""}, "[input].text_field = '': must be the non-empty name"),
        ({"id_field": 3}, "[input].id_field = 3: must be the non-empty name"),
        ({"text_field": "body", "id_field": "body"}, "both 'body'"),
    ],
)
def test_bad_input_sections_are_refused_by_name(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config.from_dict({"input": section})
    assert message in str(exc.value)


def test_input_must_be_a_table() -> None:
    with pytest.raises(ConfigError, match=r"\[input\] must be a table"):
        config.from_dict({"input": "content"})


def test_with_input_overrides_only_what_is_given() -> None:
    base = config.from_dict({"input": {"id_field": "doc_id"}})
    assert config.with_input(base) is base
    got = config.with_input(base, text_field="body")
    assert got.input == InputConfig(text_field="body", id_field="doc_id")
    with pytest.raises(ConfigError, match="both 'doc_id'"):
        config.with_input(base, text_field="doc_id")
