"""Per-language filter settings (rule version 3): FineWeb-2's published thresholds and stop words,
and how words are counted, per language (docs/filters.md, "Per-language rules").

The values are data, ``fineweb2_languages.toml`` next to this module, with the source of each.
The pipeline binds them as lists aligned with :func:`table`'s languages: a document's language
picks its row once (``lang_rule``, set where language id runs) and every per-language parameter
is ``coalesce(values[lang_rule], configured value)``, so one SQL query serves every language.
The table is part of rule version 3 and enters no config hash: a change to it is a new version.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

FIRST_VERSION = 3
"""The rule version (``config.NORMALISATION_VERSION``) from which these settings apply."""

_FILE = Path(__file__).with_name("fineweb2_languages.toml")
_SECTIONS = ("words", "characters", "pipeline")


@dataclass(frozen=True)
class LanguageTable:
    """The per-language rows: ``languages[i]`` counts words as ``units[i]`` (``word``,
    ``char`` or ``elision``) and sets the parameters ``values[param][i]`` (None: the
    configured value)."""

    languages: tuple[str, ...]
    units: tuple[str, ...]
    values: dict[str, tuple[Any, ...]]

    def column(self, param: str) -> list[Any] | None:
        """The per-language values of ``param`` as a list to bind, or None if no language
        sets it."""
        col = self.values.get(param)
        return None if col is None else [list(v) if isinstance(v, tuple) else v for v in col]


@cache
def table() -> LanguageTable:
    """The shipped table, read once."""
    data = tomllib.loads(_FILE.read_text(encoding="utf-8"))
    words = data["words"]
    # A FineWeb-2 language: its file's values over the pipeline's own settings.
    rows: dict[str, dict[str, Any]] = {
        lang: {**data["pipeline"], **{k: v for k, v in row.items() if k != "source"}}
        for lang, row in data.items()
        if lang not in _SECTIONS
    }
    for lang in words["characters"]:
        rows.setdefault(lang, dict(data["characters"]))
    for lang in words["elision"]:
        rows.setdefault(lang, {})
    languages = tuple(sorted(rows))
    units = tuple(
        "char" if lang in words["characters"] else "elision" if lang in words["elision"] else "word"
        for lang in languages
    )
    params = sorted({k for row in rows.values() for k in row})
    values = {
        p: tuple(
            tuple(rows[lang][p]) if isinstance(rows[lang].get(p), list) else rows[lang].get(p)
            for lang in languages
        )
        for p in params
    }
    return LanguageTable(languages, units, values)
