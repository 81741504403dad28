"""The model-based campaign in the test suite (the long one is ``benchmarks/model_campaign.py``):
a seeded random walk over a changing input tree (appends, edits, deleted lines, copies into
another folder under the same name, renames, removed and new files), ingests killed at fault
points and resumed, compact / vacuum / verify --repair / restore / a deleted state file; after
every successful ingest the lake must match a clean run on the current inputs.

The fast cases use only fault-point kills (``LAKECURATE_FAULT``), so a seed gives the same steps
and the same kill points every time; the slow case adds timed SIGKILLs of the process group.
A failure prints every difference and the steps since the start (the reproduction)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import ROOT


def _model() -> ModuleType:
    name = "model_campaign"
    if name not in sys.modules:  # its dataclasses need the module registered while it loads
        spec = importlib.util.spec_from_file_location(
            name, ROOT / "benchmarks" / "model_campaign.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _run(tmp_path: Path, **settings: object) -> None:
    mc = _model()
    summary = mc.campaign(tmp_path, mc.Settings(**settings), log=lambda _m: None)
    assert summary["ingests_checked"] >= 2, summary["history"]
    assert summary["differences_found"] == 0, mc.failure_report(summary)


# Seed 72: exact dedup only; 17: near dedup (link "any"); 43: near dedup (link "kept"). Chosen
# (the steps depend on the seed alone, so this was checked without running them) because each
# of their walks has every step kind, a kill, and a restore or a deleted state before an ingest.
# The default run keeps 43 (near dedup and re-decisions); `-m slow` runs the other two. Seed 43
# walks 77 steps, not 80: its second checked ingest (killed at staged_write) is step 77, and
# steps 78-80 are two edits and a deleted line, kinds it has had already, which would only
# add a closing ingest and its clean run (a third of the test's time). Its first 77 steps have
# every step kind, two killed ingests, and restores and deleted states between them.
# With 2 decider processes (holding the band index and tier 2's keys, testing every near pair)
# seed 43 walks again under `-m slow`: their caches must follow every change the walk makes to
# the lake (the default run keeps deciders through a kill in test_near_dedup and every pair
# they test in test_lsh_link; `benchmarks/model_campaign.py --deciders 2` walks longer).
@pytest.mark.parametrize(
    ("seed", "steps", "deciders"),
    [
        pytest.param(72, 80, 0, marks=pytest.mark.slow),
        pytest.param(17, 80, 0, marks=pytest.mark.slow),
        (43, 77, 0),
        pytest.param(43, 77, 2, marks=pytest.mark.slow),
    ],
)
def test_changing_inputs_match_a_clean_run(
    tmp_path: Path, seed: int, steps: int, deciders: int
) -> None:
    _run(
        tmp_path,
        seed=seed,
        steps=steps,
        deciders=deciders,
        ingest_every=35.0,
        kill_rate=0.5,
        kill_modes=("fault",),
        maintenance=0.15,
        max_files=4,
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", [4, 5])
def test_long_walk_with_timed_kills_matches_a_clean_run(tmp_path: Path, seed: int) -> None:
    _run(
        tmp_path,
        seed=seed,
        steps=400,
        ingest_every=8.0,
        kill_rate=0.4,
        kill_modes=("fault", "timer"),
    )
