"""Language codes are BCP-47 (issue 17, item 3): pycld2's deprecated codes mapped, `zh-Hant`
kept apart from `zh`, and a listed code covering its subtags. Real DuckDB, the real worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from helpers import run_chunk as _run

from lakecurate.steps.filters import pipeline

HEBREW = (
    "הנהר עלה במהירות אחרי שלושה ימי גשם, והחקלאים העבירו את הבהמות שלהם אל הגבעה. בבוקר "
    "השני הגשר הישן היה מתחת למים ובית הספר סגר את שעריו. מתנדבים מהכפר השכן הגיעו עם "
    "סירות, שמיכות ולחם למשפחות."
)
TRADITIONAL = (
    "河水在連續三天的大雨之後迅速上漲，農民們把牲畜趕到山坡上。第二天早上，舊橋已經被水淹沒，"
    "學校也關上了大門。鄰村的志願者帶著船隻、毯子和麵包來幫助這些家庭。"
)
SIMPLIFIED = (
    "河水在连续三天的大雨之后迅速上涨，农民们把牲畜赶到山坡上。第二天早上，旧桥已经被水淹没，"
    "学校也关上了大门。邻村的志愿者带着船只、毯子和面包来帮助这些家庭。"
)


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    pipeline.install(c)
    return c


@pytest.mark.parametrize(
    ("code", "v2", "v1"),
    [
        ("iw", "he", "iw"),
        ("jw", "jv", "jw"),
        ("in", "id", "in"),
        ("ji", "yi", "ji"),
        ("mo", "ro", "mo"),
        ("zh-Hant", "zh-Hant", "zh"),
        ("zh", "zh", "zh"),
        ("sr-ME", "sr-ME", "sr-ME"),
        ("xx-Hebr", "un", "xx-Hebr"),
        ("xxx", "un", "xxx"),
        ("en", "en", "en"),
        ("un", "un", "un"),
    ],
)
def test_pycld2_codes_become_bcp47(
    con: duckdb.DuckDBPyConnection, code: str, v2: str, v1: str
) -> None:
    got = con.execute("SELECT lc_lang_code($c, 2), lc_lang_code($c, 1)", {"c": code}).fetchone()
    assert got == (v2, v1)


@pytest.mark.parametrize(
    ("lang", "codes", "v2", "v1"),
    [
        ("zh-Hant", ["zh"], True, False),  # prefix, as BCP-47 matching does
        ("zh", ["zh-Hant"], False, False),  # not the other way round
        ("he", ["iw"], True, False),  # a deprecated code in a config still works
        ("sr-ME", ["sr"], True, False),
        ("en", ["en", "fr"], True, True),
        ("eng", ["en"], False, False),  # a prefix ends at a subtag boundary
        ("fr", [], False, False),
    ],
)
def test_a_listed_code_covers_its_subtags(
    con: duckdb.DuckDBPyConnection, lang: str, codes: list[str], v2: bool, v1: bool
) -> None:
    sql = "SELECT lc_lang_in($l, $c::VARCHAR[], 2), lc_lang_in($l, $c::VARCHAR[], 1)"
    assert con.execute(sql, {"l": lang, "c": codes}).fetchone() == (v2, v1)


def _langs(tmp_path: Path, data: dict[str, Any]) -> list[tuple[bool, str | None, str | None]]:
    _, rows = _run(tmp_path, [HEBREW, TRADITIONAL, SIMPLIFIED], data)
    return [(r["kept"], r["lang"], r["detail"]) for r in sorted(rows, key=lambda r: r["id"])]


def test_keep_he_keeps_hebrew(tmp_path: Path) -> None:
    data = {"filters": {"steps": ["langid"]}, "langid": {"keep": ["he"]}}
    assert _langs(tmp_path, data) == [
        (True, "he", None),
        (False, "zh-Hant", "langid.lang=zh-Hant"),
        (False, "zh", "langid.lang=zh"),
    ]


def test_keep_iw_is_hebrew_too(tmp_path: Path) -> None:
    data = {"filters": {"steps": ["langid"]}, "langid": {"keep": ["iw"]}}
    assert [k for k, _, _ in _langs(tmp_path, data)] == [True, False, False]


def test_keep_zh_keeps_both_scripts_and_tells_them_apart(tmp_path: Path) -> None:
    data = {"filters": {"steps": ["langid"]}, "langid": {"keep": ["zh"]}}
    assert _langs(tmp_path, data) == [
        (False, "he", "langid.lang=he"),
        (True, "zh-Hant", None),
        (True, "zh", None),
    ]


def test_keep_zh_hant_keeps_traditional_only(tmp_path: Path) -> None:
    data = {"filters": {"steps": ["langid"]}, "langid": {"keep": ["zh-Hant"]}}
    assert [k for k, _, _ in _langs(tmp_path, data)] == [False, True, False]


def test_a_language_scope_covers_subtags(tmp_path: Path) -> None:
    # Gopher quality for Chinese only, wanting 10,000 words: both scripts dropped, Hebrew not
    data = {
        "filters": {
            "steps": ["langid", "gopher_quality"],
            "gopher_quality": {"languages": ["zh"], "min_doc_words": 10_000},
        },
        "langid": {"keep": []},
    }
    kept = [k for k, _, _ in _langs(tmp_path, data)]
    assert kept == [True, False, False]


def test_rule_version_1_keeps_the_old_codes(tmp_path: Path) -> None:
    data = {"normalisation": 1, "filters": {"steps": ["langid"]}, "langid": {"keep": ["he"]}}
    assert _langs(tmp_path, data) == [
        (False, "iw", "langid.lang=iw"),
        (False, "zh", "langid.lang=zh"),
        (False, "zh", "langid.lang=zh"),
    ]
