"""``process_chunk`` with the filter pipeline on: reasons, details, edits, the funnel, gates."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import PROSE
from helpers import run_chunk as _run

from lakecurate import config
from lakecurate.errors import PermanentChunkError
from lakecurate.ingest import worker
from lakecurate.types import WorkOrder

GOOD = "\n".join(PROSE)


PIPELINE = {
    "filters": {
        "steps": ["length", "gopher_quality", "c4", "pii", "langid", "gopher_repetition"],
        "length": {"min_chars": 10},
    },
    "pii": {"email": "tag", "phone": "drop"},
}


def test_reasons_details_edits_and_funnel(tmp_path: Path) -> None:
    texts = [
        GOOD,  # kept
        "short",  # length
        " ".join(["a"] * 60),  # gopher_quality.mean_word_length
        GOOD + "\nmenu item",  # C4 removes the last line: then a dup of d0
        GOOD.replace("families.", "families (mail jo@ex.com).", 1),  # e-mail tagged
        GOOD + "\nCall (555) 123-4567 now, it is good.",  # phone: dropped
        GOOD.replace("three days", "four days") + "\nmenu",  # edited by C4, then kept
        "   ",  # empty
        "Le renard brun saute par-dessus le chien paresseux et court dans les bois avec un ami "
        "de la famille. " * 8,  # langid (fr), after gopher (the/of stop words?)
    ]
    result, rows = _run(tmp_path, texts, PIPELINE)
    by_id = {r["id"]: r for r in rows}
    assert by_id["d0"]["kept"] and by_id["d0"]["lang"] == "en" and by_id["d0"]["lang_score"] > 0.5
    assert by_id["d1"]["reason"] == "filter:length"
    assert by_id["d1"]["detail"] == "length.chars=5"
    assert by_id["d2"]["reason"] == "filter:gopher_quality"
    assert by_id["d2"]["detail"].startswith("gopher_quality.mean_word_length=")
    # Dedup sees the final (edited) text.
    assert by_id["d3"]["reason"] == "exact_dup" and by_id["d3"]["dup_of"] == "d0"
    assert by_id["d4"]["kept"] and "<EMAIL>" in by_id["d4"]["text"]
    assert by_id["d5"]["reason"] == "filter:pii" and by_id["d5"]["detail"] == "pii.phone=1"
    assert by_id["d6"]["kept"] and by_id["d6"]["text"].endswith("church roof.")
    assert by_id["d7"]["reason"] == "filter:empty"
    assert by_id["d8"]["reason"] in ("filter:langid", "filter:gopher_quality")
    steps = [s for s, _, _ in result.filter_stats]
    assert steps == [
        "parse",
        "filter:length",
        "filter:gopher_quality",
        "filter:c4",
        "pii:email",
        "pii:ipv4",
        "pii:ipv6",
        "pii:phone",
        "filter:langid",
        "filter:gopher_repetition",
        "filter:empty",
        "exact_dup:chunk",
    ]
    # The funnel adds up: each step's input is the previous step's survivors.
    for (_, n_in, dropped), (_, next_in, _) in zip(
        result.filter_stats, result.filter_stats[1:], strict=False
    ):
        assert next_in == n_in - dropped
    dropped = {s: d for s, _, d in result.filter_stats}
    assert dropped["filter:length"] == 1 and dropped["pii:phone"] == 1
    assert dropped["filter:empty"] == 1 and dropped["exact_dup:chunk"] == 1
    assert result.rows_kept == sum(r["kept"] for r in rows) == 3  # d0, d4, d6
    assert result.redactions == {"email": 1, "ipv4": 0, "ipv6": 0, "phone": 0}
    assert result.gate_violations == []


def test_no_filters_is_the_old_funnel(tmp_path: Path) -> None:
    result, rows = _run(tmp_path, [GOOD, "", GOOD], {})
    assert [s for s, _, _ in result.filter_stats] == ["parse", "filter:empty", "exact_dup:chunk"]
    assert [r["reason"] for r in rows] == [None, "filter:empty", "exact_dup"]


def test_gates_flag_or_fail(tmp_path: Path) -> None:
    data = {
        "filters": {"steps": ["length"], "length": {"min_chars": 10}},
        "gates": {"length": {"max_drop": 0.2}},
    }
    result, _ = _run(tmp_path, [GOOD, "x", "y"], data)
    assert result.gate_violations == ["length: dropped 66.7% (2/3), allowed 0%..20%"]
    with pytest.raises(PermanentChunkError, match=r"length: dropped 66\.7%"):
        _run(tmp_path, [GOOD, "x", "y"], {**data, "gates": {**data["gates"], "strict": True}})


def test_the_work_order_carries_the_config(tmp_path: Path) -> None:
    cfg = config.from_dict(PIPELINE)
    (tmp_path / "lakecurate.toml").write_text("not toml: the worker must not read it")
    staging = str(tmp_path / "staging")
    order = WorkOrder(staging, "r", cfg.hash, decisions=config.to_toml(cfg))
    assert worker.pipeline_config(order) == cfg
    assert worker.pipeline_config(WorkOrder(staging, "r", "c")) == config.Config()


def test_every_step_default_round_trips_through_toml() -> None:
    # Macro defaults go into lakecurate.toml (e.g. FineWeb's stop_chars class): they must parse.
    import tomllib

    cfg = config.from_dict({"filters": {"steps": list(config.STEPS)}})
    assert config.from_dict(tomllib.loads(config.to_toml(cfg))).hash == cfg.hash


def test_a_step_for_some_languages_leaves_the_next_steps_tokens_whole(tmp_path: Path) -> None:
    """Steps in a row share one column of tokens (``pipeline._Tokens``): one whose tokens were
    computed for its own languages only must not hand them, missing, to a step for every
    language, nor tokens of the text before C4 edited it to the step after."""
    spam = " ".join(["buy cheap shoes now"] * 40)
    texts = [GOOD, spam, GOOD + "\nmenu", spam + "\nmenu"]
    alone = {"filters": {"steps": ["gopher_repetition"]}}
    chained = {
        "filters": {
            "steps": ["langid", "gopher_quality", "gopher_repetition", "c4", "fineweb"],
            "gopher_quality": {"languages": ["fr"]},
        },
        "langid": {"keep": ["en", "fr"]},
    }
    _, want = _run(tmp_path, texts, alone)
    _, have = _run(tmp_path, texts, chained)
    dropped = [None, "filter:gopher_repetition", None, "filter:gopher_repetition"]
    assert [r["reason"] for r in want] == dropped
    assert [r["reason"] for r in have][:2] == [None, "filter:gopher_repetition"]
    assert have[3]["reason"] == "filter:gopher_repetition"


def test_a_step_after_c4_counts_the_words_c4_left(tmp_path: Path) -> None:
    """The tokens of the text before C4 removed its lines are not the next step's: 58 words
    stay of 83, under the 70 asked."""
    kept = [
        "The farmer walked to the old mill with his two sons today.",
        "Their dog ran ahead of them through the wet green grass.",
        "A cold wind came down from the hills after the noon meal.",
        "She said that the river was higher than it had been in May.",
        "We will bake bread for the whole village on the next day.",
    ]
    menu = [f"menu item {w} here now" for w in ("alpha", "beta", "gamma", "delta", "omega")]
    lines = [x for pair in zip(kept, menu, strict=True) for x in pair]
    data = {
        "filters": {
            "steps": ["gopher_repetition", "c4", "gopher_quality"],
            "gopher_quality": {"min_doc_words": 70},
        }
    }
    _, rows = _run(tmp_path, ["\n".join(lines)], data)
    assert rows[0]["reason"] == "filter:gopher_quality"
    assert rows[0]["detail"].startswith("gopher_quality.")
