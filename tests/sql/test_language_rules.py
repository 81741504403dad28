"""Per-language filter rules (rule version 3): after language id, Gopher's stop words and
thresholds, and how words are counted, are those of the document's language (FineWeb-2's
published settings, lakecurate/steps/filters/fineweb2_languages.toml); a lake of version 2 keeps
the English rules. These run the real worker on one chunk, and the token macro in SQL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb
import pycld2
import pytest
from helpers import CHINESE, FRENCH, PROSE
from helpers import run_chunk as _run

from lakecurate import config
from lakecurate.steps.filters import languages

ENGLISH = "\n".join(PROSE)
# French without one of FineWeb-2's French stop words (nor English ones).
FRENCH_NO_STOPS = (
    "Rivière montée rapidement après pluie abondante paysans conduisant bêtes vers colline "
    "voisine pendant nuit froide vieux pont submergé école fermée trois semaines entières "
    "bénévoles arrivés rapidement avec bateaux couvertures pain frais lait chaud "
    "médicaments divers personne jamais vu pareille crue depuis longtemps champs "
    "couverts boue grise épaisse routes coupées maisons isolées récoltes perdues"
)
# Spanish whose most frequent 2-gram ("la casa") is 9.1% of its characters: under English's
# 20% and over Spanish's published 7.7%.
SPANISH_REPEATS = (
    "La casa estaba al final del camino, junto al río. En la casa siempre había pan caliente "
    "y café para quien llegara. Los domingos toda la familia comía en la casa grande, y después "
    "los niños jugaban en el patio mientras los mayores hablaban de política. Cuando murió la "
    "abuela, vendimos la casa a una pareja joven que la pintó de azul, y ahora la casa parece "
    "otra. Nadie olvida la casa."
)


def _decide(
    tmp_path: Path, texts: list[str], steps: list[str], version: int
) -> list[tuple[str | None, str | None, str | None]]:
    data: dict[str, Any] = {"normalisation": version, "filters": {"steps": steps}}
    if "langid" in steps:
        data["langid"] = {"keep": []}
    _, rows = _run(tmp_path, texts, data)
    return [(r["lang"], r["reason"], r["detail"]) for r in sorted(rows, key=lambda r: r["id"])]


def test_a_french_text_the_english_rule_drops_is_kept_by_the_french_one(tmp_path: Path) -> None:
    texts = [FRENCH, FRENCH_NO_STOPS]
    english_rule = _decide(tmp_path, texts, ["gopher_quality"], 3)  # no language known
    assert english_rule[0] == (None, "filter:gopher_quality", "gopher_quality.stop_words=0")
    french_rule = _decide(tmp_path, texts, ["langid", "gopher_quality"], 3)
    assert french_rule[0] == ("fr", None, None)
    # ... and the French rule is a rule: French without French stop words fails it (under
    # version 2 the rule was off for every language but English).
    assert french_rule[1] == ("fr", "filter:gopher_quality", "gopher_quality.stop_words=0")
    assert _decide(tmp_path, texts, ["langid", "gopher_quality"], 2)[1] == ("fr", None, None)


def test_a_chinese_text_is_counted_by_characters(tmp_path: Path) -> None:
    steps = ["langid", "gopher_quality"]
    assert _decide(tmp_path, [CHINESE], steps, 2) == [
        ("zh", "filter:gopher_quality", "gopher_quality.n_words=1")  # no spaces: one "word"
    ]
    assert _decide(tmp_path, [CHINESE], steps, 3) == [("zh", None, None)]
    # Too short by characters is still too short: 30 characters < min_doc_words = 50.
    short = CHINESE[:30]
    assert _decide(tmp_path, [short], steps, 3)[0][2] == "gopher_quality.n_words=28"


def test_short_chinese_lines_pass_with_fineweb_2s_pipeline_settings(tmp_path: Path) -> None:
    # Lines of at most 30 characters are "short" for FineWeb English (a list, a menu); FineWeb-2
    # turns that rule off for every language it filters, and 30 characters is a long Chinese line.
    lines = CHINESE.replace("，", "，\n").replace("。", "。\n").strip()
    steps = ["langid", "fineweb"]
    (v2,) = _decide(tmp_path, [lines], steps, 2)
    assert v2[:2] == ("zh", "filter:fineweb") and v2[2].startswith("fineweb.short_line_ratio=")
    assert _decide(tmp_path, [lines], steps, 3) == [("zh", None, None)]


def test_a_published_threshold_applies_to_its_language_only(tmp_path: Path) -> None:
    steps = ["langid", "gopher_repetition"]
    v3 = _decide(tmp_path, [SPANISH_REPEATS, ENGLISH], steps, 3)
    assert v3[0][:2] == ("es", "filter:gopher_repetition")
    assert v3[0][2] is not None and v3[0][2].startswith("gopher_repetition.top_2_gram_frac=0.0911")
    assert v3[1] == ("en", None, None)
    assert _decide(tmp_path, [SPANISH_REPEATS], steps, 2) == [("es", None, None)]


def test_a_threshold_the_user_changed_applies_to_every_language(tmp_path: Path) -> None:
    """A published per-language value stands in for the default only: a user who sets the
    parameter (to anything but its default) gets that value for every language."""
    data: dict[str, Any] = {
        "normalisation": 3,
        "filters": {"steps": ["langid", "gopher_repetition"]},
        "langid": {"keep": []},
    }
    data["filters"]["gopher_repetition"] = {"top_2_gram_frac": 0.25}
    _, rows = _run(tmp_path, [SPANISH_REPEATS], data)
    assert [(r["lang"], r["reason"]) for r in rows] == [("es", None)]
    data["filters"]["gopher_repetition"] = {"top_2_gram_frac": 0.05}  # stricter than Spanish's
    _, rows = _run(tmp_path, [SPANISH_REPEATS], data)
    assert [(r["lang"], r["reason"]) for r in rows] == [("es", "filter:gopher_repetition")]
    # set to the default: the language's own value (7.7%) still applies
    data["filters"]["gopher_repetition"] = {"top_2_gram_frac": 0.2}
    _, rows = _run(tmp_path, [SPANISH_REPEATS], data)
    assert [(r["lang"], r["reason"]) for r in rows] == [("es", "filter:gopher_repetition")]


def test_english_decisions_do_not_change(tmp_path: Path) -> None:
    texts = [ENGLISH, " ".join(["Rivers rose quickly after heavy rain."] * 12), ENGLISH[:300]]
    steps = ["langid", "gopher_repetition", "gopher_quality", "fineweb"]
    assert _decide(tmp_path, texts, steps, 3) == _decide(tmp_path, texts, steps, 2)


def _tokens(con: duckdb.DuckDBPyConnection, text: str, unit: str | None) -> list[str]:
    rows = con.sql("SELECT lc_tokens_in($t, $u)", params={"t": text, "u": unit}).fetchall()
    return list(rows[0][0])


def test_words_are_counted_per_language(sql_con: duckdb.DuckDBPyConnection) -> None:
    assert _tokens(sql_con, "我们在2024年去了Paris，很好。", "char") == [
        "我", "们", "在", "2024", "年", "去", "了", "Paris", "，", "很", "好", "。",
    ]  # fmt: skip
    # Thai: a character with its combining marks is one word ("กิน": กิ + น).
    assert _tokens(sql_con, "กินข้าว", "char") == ["กิ", "น", "ข้", "า", "ว"]
    # Elided words split off with their apostrophe (U+E000), "aujourd'hui" stays whole.
    assert _tokens(sql_con, "L'homme d’État qu'il aime aujourd'hui", "elision") == [
        "L\ue000", "homme", "d\ue000", "État", "qu\ue000", "il", "aime", "aujourd'hui",
    ]  # fmt: skip
    text = "It's the cat's toy, isn't it? L'homme"
    assert _tokens(sql_con, text, "word") == _tokens(sql_con, text, None)
    assert _tokens(sql_con, text, None) == list(
        sql_con.sql("SELECT lc_tokens($t)", params={"t": text}).fetchall()[0][0]
    )


def test_the_language_table_sets_only_real_parameters_with_their_types() -> None:
    table = languages.table()
    defaults: dict[str, Any] = {}
    for step in ("gopher_quality", "gopher_repetition", "fineweb"):
        defaults.update(config.step_defaults(step))
    assert set(table.values) <= set(defaults)
    for param, column in table.values.items():
        assert len(column) == len(table.languages)
        for value in column:
            assert value is None or type(value) is type(defaults[param]), (param, value)
    unit = dict(zip(table.languages, table.units, strict=True))
    assert unit["zh"] == unit["ja"] == unit["th"] == "char" and unit["fr"] == "elision"
    assert unit["es"] == "word" and "en" not in unit  # English: the configured values
    # FineWeb-2's pipeline settings come with a FineWeb-2 entry, not with a word rule alone.
    short = dict(zip(table.languages, table.values["short_line_thr"], strict=True))
    assert short["zh"] == short["fr"] == 999.0 and short["lo"] is None


@pytest.fixture
def sql_con() -> duckdb.DuckDBPyConnection:
    from lakecurate import engine
    from lakecurate.steps.filters import pipeline

    con = engine.connect(threads=1)
    pipeline.install(con)
    return con


def test_the_docs_name_every_language_without_a_setting() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "filters.md").read_text()
    para = docs.split("**Languages with no setting here")[1].split("For them")[0]
    listed = set(re.findall(r"`([a-z]{2,3})`", para))
    names = dict(pycld2.LANGUAGES)
    deprecated = {"iw": "he", "jw": "jv", "in": "id", "ji": "yi", "mo": "ro"}
    named = {deprecated.get(names[n], names[n]) for n in pycld2.DETECTED_LANGUAGES}
    table = languages.table()
    with_setting = {
        lang
        for lang, value in zip(table.languages, table.values["top_2_gram_frac"], strict=True)
        if value is not None
    }
    expected = {c for c in named if re.fullmatch("[a-z]{2,3}", c)} - with_setting - {"en", "zzp"}
    assert listed == expected
