"""The filter macros of ``sql/filters/``: small SQL in, rows out, one case per rule and edge."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from lakecurate import engine
from lakecurate.steps.filters import pipeline as filters

GOOD = (
    "The quick brown fox jumps over the lazy dog and then runs to the woods with a friend. " * 8
).strip()
CJK = "床前明月光疑是地上霜举头望明月低头思故乡" * 20
LONG_LINE = ("word " * 50_000).strip()


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    c = engine.connect(threads=1)
    filters.install(c)
    yield c
    c.close()


def one(con: duckdb.DuckDBPyConnection, expr: str, **params: Any) -> Any:
    return con.sql(f"SELECT {expr}", params=params).fetchall()[0][0]


# -- length and utf8 -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "length.chars=0"),
        ("one", "length.chars=3"),
        ("   ", "length.chars=3"),
        (GOOD, None),
        (CJK, None),
        ("x" * 1_000_001, "length.chars=1000001"),
    ],
)
def test_length(con: duckdb.DuckDBPyConnection, text: str, detail: str | None) -> None:
    assert one(con, "length_filter($t)", t=text) == detail


def test_utf8_replacement_and_control_characters(con: duckdb.DuckDBPyConnection) -> None:
    assert one(con, "utf8_filter($t)", t=GOOD) is None
    assert one(con, "utf8_filter($t)", t="") is None
    assert one(con, "utf8_filter($t)", t="bad \ufffd text").startswith("utf8.replacement_ratio=")
    assert one(con, "utf8_filter($t)", t="\x1b[31mred\x1b[0m").startswith("utf8.control_ratio=")
    assert one(con, "utf8_filter($t)", t="tabs\tand\nnewlines") is None


@pytest.mark.parametrize("text", ["", "one", "   ", CJK, LONG_LINE, "\u00e9t\u00e9 na\u00efve"])
def test_utf8_edges_pass(con: duckdb.DuckDBPyConnection, text: str) -> None:
    assert one(con, "utf8_filter($t)", t=text) is None


def test_utf8_ratio_thresholds(con: duckdb.DuckDBPyConnection) -> None:
    # 1 replacement character in 1,000 is allowed (0.001), 2 are not; a very long line counts too
    assert one(con, "utf8_filter($t)", t="\ufffd" + "x" * 999) is None
    assert (
        one(con, "utf8_filter($t)", t="\ufffd\ufffd" + "x" * 998) == "utf8.replacement_ratio=0.002"
    )
    assert one(con, "utf8_filter($t)", t=LONG_LINE + "\x00" * 300).startswith("utf8.control_ratio=")
    assert one(con, "utf8_filter($t, max_replacement_ratio := 1.0)", t="\ufffd") is None


def test_url_blocklist_matches_domains_and_subdomains(con: duckdb.DuckDBPyConnection) -> None:
    q = "url_blocklist_filter($u, domains := ['spam.com'])"
    assert one(con, q, u="https://www.spam.com/x") == "url_blocklist.host=spam.com"
    assert one(con, q, u="http://a.b.SPAM.com:80/") == "url_blocklist.host=a.b.spam.com"
    assert one(con, q, u="https://notspam.com/") is None
    assert one(con, q, u=None) is None
    assert one(con, q, u="") is None
    assert one(con, q, u="spam.com") is None  # one word, no scheme: not a URL
    assert one(con, q, u="   ") is None
    assert (
        one(con, q, u="https://\u4f8b\u5b50.spam.com/" + "x" * 100_000)
        == "url_blocklist.host=\u4f8b\u5b50.spam.com"
    )
    assert one(con, "url_blocklist_filter($u)", u="https://spam.com/") is None  # empty list


# -- Gopher quality ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        ("", "gopher_quality.n_words=0"),
        ("one", "gopher_quality.n_words=1"),
        ("   ", "gopher_quality.n_words=0"),
        (CJK, "gopher_quality.n_words=1"),
        (" ".join(["a"] * 60), "gopher_quality.mean_word_length="),
        (" ".join(["internationalisation"] * 60), "gopher_quality.mean_word_length="),
        (GOOD + " #" * 40, "gopher_quality.hash_ratio="),
        (GOOD + " ..." * 40, "gopher_quality.ellipsis_ratio="),
        (
            "\n".join(["- the item of that list and more"] * 60),
            "gopher_quality.bullet_lines_ratio=",
        ),
        (
            "\n".join(["the end of that line is near and the story goes on and on ..."] * 60),
            "gopher_quality.ellipsis_lines_ratio=",
        ),
        (GOOD + " ;" * 200, "gopher_quality.alpha_words_ratio="),
        (
            ("Quick brown foxes jump over lazy dogs in woods. " * 10).strip(),
            "gopher_quality.stop_words=0",
        ),
        (LONG_LINE, "gopher_quality.stop_words=0"),
        (" ".join(["the", "and", "word"] * 33_334), "gopher_quality.n_words=100002"),
    ],
)
def test_gopher_quality_rules(con: duckdb.DuckDBPyConnection, text: str, prefix: str) -> None:
    assert one(con, "gopher_quality_filter($t, lc_tokens($t))", t=text).startswith(prefix)


def test_gopher_quality_counts_distinct_stop_words(con: duckdb.DuckDBPyConnection) -> None:
    text = " ".join(["the"] * 5 + ["quick brown foxes jump over lazy dogs"] * 8)
    assert (
        one(con, "gopher_quality_filter($t, lc_tokens($t))", t=text)
        == "gopher_quality.stop_words=1"
    )
    assert one(con, "gopher_quality_filter($t, lc_tokens($t))", t=text + " and") is None


def test_gopher_quality_keeps_prose_and_takes_parameters(con: duckdb.DuckDBPyConnection) -> None:
    assert one(con, "gopher_quality_filter($t, lc_tokens($t))", t=GOOD) is None
    assert (
        one(con, "gopher_quality_filter($t, lc_tokens($t), min_doc_words := 500)", t=GOOD)
        == "gopher_quality.n_words=144"
    )


# -- Gopher repetition (the n-gram counts are set-based over a relation) -------------------------
def repetition(con: duckdb.DuckDBPyConnection, text: str, **kw: float) -> str | None:
    con.execute("CREATE OR REPLACE TEMP TABLE lc_input AS SELECT 1 AS doc, $t AS text", {"t": text})
    args = "".join(f", {k} := {v}" for k, v in kw.items())
    sql = (
        # What the pipeline calls inline, for one relation: the n-gram counts of each document.
        "WITH ng AS (SELECT doc, lc_ngram_chars(lc_tokens(text)) AS ngram_chars FROM lc_input) "
        f"SELECT gopher_repetition_filter(i.text, ng.ngram_chars{args}) FROM lc_input i "
        "LEFT JOIN ng USING (doc)"
    )
    return con.sql(sql).fetchall()[0][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        (
            "\n\n".join(["same paragraph here"] * 4 + ["other one", "third"]),
            "gopher_repetition.dup_para_frac=",
        ),
        (
            "\n".join(["same line here", "a", "b", "c", "same line here", "d", "e", "f", "g", "h"]),
            "gopher_repetition.dup_line_char_frac=",
        ),
        (
            "\n".join(["x"] * 5 + [f"line {i}" for i in range(5)]),
            "gopher_repetition.dup_line_frac=",
        ),
        (
            " ".join(["alpha beta"] * 30 + ["w" + str(i) for i in range(30)]),
            "gopher_repetition.top_2_gram_frac=",
        ),
        (" ".join([f"w{i}" for i in range(40)] * 2), "gopher_repetition.dup_5_gram_frac="),
    ],
)
def test_gopher_repetition_rules(con: duckdb.DuckDBPyConnection, text: str, prefix: str) -> None:
    assert (repetition(con, text) or "").startswith(prefix)


# Each remaining rule alone: the rules before it in the macro's order are switched off (1.0), so
# the one under test is the first that fails.
_OFF = 1.0
_REP_ORDER = [
    "dup_para_frac",
    "dup_para_char_frac",
    "dup_line_frac",
    "dup_line_char_frac",
    "top_2_gram_frac",
    "top_3_gram_frac",
    "top_4_gram_frac",
    *[f"dup_{n}_gram_frac" for n in range(5, 11)],
]
_ONE_PARA = "same paragraph with a few more words in it"


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        ("dup_para_char_frac", "\n\n".join([_ONE_PARA, _ONE_PARA] + [f"p{i}" for i in range(6)])),
        ("top_3_gram_frac", " ".join(["alpha beta gamma"] * 30 + [f"w{i}" for i in range(30)])),
        (
            "top_4_gram_frac",
            " ".join(["alpha beta gamma delta"] * 30 + [f"w{i}" for i in range(30)]),
        ),
        *[(f"dup_{n}_gram_frac", " ".join([f"w{i}" for i in range(40)] * 2)) for n in range(6, 11)],
    ],
)
def test_gopher_repetition_each_rule_alone(
    con: duckdb.DuckDBPyConnection, rule: str, text: str
) -> None:
    before = {k: _OFF for k in _REP_ORDER[: _REP_ORDER.index(rule)]}
    assert (repetition(con, text, **before) or "").startswith(f"gopher_repetition.{rule}=")


@pytest.mark.parametrize("text", ["", "one", "   ", CJK[:40], GOOD.replace("friend.", "pal.", 1)])
def test_gopher_repetition_edges_pass(con: duckdb.DuckDBPyConnection, text: str) -> None:
    if text == CJK[:40]:  # the poem repeats itself: one token, no n-grams, no duplicate lines
        assert repetition(con, text) is None
    elif text.startswith("The"):  # the same sentence 8 times: a repetitive document
        assert repetition(con, text) is not None
    else:
        assert repetition(con, text) is None


def test_gopher_repetition_very_long_line(con: duckdb.DuckDBPyConnection) -> None:
    # 49,999 overlapping "word word" 2-grams of 9 characters over 249,999 characters
    assert repetition(con, LONG_LINE) == "gopher_repetition.top_2_gram_frac=1.8"


def test_gopher_repetition_counts_like_datatrove(con: duckdb.DuckDBPyConnection) -> None:
    ng = "lc_ngram_chars($w::VARCHAR[])"
    # top 2-gram: count x len(" ".join); ties go to the first seen ("a b" before "c d").
    assert one(con, ng, w=["a", "b", "cc", "dd", "a", "b", "cc", "dd"])[:3] == [2 * 3, 2 * 6, 2 * 9]
    # duplicated 5-grams: the greedy scan jumps 5 words after a hit, so the overlapping repeat
    # "x x x x x x x" (7 words) counts one 5-gram (5 chars), not the 2 words after it.
    assert one(con, ng, w=["x"] * 7)[3] == 5
    # keys are the words joined without a space: "ab c d e f" repeats "a bc d e f".
    assert one(con, ng, w=["ab", "c", "d", "e", "f", "a", "bc", "d", "e", "f"])[3] == 6
    assert one(con, ng, w=[]) == [0] * 9
    assert one(con, "lc_ngram_chars(NULL::VARCHAR[])") is None


# -- C4 ------------------------------------------------------------------------------------------
def c4(con: duckdb.DuckDBPyConnection, text: str, **kw: object) -> dict[str, Any]:
    args = "".join(f", {k} := {v}" for k, v in kw.items())
    return one(con, f"c4_filter($t{args})", t=text)  # type: ignore[no-any-return]


def test_c4_line_rules_edit_the_text(con: duckdb.DuckDBPyConnection) -> None:
    text = "\n".join(
        [
            "This line is a fine sentence.",
            "Menu",
            "no terminal punctuation here",
            "Please enable JavaScript to view this page.",
            "We use cookies on this site.",
            "Another good line, with a citation[1] in it.",
            "Two words.",
            "It ends with...",
            "Third good line! And a second sentence here.",
            "Fourth good line is here.",
        ]
    )
    r = c4(con, text)
    assert r["detail"] is None
    assert r["text"] == (
        "This line is a fine sentence.\n"
        "Another good line, with a citation in it.\n"
        "Third good line! And a second sentence here.\n"
        "Fourth good line is here."
    )


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("Some text here. Lorem ipsum dolor sit amet.", "c4.lorem_ipsum=1"),
        ("The function { return x; } is here.", "c4.curly_bracket=1"),
        ("Only one good sentence here.", "c4.sentences=1"),
        ("", "c4.sentences=0"),
        ("one", "c4.sentences=0"),
        ("   ", "c4.sentences=0"),
        ("床前明月光。疑是地上霜。", "c4.sentences=0"),
        (("x" * 1001) + " is a long word.", "c4.sentences=0"),
    ],
)
def test_c4_page_rules(con: duckdb.DuckDBPyConnection, text: str, detail: str) -> None:
    assert c4(con, text)["detail"] == detail


def test_c4_very_long_line_is_one_sentence_unless_it_has_a_long_word(
    con: duckdb.DuckDBPyConnection,
) -> None:
    # one line of 50,000 words ending in a period: kept as a line, but it is one sentence
    r = c4(con, LONG_LINE + ".")
    assert r["detail"] == "c4.sentences=1"
    assert c4(con, LONG_LINE + ".", min_num_sentences=1) == {
        "text": LONG_LINE + ".",
        "detail": None,
    }
    # a line with a word over max_word_length (1,000) is removed, the others stay
    text = "\n".join(
        [
            "This line is a fine sentence.",
            "A " + "x" * 1001 + " word here.",
            "Another fine line is here.",
        ]
    )
    assert c4(con, text, min_num_sentences=1)["text"] == (
        "This line is a fine sentence.\nAnother fine line is here."
    )


def test_c4_parameters(con: duckdb.DuckDBPyConnection) -> None:
    assert c4(con, "Only one good sentence here.", min_num_sentences=1)["detail"] is None
    assert c4(con, "a b.", min_words_per_line=2, min_num_sentences=1)["text"] == "a b."


# -- FineWeb -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        (
            "\n".join(["no punctuation at the end of this line at all"] * 10),
            "fineweb.line_punct_ratio=",
        ),
        ("\n".join(["short."] * 10), "fineweb.short_line_ratio="),
        (
            "\n".join(
                [f"A long enough line number {i} that ends well." for i in range(10)]
                + ["A long enough line number 1 that ends well."]
            ),
            "fineweb.char_dup_ratio=",
        ),
        (
            "\n".join([f"Supercalifragilisticexpialidocious number{i}." for i in range(20)]),
            "fineweb.list_ratio=",
        ),
        ("", "fineweb.line_punct_ratio=0.0"),
        ("one", "fineweb.line_punct_ratio=0.0"),
        (CJK, "fineweb.line_punct_ratio=0.0"),
        ("   ", "fineweb.line_punct_ratio=0.0"),
        (LONG_LINE, "fineweb.line_punct_ratio=0.0"),
    ],
)
def test_fineweb_rules(con: duckdb.DuckDBPyConnection, text: str, prefix: str) -> None:
    assert one(con, "fineweb_filter($t, lc_tokens($t))", t=text).startswith(prefix)


def test_fineweb_keeps_prose(con: duckdb.DuckDBPyConnection) -> None:
    assert one(con, "fineweb_filter($t, lc_tokens($t))", t=GOOD) is None
    assert one(con, "fineweb_filter($t, lc_tokens($t))", t=LONG_LINE + ".") is None
    # datatrove's TERMINAL_PUNCTUATION ends a Chinese line too (no quotes, though).
    assert one(con, "fineweb_filter($t, lc_tokens($t))", t=CJK + "。") is None
    assert one(
        con,
        "fineweb_filter($t, lc_tokens($t))",
        t="\n".join(['"A long enough quoted line here, ok"'] * 3),
    ).startswith("fineweb.line_punct_ratio=0.0")


def test_fineweb_ignores_blank_lines(con: duckdb.DuckDBPyConnection) -> None:
    # 6 prose lines and 10 blank ones: datatrove drops the blank lines before every ratio.
    text = "\n\n\n".join(
        f"Line number {w} of a longer paragraph, ending well."
        for w in ["one", "two", "three", "four", "five", "six"]
    )
    assert one(con, "fineweb_filter($t, lc_tokens($t))", t=text) is None


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        (
            "Don't stop: it's John's (1,000 U.S. e.g. 3.5%).",
            [
                "Do",
                "n't",
                "stop",
                ":",
                "it",
                "\ue000s",
                "John",
                "\ue000s",
                "(",
                "1,000",
                "U\ue001S\ue001",
                "e\ue001g\ue001",
                "3.5",
                "%",
                ")",
                ".",
            ],
        ),
        (
            "well-known end.Next end.next AT&T x...y ?! --",
            [
                "well",
                "-",
                "known",
                "end",
                ".",
                "Next",
                "end.next",
                "AT&T",
                "x",
                "...",
                "y",
                "?",
                "!",
                "--",
            ],
        ),
        ("Mr. Smith, a. b.", ["Mr\ue001", "Smith", ",", "a\ue001", "b\ue001"]),
        ("补救原则：出现异常时，马上退出。", ["补救原则：出现异常时，马上退出", "。"]),
        ("", []),
        ("   ", []),
    ],
)
def test_tokens_follow_spacy(con: duckdb.DuckDBPyConnection, text: str, tokens: list[str]) -> None:
    # U+E000 / U+E001 stand for the apostrophe of "'s" and an abbreviation's period (same length).
    assert one(con, "lc_tokens($t)", t=text) == tokens


# -- PII -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("macro", "text", "tagged", "n"),
    [
        ("pii_email", "write to jane.doe+x@mail.example.org today", "write to <EMAIL> today", 1),
        (
            "pii_ipv4",
            "from 192.168.0.1 not 999.1.2.3 or 1.2.3",
            "from <IPV4> not 999.1.2.3 or 1.2.3",
            1,
        ),
        (
            "pii_ipv6",
            "at 2001:db8::ff00:42:8329 and fe80::1, std::vector at 10:30",
            "at <IPV6> and <IPV6>, std::vector at 10:30",
            2,
        ),
        (
            "pii_phone",
            "call (555) 123-4567 or +44 20 7946 0958; years 1999 2000 2001",
            "call <PHONE> or <PHONE>; years 1999 2000 2001",
            2,
        ),
        ("pii_email", "", "", 0),
        ("pii_phone", "床前明月光", "床前明月光", 0),
    ],
)
def test_pii_tag(
    con: duckdb.DuckDBPyConnection, macro: str, text: str, tagged: str, n: int
) -> None:
    assert one(con, f"{macro}($t)", t=text) == {"text": tagged, "n": n}


@pytest.mark.parametrize("macro", ["pii_email", "pii_ipv4", "pii_ipv6", "pii_phone"])
@pytest.mark.parametrize("text", ["", "one", "   ", CJK, LONG_LINE, "12345678901234 2024"])
def test_pii_edges_match_nothing(con: duckdb.DuckDBPyConnection, macro: str, text: str) -> None:
    for strategy in ("tag", "hash", "drop"):
        assert one(con, f"{macro}($t, strategy := '{strategy}')", t=text) == {"text": text, "n": 0}


@pytest.mark.parametrize(
    ("macro", "value", "tag"),
    [
        ("pii_email", "jane@example.org", "<EMAIL>"),
        ("pii_ipv4", "10.0.0.7", "<IPV4>"),
        ("pii_ipv6", "2001:db8::1", "<IPV6>"),
        ("pii_phone", "+44 20 7946 0958", "<PHONE>"),
    ],
)
def test_pii_in_a_very_long_line_and_next_to_cjk(
    con: duckdb.DuckDBPyConnection, macro: str, value: str, tag: str
) -> None:
    assert one(con, f"{macro}($t)", t=f"{LONG_LINE} {value} {LONG_LINE}") == {
        "text": f"{LONG_LINE} {tag} {LONG_LINE}",
        "n": 1,
    }
    assert one(con, f"{macro}($t)", t=f"床前 {value} 明月") == {"text": f"床前 {tag} 明月", "n": 1}


def test_pii_hash_is_stable_and_drop_leaves_text(con: duckdb.DuckDBPyConnection) -> None:
    r = one(con, "pii_email($t, strategy := 'hash')", t="a@b.com and a@b.com, c@d.com")
    first = r["text"].split(" ")[0]
    assert first.startswith("<EMAIL:") and r["text"].split(" ")[2].rstrip(",") == first
    assert r["n"] == 3
    assert one(con, "pii_email($t, strategy := 'drop')", t="a@b.com") == {"text": "a@b.com", "n": 1}


# -- language id ---------------------------------------------------------------------------------
def test_langid_udf_and_decision(con: duckdb.DuckDBPyConnection) -> None:
    r = one(con, "lc_langid($t)", t=GOOD)
    assert r["lang"] == "en" and r["score"] > 0.9
    assert (
        one(con, "lc_langid($t)", t="Le chat est sur la table et il dort tout l'après-midi.")[
            "lang"
        ]
        == "fr"
    )
    assert one(con, "lc_langid($t)", t=CJK)["lang"] == "zh"
    assert one(con, "lc_langid($t)", t="")["lang"] == "un"
    assert one(con, "langid_filter('fr', 0.99)") == "langid.lang=fr"
    assert one(con, "langid_filter('en', 0.5)") == "langid.score=0.5"
    assert one(con, "langid_filter('fr', 0.99, keep := [])") is None


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_langid_blank_is_unknown_and_dropped(con: duckdb.DuckDBPyConnection, text: str) -> None:
    r = one(con, "lc_langid($t)", t=text)
    assert r == {"lang": "un", "score": 0.0}
    assert one(con, "langid_filter($l, $s)", l=r["lang"], s=r["score"]) == "langid.lang=un"


def test_langid_edges(con: duckdb.DuckDBPyConnection) -> None:
    assert one(con, "lc_langid(NULL::VARCHAR)") == {"lang": None, "score": None}
    word = one(con, "lc_langid($t)", t="hello")  # one word: too little to be sure of anything
    assert word["lang"] in {"en", "un"} and 0.0 <= word["score"] <= 1.0
    long = one(con, "lc_langid($t)", t=(GOOD + " ") * 2_000)  # ~170,000 characters, one line
    assert long["lang"] == "en" and long["score"] > 0.9
    # the threshold is inclusive (datatrove keeps score >= min_score)
    assert one(con, "langid_filter('en', 0.65)") is None
    assert one(con, "langid_filter('en', 0.6499)") == "langid.score=0.6499"
