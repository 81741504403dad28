"""The configured filter pipeline as one SQL query over a whole chunk (design section 9).

Each step is a macro in ``sql/filters/``; this module only chains them: one CTE per step, a step
sees only the documents every earlier step kept, edit steps (C4 lines, PII) pass their text on,
and the step that dropped a document is recorded (``f_step``) so the funnel can be counted
without a loop. Every value is a bound parameter; the SQL text depends only on which steps run
and on the rule version. From rule version 3, language id also sets each row's ``lang_rule``
(its language's row of ``languages.table()``) and ``word_unit``, and a later quality step reads a
per-language parameter as ``coalesce(values[lang_rule], configured)`` (``_args``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from duckdb.func import FunctionNullHandling, PythonUDFType

from lakecurate import engine
from lakecurate.config import (
    LANGUAGE_PARAMS,
    PII_TYPES,
    STEPS,
    FiltersConfig,
    GatesConfig,
    StepConfig,
    step_defaults,
)
from lakecurate.errors import PermanentChunkError
from lakecurate.steps.filters import gopher as filters_udf
from lakecurate.steps.filters import langid, languages

_MACRO_STATEMENTS = (
    "filters.helpers",
    "filters.utf8",
    "filters.length",
    "filters.url_blocklist",
    "filters.gopher_quality",
    "filters.gopher_repetition",
    "filters.c4",
    "filters.fineweb",
    "filters.pii",
    "filters.langid",
)
_ALIVE = "kind IS NULL AND f_step IS NULL AND t <> ''"


# The Python functions the filter macros call: (SQL name, Arrow function, argument types, result
# type). A filter that needs Python adds its module in this package and one line here.
UDFS: tuple[tuple[str, Callable[[pa.Array], pa.Array], list[Any], str], ...] = (
    ("lc_langid", langid.detect, ["VARCHAR"], "STRUCT(lang VARCHAR, score DOUBLE)"),
    ("lc_ngram_chars", filters_udf.ngram_chars, ["VARCHAR[]"], "BIGINT[]"),
)


def install(con: duckdb.DuckDBPyConnection) -> None:
    """Create every filter macro and the Python UDFs they call on a connection."""
    for name, function, args, returns in UDFS:
        con.create_function(
            name,
            function,
            args,
            returns,
            type=PythonUDFType.ARROW,
            null_handling=FunctionNullHandling.SPECIAL,
            side_effects=False,
        )
    for statement in _MACRO_STATEMENTS:
        con.execute(engine.q(statement))


@dataclass
class Pipeline:
    """The SQL of a configured pipeline, its bound values, and its funnel step names."""

    sql: str  # CTEs after `normalised`, ending in the relation `filtered`
    params: dict[str, Any] = field(default_factory=dict)
    funnel_steps: list[str] = field(default_factory=list)  # index = f_step
    reasons: list[str] = field(default_factory=list)
    pii_steps: list[tuple[int, str]] = field(default_factory=list)  # (f_step, type)


def _args(
    k: int,
    step: StepConfig,
    skip: set[str],
    out: dict[str, Any],
    lang_known: bool = False,
    per_language: bool = False,
) -> str:
    """The macro's named arguments as bound parameters. With a language known (language id
    ran earlier), Gopher's stop-word rule is switched off (``min_stop_words := 0``) for a
    document whose language is not in ``stop_words_languages``: its word list is English.
    With ``per_language`` (rule version 3), a parameter the language table sets is that of
    the document's language (``lang_rule``), the configured value otherwise, and a language
    outside ``stop_words_languages`` with stop words in the table is checked against them."""
    parts = []
    swl = lang_known and bool(dict(step.params).get("stop_words_languages"))
    if swl:
        out[f"p{k}_swl"] = list(step.param("stop_words_languages"))
    for key, value in step.params:
        if key in skip or key in LANGUAGE_PARAMS:
            continue
        name = f"p{k}_{key}"
        out[name] = list(value) if isinstance(value, tuple) else value
        expr = f"${name}"
        # A value changed from its default is the user's, for every language.
        mine = key != "stop_words" and not _is_default(step.name, key, value)
        column = languages.table().column(key) if per_language and not mine else None
        if column is not None and (key != "stop_words" or swl):
            out[f"{name}_by"] = column
            by_lang = f"coalesce(${name}_by[lang_rule], ${name})"
            expr = (
                f"CASE WHEN lc_lang_in(lang, $p{k}_swl, $normalisation) THEN {expr} "
                f"ELSE {by_lang} END"
                if key == "stop_words"
                else by_lang
            )
        if key == "min_stop_words" and swl:
            own = f"lc_lang_in(lang, $p{k}_swl, $normalisation)"
            if per_language:
                out[f"p{k}_stop_words_by"] = languages.table().column("stop_words")
                own += f" OR len(coalesce($p{k}_stop_words_by[lang_rule], [])) > 0"
            expr = f"CASE WHEN {own} THEN {expr} ELSE 0 END"
        parts.append(f"{key} := {expr}")
    return "".join(", " + p for p in parts)


def _is_default(step: str, key: str, value: Any) -> bool:
    """``value`` is ``step``'s published default for ``key`` (lists compared as tuples)."""
    default = step_defaults(step).get(key)
    if isinstance(value, list | tuple) and isinstance(default, list | tuple):
        return tuple(value) == tuple(default)
    return bool(value == default)


def _alive(k: int, step: StepConfig, out: dict[str, Any]) -> str:
    """Which rows a step sees: the alive ones, in its ``languages`` when it has some (config
    checks that language id runs before such a step)."""
    languages = dict(step.params).get("languages")
    if not languages:
        return _ALIVE
    out[f"p{k}_languages"] = list(languages)
    return f"{_ALIVE} AND lc_lang_in(lang, $p{k}_languages, $normalisation)"


def _page(k: int, prev: str, call: str, alive: str = _ALIVE) -> str:
    return (
        f"s{k} AS (SELECT * EXCLUDE (d) REPLACE ("
        f"CASE WHEN d IS NOT NULL THEN {k - 1} ELSE f_step END AS f_step, "
        f"coalesce(f_detail, d) AS f_detail) FROM (SELECT p.*, "
        f"CASE WHEN {alive} THEN {call} END AS d FROM {prev} AS p))"
    )


class _Tokens:
    """The text's tokens as a column ``toks`` of the chain, computed once for the steps that
    read them while the text and its word unit stay as they are: a macro that names its
    tokens twice (FineWeb's list ratio, in its condition and its detail), or two steps in a
    row, would otherwise inline the tokenizer again, and RE2 compiles each regex of a query
    once per execution (about 5 ms for one with Unicode classes: most of a small chunk's
    time, issue 14)."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.alive: str | None = None  # the rows the column holds tokens of (None: no column)

    def of(self, prev: str, alive: str) -> str:
        """``prev`` with ``toks`` for (at least) the rows ``alive``."""
        if self.alive in (_ALIVE, alive):
            return prev
        column = f"CASE WHEN {alive} THEN {self.expr} END AS toks"
        replace = self.alive is not None
        self.alive = alive
        if replace:
            return f"(SELECT * REPLACE ({column}) FROM {prev})"
        return f"(SELECT *, {column} FROM {prev})"

    def gone(self, prev: str) -> str:
        """``prev`` without the column: the next step changes the text or its word unit."""
        if self.alive is None:
            return prev
        self.alive = None
        return f"(SELECT * EXCLUDE (toks) FROM {prev})"


def build(cfg: FiltersConfig) -> Pipeline:
    """Chain the configured steps into CTEs s0..sN over `normalised`. The rule version
    (``$normalisation``) is bound here because the worker's normalisation reads it too."""
    p = Pipeline(sql="", params={"normalisation": cfg.normalisation})
    ctes = [
        "s0 AS (SELECT *, norm AS t, NULL::INTEGER AS f_step, NULL::VARCHAR AS f_detail, "
        "NULL::VARCHAR AS lang, NULL::DOUBLE AS lang_score, NULL::INTEGER AS lang_rule, "
        "'word' AS word_unit FROM normalised)"
    ]
    per_language = cfg.normalisation >= languages.FIRST_VERSION
    tokens = _Tokens("lc_tokens_in(t, word_unit)" if per_language else "lc_tokens(t)")
    k = 0
    lang_known = False  # has language id run (so `lang` is set for every alive row)?
    for step in cfg.steps:
        if step.name == "pii":
            for kind in PII_TYPES:
                strategy = step.param(kind)
                if strategy == "off":
                    continue
                k += 1
                prev = tokens.gone(f"s{k - 1}")
                p.funnel_steps.append(f"pii:{kind}")
                p.reasons.append("filter:pii")
                p.pii_steps.append((k - 1, kind))
                p.params[f"p{k}_strategy"] = strategy
                ctes.append(
                    f"s{k} AS (SELECT * EXCLUDE (r) REPLACE ("
                    f"CASE WHEN r.n > 0 AND $p{k}_strategy = 'drop' THEN {k - 1} "
                    f"ELSE f_step END AS f_step, "
                    f"coalesce(f_detail, CASE WHEN r.n > 0 AND $p{k}_strategy = 'drop' "
                    f"THEN 'pii.{kind}=' || r.n END) AS f_detail, "
                    f"coalesce(r.text, t) AS t), coalesce(r.n, 0) AS n_{kind} "
                    f"FROM (SELECT *, CASE WHEN {_ALIVE} THEN pii_{kind}(t, strategy := "
                    f"$p{k}_strategy) END AS r FROM {prev}))"
                )
            continue
        k += 1
        prev = f"s{k - 1}"
        if step.name in ("c4", "langid"):  # they edit the text, or set its word unit
            prev = tokens.gone(prev)
        macro = STEPS[step.name]
        p.funnel_steps.append(f"filter:{step.name}")
        p.reasons.append(f"filter:{step.name}")
        idx = k - 1
        alive = _alive(k, step, p.params)
        if step.name == "c4":
            args = _args(k, step, set(), p.params)
            ctes.append(
                f"s{k} AS (SELECT * EXCLUDE (r) REPLACE ("
                f"CASE WHEN r.detail IS NOT NULL THEN {idx} ELSE f_step END AS f_step, "
                f"coalesce(f_detail, r.detail) AS f_detail, "
                f"CASE WHEN r IS NOT NULL AND r.detail IS NULL THEN r.text ELSE t END AS t) "
                f"FROM (SELECT *, CASE WHEN {alive} THEN {macro}(t{args}) END AS r "
                f"FROM {prev}))"
            )
        elif step.name == "langid":
            args = _args(k, step, {"max_chars"}, p.params)
            p.params[f"p{k}_max_chars"] = step.param("max_chars")
            ctes.append(
                f"s{k}_l AS (SELECT *, CASE WHEN {_ALIVE} THEN lc_langid(left(t, "
                f"$p{k}_max_chars)) END AS r FROM {prev})"
            )
            # pycld2's code becomes the lake's; the macro sees the `keep` entry covering it
            code = "lc_lang_code(r.lang, $normalisation)"
            scope = f"lc_lang_scope({code}, $p{k}_keep, $normalisation)"
            # rule version 3: the row of the language table this document's language picks
            # (lang_rule) and how its words are counted (word_unit), for the steps after this
            rule = ""
            if per_language:
                p.params["rule_langs"] = list(languages.table().languages)
                p.params["rule_units"] = list(languages.table().units)
                row = f"list_position($rule_langs, split_part({code}, '-', 1))"
                rule = (
                    f", coalesce({row}, lang_rule) AS lang_rule, "
                    f"coalesce($rule_units[{row}], word_unit) AS word_unit"
                )
            ctes.append(
                f"s{k} AS (SELECT * EXCLUDE (r, d) REPLACE ("
                f"CASE WHEN d IS NOT NULL THEN {idx} ELSE f_step END AS f_step, "
                f"coalesce(f_detail, d) AS f_detail, coalesce({code}, lang) AS lang, "
                f"coalesce(r.score, lang_score) AS lang_score{rule}) FROM (SELECT *, "
                f"CASE WHEN r IS NOT NULL THEN {macro}({scope}, r.score{args}) END AS d "
                f"FROM s{k}_l))"
            )
            lang_known = True
        elif step.name == "gopher_repetition":
            args = _args(k, step, set(), p.params, lang_known, per_language and lang_known)
            prev = tokens.of(prev, alive)
            ctes.append(_page(k, prev, f"{macro}(t, lc_ngram_chars(toks){args})", alive))
        else:
            first = "json_extract_string(meta, '$.url')" if step.name == "url_blocklist" else "t"
            if step.name in ("gopher_quality", "fineweb"):
                first, prev = "t, toks", tokens.of(prev, alive)
            args = _args(k, step, {"file"}, p.params, lang_known, per_language and lang_known)
            ctes.append(_page(k, prev, f"{macro}({first}{args})", alive))
    reason = " ".join(f"WHEN {i} THEN '{r}'" for i, r in enumerate(p.reasons))
    verdict = f"CASE f_step {reason} END" if p.reasons else "NULL::VARCHAR"
    counts = (
        f"[{', '.join('n_' + t for _, t in p.pii_steps)}]::BIGINT[]"
        if p.pii_steps
        else "[]::BIGINT[]"
    )
    last = tokens.gone(f"s{k}")
    final = f"filtered AS (SELECT *, {verdict} AS f_reason, {counts} AS pii_n FROM {last})"
    p.sql = ", ".join([*ctes, final])
    return p


def funnel(p: Pipeline, decided: pa.Table) -> list[tuple[str, int, int]]:
    """(step, docs_in, docs_dropped) for the filter steps, from the `filter_step` column."""
    malformed = int(pc.sum(pc.starts_with(decided["reason"], "malformed:")).as_py() or 0)
    docs_in = decided.num_rows - malformed
    steps = decided["filter_step"]
    out = []
    for i, name in enumerate(p.funnel_steps):
        dropped = int(pc.sum(pc.equal(steps, i)).as_py() or 0)
        out.append((name, docs_in, dropped))
        docs_in -= dropped
    return out


def redactions(p: Pipeline, decided: pa.Table) -> dict[str, int]:
    """How many matches each PII type replaced in this chunk (dropped documents excluded)."""
    survivors = decided.filter(pc.is_null(decided["filter_step"]))["pii_n"]
    return {
        kind: int(pc.sum(pc.list_element(survivors, i)).as_py() or 0) if len(survivors) else 0
        for i, (_, kind) in enumerate(p.pii_steps)
    }


def check_gates(gates: GatesConfig, stats: list[tuple[str, int, int]]) -> list[str]:
    """Gate violations of one chunk, e.g. 'langid: dropped 72.0% (72/100), allowed 30%..60%'."""
    by_step = {s: (n, d) for s, n, d in stats}
    out = []
    for name, lo, hi in gates.bounds:
        n, d = by_step.get(f"filter:{name}", (0, 0))
        if n == 0:
            continue
        rate = d / n
        if not lo <= rate <= hi:
            out.append(
                f"{name}: dropped {100 * rate:.1f}% ({d}/{n}), allowed {100 * lo:g}%..{100 * hi:g}%"
            )
    return out


def enforce_gates(gates: GatesConfig, violations: list[str], chunk_key: str) -> None:
    """Strict gates fail the chunk at once (retrying the same input cannot change a rate)."""
    if gates.strict and violations:
        raise PermanentChunkError(
            f"chunk {chunk_key} is outside its quality gate: "
            + "; ".join(violations)
            + ". Fix the input or relax [gates] in lakecurate.toml"
        )
