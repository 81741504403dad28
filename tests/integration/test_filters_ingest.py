"""The filter pipeline through a whole ingest: reasons with measured values, the funnel per
step, PII redaction counts and quality-gate flags in the chunk state and in `status`."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import CHINESE, FRENCH, PROSE

from lakecurate import Lake, config

CONFIG = """\
[ingest]
chunk_size = "64KiB"

[filters]
steps = ["length", "gopher_quality", "pii"]

[pii]
email = "tag"

[gates]
strict = false

[gates.length]
max_drop = 0.01
"""


def test_filters_gates_and_redactions_reach_the_state(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "in"
    data.mkdir()
    good = (
        "The committee met on Tuesday to review the annual budget and the new plan for the "
        "library, and everyone agreed that the reading room should stay open late. "
    ) * 3
    docs = [
        {"id": f"g{i}", "text": f"Note {i}. {good} Write to person{i}@example.org."}
        for i in range(30)
    ] + [{"id": f"s{i}", "text": f"too short {i}"} for i in range(10)]
    (data / "mixed.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    cfg = tmp_path / "lakecurate.toml"
    cfg.write_text(CONFIG)
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([data], config=cfg).ok
    dropped = lake.sql("SELECT reason, detail FROM rejects ORDER BY id").rows
    assert len(dropped) == 10
    assert all(r.startswith("filter:") and d and "=" in d for r, d in dropped)
    kept_texts = [t for (t,) in lake.sql("SELECT text FROM docs").rows]
    assert len(kept_texts) == 30 and all("@example.org" not in t for t in kept_texts)
    (flags, redactions) = lake.sql("SELECT gate_violations, redactions FROM chunks").rows[0]
    assert "length" in flags
    assert json.loads(redactions)["email"] == 30
    funnel = [r[0] for r in lake.sql("SELECT step FROM filter_stats ORDER BY step_no").rows]
    assert funnel[:2] == ["parse", "filter:length"]
    status = run_cli("status", "--lake", tmp_path / "lake")
    assert status.returncode == 0 and "== flagged" in status.stdout


def test_the_multilingual_preset_keeps_each_language_by_its_own_rules(tmp_path: Path) -> None:
    texts = {"en": "\n".join(PROSE), "fr": FRENCH, "zh": CHINESE}
    data = tmp_path / "in"
    data.mkdir()
    (data / "mixed.jsonl").write_text(
        "".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in texts.items())
    )
    cfg = tmp_path / "lakecurate.toml"
    cfg.write_text('preset = "multilingual"\n')
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([data], config=cfg).ok
    assert lake.config().filters.normalisation == config.NORMALISATION_VERSION >= 3
    assert lake.sql("SELECT id, lang FROM docs ORDER BY id").rows == [
        ("en", "en"),
        ("fr", "fr"),
        ("zh", "zh"),
    ]
