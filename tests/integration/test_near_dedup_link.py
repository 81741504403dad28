"""Near dedup with ``[near_dedup].link = "kept"`` through the whole ingest: deterministic across
workers, a crash and incremental ingests, every near duplicate near its kept document, and a lake
that keeps the rule it was built with."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pytest
from helpers import NEAR_CONFIG, near_decisions, run_lakecurate

from lakecurate import Lake
from lakecurate.config import NearDedupConfig
from lakecurate.errors import ConfigError, LakeError
from lakecurate.steps.near import minhash as mh

KEPT_CONFIG = NEAR_CONFIG + 'link = "kept"\n'


@pytest.fixture(scope="module")
def kept_cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "lakecurate.toml"
    path.write_text(KEPT_CONFIG)
    return path


@pytest.fixture(scope="module")
def reference(corpus: Path, kept_cfg: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = tmp_path_factory.mktemp("ref") / "lake"
    assert Lake.open(lake).ingest([corpus], config=kept_cfg, workers=2).ok
    return lake


def test_every_near_duplicate_is_near_its_kept_document(reference: Path) -> None:
    lake = Lake.open(reference)
    assert lake.sql("SELECT value FROM minhash_meta WHERE key = 'link'").rows == [("kept",)]
    pairs = lake.sql("""SELECT r.text, d.text FROM rejects r JOIN docs d ON d.id = r.dup_of
                        WHERE r.reason = 'near_dup' ORDER BY r.id""").rows
    (n_near,) = lake.sql("SELECT count(*) FROM rejects WHERE reason = 'near_dup'").rows[0]
    assert len(pairs) == n_near > 10
    cfg = NearDedupConfig(threshold=0.8)
    dup = mh.signatures_of_texts([a for a, _ in pairs], cfg)
    kept = mh.signatures_of_texts([b for _, b in pairs], cfg)
    need = int(np.ceil(cfg.threshold * cfg.num_perm - 1e-9))
    assert ((dup == kept).sum(axis=1) >= need).all()
    mismatched = lake.sql("""SELECT count(*) FROM rejects r JOIN docs d ON d.id = r.dup_of
                             WHERE r.reason = 'near_dup' AND r.cluster_id <> d.cluster_id""")
    assert mismatched.rows[0][0] == 0


def test_one_worker_equals_two(
    reference: Path, corpus: Path, kept_cfg: Path, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    assert Lake.open(lake).ingest([corpus], config=kept_cfg, workers=1).ok
    assert near_decisions(lake) == near_decisions(reference)


def test_incremental_equals_batch(
    reference: Path, corpus: Path, kept_cfg: Path, tmp_path: Path
) -> None:
    lake = Lake.open(tmp_path / "lake")
    for i, path in enumerate(sorted(corpus.iterdir())):  # one crawl after another
        assert lake.ingest([path], config=kept_cfg if i == 0 else None).ok
    strip = [r[:1] + r[2:] for r in near_decisions(tmp_path / "lake")]
    assert strip == [r[:1] + r[2:] for r in near_decisions(reference)]


def test_interrupted_and_resumed_equals_clean(
    reference: Path, corpus: Path, kept_cfg: Path, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    args = ("ingest", corpus, "--lake", lake, "--config", kept_cfg)
    killed = run_lakecurate(*args, env={"LAKECURATE_FAULT": "during_state_update:kill:web_a_00004"})
    assert killed.returncode == -signal.SIGKILL
    done = run_lakecurate(*args)
    assert done.returncode == 0, done.stderr
    assert near_decisions(lake) == near_decisions(reference)


def test_a_lake_keeps_its_rule(reference: Path, corpus: Path, tmp_path: Path) -> None:
    any_cfg = tmp_path / "any.toml"
    any_cfg.write_text(NEAR_CONFIG)
    # A config with the other rule decides differently: refused by the config hash...
    with pytest.raises(ConfigError, match="would decide differently"):
        Lake.open(reference).ingest([corpus], config=any_cfg)
    # ...and an index built with "any" refuses to be extended with "kept", even when the lake's
    # own lakecurate.toml is edited by hand.
    first = sorted(corpus.iterdir())[0]
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([first], config=any_cfg).ok
    toml = lake.paths.config
    toml.write_text(toml.read_text().replace('link = "any"', 'link = "kept"'))
    assert 'link = "kept"' in toml.read_text()
    with pytest.raises(LakeError, match=r'built with \[near_dedup\]\.link = "any"'):
        lake.ingest([corpus])
