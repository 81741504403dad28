"""Near dedup with ``[near_dedup].link = "kept"`` through the whole ingest: deterministic across
workers, a crash and incremental ingests, every near duplicate near its kept document, and a lake
that keeps the rule it was built with."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from helpers import NEAR_CONFIG, near_decisions, run_lakecurate

from lakecurate import Lake
from lakecurate.config import NearDedupConfig
from lakecurate.errors import ConfigError, LakeError
from lakecurate.steps.near import minhash as mh

KEPT_CONFIG = NEAR_CONFIG + 'link = "kept"\n'
ANY_CONFIG = NEAR_CONFIG + 'link = "any"\n'


@pytest.fixture(scope="module")
def kept_cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "lakecurate.toml"
    path.write_text(KEPT_CONFIG)
    return path


@pytest.fixture(scope="module")
def reference(near_lake: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus ingested on two workers with ``NEAR_CONFIG``, whose default rule is
    ``kept_cfg``'s (the same resolved config: the session's ``near_lake``, copied)."""
    return Path(shutil.copytree(near_lake, tmp_path_factory.mktemp("ref") / "lake"))


def test_every_near_duplicate_is_near_its_kept_document(reference: Path) -> None:
    lake = Lake.open(reference)
    assert lake.sql("SELECT value FROM minhash_meta WHERE key = 'link'").rows == [("kept",)]
    pairs = lake.sql("""SELECT r.text, d.text FROM rejects r JOIN docs d ON d.id = r.dup_of
                        WHERE r.reason = 'near_dup' ORDER BY r.id""").rows
    (n_near,) = lake.sql("SELECT count(*) FROM rejects WHERE reason = 'near_dup'").rows[0]
    assert len(pairs) == n_near > 10
    # The default verification: the exact Jaccard of the shingle sets, not an estimate.
    cfg = NearDedupConfig(threshold=0.8)
    _, dup, dup_off = mh.sketch_texts([a for a, _ in pairs], cfg, with_sets=True)
    _, kept, kept_off = mh.sketch_texts([b for _, b in pairs], cfg, with_sets=True)
    for i in range(len(pairs)):
        a, b = dup[dup_off[i] : dup_off[i + 1]], kept[kept_off[i] : kept_off[i + 1]]
        assert mh.exact_jaccard(a, b) >= cfg.threshold
    mismatched = lake.sql("""SELECT count(*) FROM rejects r JOIN docs d ON d.id = r.dup_of
                             WHERE r.reason = 'near_dup' AND r.cluster_id <> d.cluster_id""")
    assert mismatched.rows[0][0] == 0


@pytest.mark.slow  # the same config as test_near_dedup.py's case (link = "kept" is the default)
def test_one_worker_equals_two(
    reference: Path, corpus: Path, kept_cfg: Path, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    assert Lake.open(lake).ingest([corpus], config=kept_cfg, workers=1).ok
    assert near_decisions(lake) == near_decisions(reference)


@pytest.mark.slow  # the same config as test_near_dedup.py's case (link = "kept" is the default)
def test_incremental_equals_batch(
    reference: Path, corpus: Path, kept_cfg: Path, tmp_path: Path
) -> None:
    lake = Lake.open(tmp_path / "lake")
    for i, path in enumerate(sorted(corpus.iterdir())):  # one crawl after another
        assert lake.ingest([path], config=kept_cfg if i == 0 else None).ok
    strip = [r[:1] + r[2:] for r in near_decisions(tmp_path / "lake")]
    assert strip == [r[:1] + r[2:] for r in near_decisions(reference)]


@pytest.mark.slow  # the same config as test_near_dedup.py's case (link = "kept" is the default)
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
    any_cfg.write_text(ANY_CONFIG)
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


# -- a lake made with the near-dedup defaults of before issue 17 --------------------------------
OLD_DEFAULTS_CONFIG = NEAR_CONFIG + 'unit = "auto"\nlink = "any"\nverify_on = "signature"\n'
OLD_FINGERPRINT = "b901ddf28126623b"
"""The index fingerprint of the old defaults (pinned in tests/unit/test_minhash.py)."""


@pytest.fixture(scope="module")
def old_reference(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole corpus at once under the old defaults, written out."""
    cfg = tmp_path_factory.mktemp("old-cfg") / "lakecurate.toml"
    cfg.write_text(OLD_DEFAULTS_CONFIG)
    lake = tmp_path_factory.mktemp("old-ref") / "lake"
    assert Lake.open(lake).ingest([corpus], config=cfg).ok
    return lake


@pytest.mark.parametrize(  # the default run keeps the lake that lacks all three keys
    "written_before",
    [
        pytest.param(  # made before issue 17: no verify_on in its lakecurate.toml
            ("verify_on",), marks=pytest.mark.slow
        ),
        ("verify_on", "link", "normalisation"),  # made before link and the rule version
    ],
)
def test_a_lake_made_with_the_old_defaults_keeps_its_rule(
    old_reference: Path, corpus: Path, tmp_path: Path, written_before: tuple[str, ...]
) -> None:
    """Its lakecurate.toml lacks the keys that did not exist yet; given today's defaults or no
    config, it goes on with the rule it was made with: same fingerprint, same config hash in
    every commit, and the same decisions as one run of the old rule over everything."""
    cfg = tmp_path / "old.toml"
    cfg.write_text(OLD_DEFAULTS_CONFIG)
    files = sorted(corpus.iterdir())
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([files[0]], config=cfg).ok
    toml = lake.paths.config
    lines = toml.read_text().splitlines()
    toml.write_text("\n".join(x for x in lines if x.split(" =")[0] not in written_before) + "\n")
    assert "verify_on" not in toml.read_text()
    near = lake.config().near_dedup
    assert (near.unit, near.link, near.verify_on) == ("auto", "any", "signature")
    today = tmp_path / "today.toml"
    today.write_text(NEAR_CONFIG)  # today's defaults: script, kept, shingles
    assert lake.ingest(files[1:2], config=today).ok  # means the lake's own rule here
    assert lake.ingest([corpus]).ok
    assert lake.sql("SELECT value FROM minhash_meta WHERE key = 'fingerprint'").rows == [
        (OLD_FINGERPRINT,)
    ]
    hashes = lake.sql("SELECT DISTINCT config_hash FROM documents").rows
    assert hashes == Lake.open(old_reference).sql("SELECT DISTINCT config_hash FROM documents").rows
    strip = [r[:1] + r[2:] for r in near_decisions(lake.root)]
    assert strip == [r[:1] + r[2:] for r in near_decisions(old_reference)]


def test_a_new_lake_gets_the_new_defaults(reference: Path) -> None:
    """A lake made today (``reference``: the defaults plus link = "kept") records the new rule:
    shingle sets in its index, another fingerprint than the old defaults'."""
    lake = Lake.open(reference)
    near = lake.config().near_dedup
    assert (near.unit, near.link, near.verify_on) == ("script", "kept", "shingles")
    assert 'verify_on = "shingles"' in lake.paths.config.read_text()
    (fingerprint,) = lake.sql("SELECT value FROM minhash_meta WHERE key = 'fingerprint'").rows[0]
    assert fingerprint == mh.fingerprint(near) != OLD_FINGERPRINT
