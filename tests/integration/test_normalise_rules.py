"""Control characters stripped in normalisation through a whole ingest, and a lake made under the
old rules (before issue 17) keeping them: its documents never mix rules."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import CHINESE, PROSE

from lakecurate import Lake, config

PROSE_TEXT = "\n".join(PROSE)
CONFIG = """\
[filters]
steps = ["utf8", "length"]
"""


def _write(folder: Path, name: str, texts: list[str]) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(
        "".join(json.dumps({"id": f"{name}:{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    return path


def test_an_ansi_coloured_document_is_kept_with_clean_text(tmp_path: Path) -> None:
    coloured = f"\x1b[32m{PROSE_TEXT}\x1b[0m"
    _write(tmp_path / "in", "a.jsonl", [coloured, "broken \ufffd\ufffd" + PROSE_TEXT[:200]])
    cfg = tmp_path / "lakecurate.toml"
    cfg.write_text(CONFIG)
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([tmp_path / "in"], config=cfg).ok
    assert lake.sql("SELECT text, detail FROM docs").rows == [(PROSE_TEXT, "normalise.stripped=9")]
    assert [r for (r,) in lake.sql("SELECT reason FROM rejects").rows] == ["filter:utf8"]
    toml = (tmp_path / "lake" / "lakecurate.toml").read_text()
    assert f"normalisation = {config.NORMALISATION_VERSION}\n" in toml


def test_a_lake_made_under_the_old_rules_keeps_them(tmp_path: Path) -> None:
    # A lake as the code before rule version 2 left it: commits under version 1, and a
    # lakecurate.toml that does not state the version.
    cfg = tmp_path / "lakecurate.toml"
    cfg.write_text("normalisation = 1\n" + CONFIG)
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([_write(tmp_path / "in1", "a.jsonl", [PROSE_TEXT])], config=cfg).ok
    lake_toml = tmp_path / "lake" / "lakecurate.toml"
    lake_toml.write_text(lake_toml.read_text().replace("normalisation = 1\n", ""))
    old = config.from_dict({"normalisation": 1, "filters": {"steps": ["utf8", "length"]}})

    lake = Lake.open(tmp_path / "lake")
    assert lake.config().hash == old.hash and lake.config().filters.normalisation == 1
    coloured = f"\x1b[32m{PROSE_TEXT} more\x1b[0m"
    given = tmp_path / "plain.toml"  # the user's config, no version: the lake's rules apply
    given.write_text(CONFIG)
    assert lake.ingest([_write(tmp_path / "in2", "b.jsonl", [coloured])], config=given).ok
    assert lake.sql("SELECT reason FROM documents WHERE id = 'b.jsonl:0'").rows == [
        ("filter:utf8",)
    ]
    assert lake.sql("SELECT DISTINCT config_hash FROM documents").rows == [(old.hash,)]


def test_a_lake_of_rule_version_2_keeps_the_english_word_rules(tmp_path: Path) -> None:
    # Made before per-language rules (version 3): Chinese is one Gopher "word" there, and stays so.
    steps = '[filters]\nsteps = ["langid", "gopher_quality"]\n[langid]\nkeep = []\n'
    cfg = tmp_path / "lakecurate.toml"
    cfg.write_text("normalisation = 2\n" + steps)
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([_write(tmp_path / "in1", "a.jsonl", [CHINESE])], config=cfg).ok
    given = tmp_path / "plain.toml"  # no version: the lake's rules apply
    given.write_text(steps)
    assert lake.ingest([_write(tmp_path / "in2", "b.jsonl", [CHINESE + "。"])], config=given).ok
    assert lake.sql("SELECT id, detail FROM rejects ORDER BY id").rows == [
        ("a.jsonl:0", "gopher_quality.n_words=1"),
        ("b.jsonl:0", "gopher_quality.n_words=1"),
    ]
    assert lake.config().filters.normalisation == 2
    new = Lake.open(tmp_path / "new")  # a new lake: version 3, Chinese counted by characters
    assert new.ingest([tmp_path / "in1"], config=given).ok
    assert new.sql("SELECT id, lang FROM docs").rows == [("a.jsonl:0", "zh")]
