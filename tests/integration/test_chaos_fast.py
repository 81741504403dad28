"""The fast subset of the crash campaign (issue 7; the full one is ``benchmarks/chaos.py``):
SIGKILLs of a real ``lakecurate ingest`` at random moments (three in the default run, five with
``-m slow``), each resumed with the same command, then the lake must equal an uninterrupted
run's in every invariant the campaign checks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from helpers import ROOT


def _chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chaos", ROOT / "benchmarks" / "chaos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kills", [3, pytest.param(5, marks=pytest.mark.slow)])
def test_random_kills_lose_and_double_nothing(tmp_path: Path, kills: int) -> None:
    summary = _chaos().campaign(
        tmp_path,
        kills=kills,
        seed=3,
        scale=1.5,
        chunk_size="32KiB",
        max_delay=2.0,
        log=lambda _m: None,
    )
    assert summary["problems"] == [] and summary["verify_problems"] == []
    assert summary["kills_survived"] == kills, summary["runs"]
    for figure in (
        "documents_lost",
        "documents_extra",
        "documents_duplicated",
        "rows_differing",
    ):
        assert summary[figure] == 0, (figure, summary)
    assert summary["identity_set_equal"] == 1
    assert summary["rerun_says_nothing_to_do"]
    assert summary["ok"]
