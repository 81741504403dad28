"""Control characters and ANSI escapes are stripped in normalisation (issue 17, "normalise, don't
drop"): ``worker.normalise`` (sql/worker/decide.sql) on real DuckDB, then through the worker."""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa
import pytest
from helpers import PROSE
from helpers import run_chunk as _run

from lakecurate import engine
from lakecurate.config import NORMALISATION_VERSION


def _normalise(
    texts: list[str | None], version: int = NORMALISATION_VERSION, kind: str | None = None
) -> list[tuple[Any, ...]]:
    """(norm, n_stripped) of each text, as the worker's normalise query gives them."""
    records = pa.table(
        {
            "source_line": list(range(len(texts))),
            "kind": pa.array([kind] * len(texts), pa.string()),
            "text": pa.array(texts, pa.string()),
        }
    )
    con = duckdb.connect()
    con.register("records", records)
    sql = f"SELECT norm, n_stripped FROM ({engine.q('worker.normalise')}) ORDER BY source_line"
    return con.execute(sql, {"normalisation": version}).fetchall()


@pytest.mark.parametrize(
    ("text", "clean", "stripped"),
    [
        ("\x1b[32m绿色\x1b[0m的诗", "绿色的诗", 9),  # CSI colour, as in debian_fortunes_zh
        ("\x1b[;m\x1b[35;1m“cat”", "“cat”", 11),  # empty and multi-parameter SGR
        ("a\x1b[2Kb\x1b[1;1Hc", "abc", 10),  # other CSI finals (erase, cursor)
        ("\x1b]0;title\x07hello", "hello", 10),  # OSC ended by BEL
        ("\x1b]8;;https://x.org\x1b\\link\x1b]8;;\x1b\\", "link", 27),  # OSC 8 ended by ST
        ("\x1b(Bok\x1b", "ok", 4),  # charset escape, lone ESC at the end
        ("_\bW_\bo\bo", "Wo", 6),  # overstrike: underline, bold
        ("x\x00y\x07z\x7fw", "xyzw", 3),  # C0, DEL
        ("one\x0ctwo\x1ethree\x0bfour", "one\ntwo\nthree\nfour", 3),  # line breaks -> LF
        # C1 is Windows-1252 read as Latin-1: repaired; its undefined five removed
        ("yesterday\x92s \x93quote\x94 \x96 dash\x81", "yesterday’s “quote” – dash", 5),
        ("\x80 5\x85 \x9b", "€ 5… ›", 3),
        ("tab\tand\nnewline kept", "tab\tand\nnewline kept", 0),
        ("\x1b[1m  padded  \x1b[0m", "padded", 8),  # outer whitespace after stripping
        ("no controls at all", "no controls at all", 0),
    ],
)
def test_controls_and_escapes_are_stripped(text: str, clean: str, stripped: int) -> None:
    assert _normalise([text]) == [(clean, stripped)]


def test_an_unterminated_osc_does_not_eat_the_text() -> None:
    # Without its terminator ESC ] is a two-character escape: the rest is text.
    assert _normalise(["\x1b]0;not a title\nnext line"]) == [("0;not a title\nnext line", 2)]


def test_rule_version_1_keeps_controls() -> None:
    assert _normalise(["\x1b[32mgreen\x1b[0m"], version=1) == [("\x1b[32mgreen\x1b[0m", 0)]


def test_malformed_and_null_rows_are_left_alone() -> None:
    assert _normalise(["\x1b[32m{bad json"], kind="json") == [(None, 0)]
    assert _normalise([None]) == [(None, 0)]


def test_a_coloured_document_passes_utf8_with_clean_text_and_a_signal(tmp_path: Any) -> None:
    prose = "\n".join(PROSE)
    coloured = f"\x1b[32m{prose}\x1b[0m"
    broken = prose + "\ufffd" * 20  # replacement characters: still broken, still dropped
    _, rows = _run(tmp_path, [coloured, prose, broken], {"filters": {"steps": ["utf8"]}})
    by_id = {r["id"]: r for r in rows}
    assert by_id["d0"]["kept"] is True and by_id["d0"]["reason"] is None
    assert by_id["d0"]["text"] == prose and by_id["d0"]["detail"] == "normalise.stripped=9"
    # the same text without colours: the same content hash, so an exact duplicate
    assert by_id["d1"]["reason"] == "exact_dup" and by_id["d1"]["dup_of"] == "d0"
    assert by_id["d1"]["detail"] is None
    assert by_id["d2"]["reason"] == "filter:utf8"
    assert by_id["d2"]["detail"].startswith("utf8.replacement_ratio=")


def test_under_rule_version_1_utf8_still_drops_it(tmp_path: Any) -> None:
    coloured = "\x1b[32m" + "\n".join(PROSE) + "\x1b[0m"
    data = {"normalisation": 1, "filters": {"steps": ["utf8"]}}
    _, rows = _run(tmp_path, [coloured], data)
    assert rows[0]["reason"] == "filter:utf8"
    assert rows[0]["detail"].startswith("utf8.control_ratio=")
