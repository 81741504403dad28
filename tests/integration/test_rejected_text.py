"""``[output] keep_rejected_text`` (issue 16 item 9): the text of documents a quality filter
dropped is kept, dropped, or kept for one in a hundred; duplicates always keep theirs, every
verdict and every other column stays, and ``status`` says what the data files hold."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import run_lakecurate

from lakecurate import Lake

GOOD = (
    "The committee met on Tuesday to review the annual budget and the new plan for the "
    "library, and everyone agreed that the reading room should stay open late. "
)
CONFIG = '[ingest]\nchunk_size = "16KiB"\n\n[filters]\nsteps = ["length"]\n'
COLUMNS = "id, kept, reason, detail, dup_of, lang, content_hash, source_line, meta"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """250 lines: short documents the length filter drops, good ones, and exact copies."""
    data = tmp_path_factory.mktemp("rejected") / "in.jsonl"
    docs = []
    for i in range(250):
        if i % 3 == 0:
            docs.append({"id": f"s{i}", "text": f"too short {i}", "url": f"u{i}"})
        elif i % 10 == 4:
            docs.append({"id": f"c{i}", "text": f"Copy. {GOOD * 2}"})  # exact duplicates
        else:
            docs.append({"id": f"g{i}", "text": f"Note {i}. {GOOD * 2}"})
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return data


def _ingest(corpus: Path, lake: Path, output: str) -> Lake:
    cfg = lake.parent / f"{lake.name}.toml"
    cfg.write_text(CONFIG + output)
    handle = Lake.open(lake)
    assert handle.ingest([corpus], config=cfg, workers=2).ok
    return handle


@pytest.fixture(scope="module")
def ingested(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Lake]:
    """``ingested(output)``: the corpus ingested with that ``[output]`` section, once per module
    (the tests only read these lakes)."""
    folder = tmp_path_factory.mktemp("lakes")
    lakes: dict[str, Lake] = {}

    def lake(output: str) -> Lake:
        if output not in lakes:
            lakes[output] = _ingest(corpus, folder / f"lake{len(lakes)}", output)
        return lakes[output]

    return lake


@pytest.mark.parametrize("mode", ["false", '"sample"'])
def test_rejected_text_is_dropped_or_sampled_and_nothing_else_changes(
    mode: str, ingested: Callable[[str], Lake]
) -> None:
    full = ingested("")
    lean = ingested(f"\n[output]\nkeep_rejected_text = {mode}\n")
    query = f"SELECT {COLUMNS} FROM documents ORDER BY id"
    assert lean.sql(query).rows == full.sql(query).rows  # every verdict and column but text
    texts = "SELECT id, reason, source_line, text FROM documents ORDER BY id"
    for (doc, reason, line, text), (_, _, _, was) in zip(
        lean.sql(texts).rows, full.sql(texts).rows, strict=True
    ):
        filtered = (reason or "").startswith("filter:")
        if filtered and not (mode == '"sample"' and line % 100 == 0):
            assert text is None, doc
        else:  # kept, a duplicate (it may become the kept copy), or in the sample
            assert text == was and text is not None, doc
    nulls = lean.sql("SELECT count(*) FROM documents WHERE text IS NULL").rows[0][0]
    # 84 short documents (every third line); "sample" keeps the one on line 100
    assert nulls == (84 if mode == "false" else 83)
    assert lean.sql("SELECT count(*) FROM documents WHERE reason = 'exact_dup'").rows[0][0] > 0


def test_status_says_what_the_data_files_hold(ingested: Callable[[str], Lake]) -> None:
    full = ingested("")
    lean = ingested("\n[output]\nkeep_rejected_text = false\n")
    rows = {r[0]: r for r in full.status().storage.rows}
    assert set(rows) == {"kept", "dropped"}
    kept, dropped = full.sql(
        "SELECT count(*) FILTER (WHERE kept), count(*) FILTER (WHERE NOT kept) FROM documents"
    ).rows[0]
    assert rows["kept"][1] == kept and rows["dropped"][1] == dropped
    shown = run_lakecurate("status", "--lake", lean.root, env={"COLUMNS": "100"})
    assert shown.returncode == 0 and "== storage" in shown.stdout, shown.stdout
    section = shown.stdout.split("== storage", 1)[1].split("==", 1)[0]
    assert "kept" in section and "dropped" in section
