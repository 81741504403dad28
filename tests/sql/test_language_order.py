"""Language id before the quality filters, and Gopher's English stop-word rule for English only.

The example config used to keep en/fr/es at language id but ran Gopher quality first, whose
stop-word rule (at least two of "the", "be", "to", ...) dropped nearly every French and
Spanish document (Wikipedia es: 2 of 6,239 kept). These run the real worker on one chunk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import FRENCH, PROSE
from helpers import run_chunk as _run

from lakecurate.errors import ConfigError

SPANISH = (
    "El río subió muy rápido después de tres días de lluvia, y los campesinos llevaron sus "
    "animales a la colina. La segunda mañana, el viejo puente estaba bajo el agua y la escuela "
    "había cerrado sus puertas. Los voluntarios del pueblo vecino llegaron con barcas, mantas y "
    "pan para las familias. Nadie recordaba una crecida semejante desde el invierno en que sus "
    "abuelos se habían casado. Cuando por fin bajó el agua, los campos estaban cubiertos de una "
    "gruesa capa de barro."
)
ENGLISH = "\n".join(PROSE)
# English with none of Gopher's stop words: the rule must still drop it.
ENGLISH_NO_STOPS = " ".join(
    ["Rivers rose quickly after heavy rain; farmers moved animals uphill before dawn."] * 6
)


def _steps(*steps: str, **sections: Any) -> dict[str, Any]:
    return {"filters": {"steps": list(steps)}, "langid": {"keep": ["en", "fr", "es"]}, **sections}


def _reasons(tmp_path: Path, data: dict[str, Any]) -> list[tuple[str | None, str | None]]:
    _, rows = _run(tmp_path, [ENGLISH, FRENCH, SPANISH, ENGLISH_NO_STOPS], data)
    return [(r["reason"], r["lang"]) for r in sorted(rows, key=lambda r: r["id"])]


def test_french_and_spanish_pass_the_stop_word_rule_after_language_id(tmp_path: Path) -> None:
    reasons = _reasons(tmp_path, _steps("langid", "gopher_quality"))
    assert reasons == [
        (None, "en"),
        (None, "fr"),
        (None, "es"),
        ("filter:gopher_quality", "en"),  # the rule still applies to English
    ]


def test_quality_before_language_id_still_applies_the_rule_to_every_document(
    tmp_path: Path,
) -> None:
    # No language is known when Gopher runs first: the stop-word rule applies to all, as it
    # always did (old lakes decide as before, with the hash they had).
    reasons = _reasons(tmp_path, _steps("gopher_quality", "langid"))
    assert [r for r, _ in reasons] == [None, *["filter:gopher_quality"] * 3]


def test_the_stop_word_rule_can_be_applied_to_every_language(tmp_path: Path) -> None:
    data = {
        "filters": {
            "steps": ["langid", "gopher_quality"],
            "gopher_quality": {"stop_words_languages": []},
        },
        "langid": {"keep": ["en", "fr", "es"]},
    }
    reasons = _reasons(tmp_path, data)
    assert [r for r, _ in reasons] == [None, *["filter:gopher_quality"] * 3]


def test_a_step_limited_to_english_skips_other_languages(tmp_path: Path) -> None:
    # min_doc_words = 500 drops every document it sees: only the English ones see it.
    data = {
        "filters": {
            "steps": ["langid", "gopher_quality"],
            "gopher_quality": {"languages": ["en"], "min_doc_words": 500},
        },
        "langid": {"keep": ["en", "fr", "es"]},
    }
    reasons = _reasons(tmp_path, data)
    assert [r for r, _ in reasons] == ["filter:gopher_quality", None, None, "filter:gopher_quality"]


def test_a_language_scope_needs_language_id_before_the_step(tmp_path: Path) -> None:
    data = {"filters": {"steps": ["c4", "langid"], "c4": {"languages": ["en"]}}}
    with pytest.raises(ConfigError, match=r'put "langid" before "c4"'):
        _run(tmp_path, [ENGLISH], data)
