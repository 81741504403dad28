"""Near-duplicate removal through the whole ingest: deterministic across workers, crashes and
incremental ingests (adding a crawl later gives the same lake as ingesting it all at once)."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from helpers import NEAR_CONFIG, near_decisions, run_lakecurate

from lakecurate import Lake


@pytest.fixture(scope="module")
def near_cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "lakecurate.toml"
    path.write_text(NEAR_CONFIG)
    return path


@pytest.fixture(scope="module")
def reference(near_lake: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus ingested with ``near_cfg`` on two workers (the session's ``near_lake``,
    copied)."""
    return Path(shutil.copytree(near_lake, tmp_path_factory.mktemp("ref") / "lake"))


def test_near_duplicates_are_found_and_point_at_a_kept_document(reference: Path) -> None:
    lake = Lake.open(reference)
    (n_near,) = lake.sql("SELECT count(*) FROM rejects WHERE reason = 'near_dup'").rows[0]
    assert n_near > 10  # the generator plants ~5% near duplicates
    orphans = lake.sql("""SELECT count(*) FROM rejects r WHERE r.reason = 'near_dup'
                          AND NOT EXISTS (SELECT 1 FROM docs d WHERE d.id = r.dup_of)""")
    assert orphans.rows[0][0] == 0
    # every near duplicate shares its cluster with the kept document it points at
    mismatched = lake.sql("""SELECT count(*) FROM rejects r JOIN docs d ON d.id = r.dup_of
                             WHERE r.reason = 'near_dup' AND r.cluster_id <> d.cluster_id""")
    assert mismatched.rows[0][0] == 0
    funnel = dict(lake.sql("SELECT step, sum(docs_dropped) FROM filter_stats GROUP BY ALL").rows)
    assert funnel["near_dup"] == n_near


def test_one_worker_equals_two(
    reference: Path, corpus: Path, near_cfg: Path, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    assert Lake.open(lake).ingest([corpus], config=near_cfg, workers=1).ok
    assert near_decisions(lake) == near_decisions(reference)


def test_incremental_equals_batch(
    reference: Path, corpus: Path, near_cfg: Path, tmp_path: Path
) -> None:
    lake = Lake.open(tmp_path / "lake")
    for i, path in enumerate(sorted(corpus.iterdir())):  # one crawl after another
        assert lake.ingest([path], config=near_cfg if i == 0 else None).ok
    strip = [r[:1] + r[2:] for r in near_decisions(tmp_path / "lake")]
    assert strip == [r[:1] + r[2:] for r in near_decisions(reference)]


@pytest.mark.parametrize(  # test_crash.py kills during the state update in the default run
    "point",
    [
        "after_delta_commit:kill:web_a_00002",
        pytest.param("during_state_update:kill:web_a_00004", marks=pytest.mark.slow),
        # A new index's rule recorded, its fingerprint not: the next run once refused the
        # lake's own config (link "any" inferred from a fingerprint alone).
        "near_meta:kill",
    ],
)
def test_interrupted_and_resumed_equals_clean(
    point: str, reference: Path, corpus: Path, near_cfg: Path, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    args = ("ingest", corpus, "--lake", lake, "--config", near_cfg)
    killed = run_lakecurate(*args, env={"LAKECURATE_FAULT": point})
    assert killed.returncode == -signal.SIGKILL
    done = run_lakecurate(*args)
    assert done.returncode == 0, done.stderr
    assert near_decisions(lake) == near_decisions(reference)
    lk = Lake.open(lake)
    (n_docs,) = lk.sql("SELECT count(*) FROM minhash_docs").rows[0]
    (n_ref,) = Lake.open(reference).sql("SELECT count(*) FROM minhash_docs").rows[0]
    assert n_docs == n_ref


def test_repair_of_a_lost_state_rebuilds_the_band_index(
    reference: Path, corpus: Path, tmp_path: Path
) -> None:
    import shutil

    lake = tmp_path / "lake"
    shutil.copytree(reference, lake)
    (lake / "state.duckdb").unlink()
    assert Lake.open(lake).verify(repair=True).repaired
    again = Lake.open(lake).ingest([corpus])  # re-hashes (stat cache lost), commits nothing
    assert again.outcome == "NOTHING_TO_DO"
    assert any("near-dedup index" in n for n in again.notes)
    lk, ref = Lake.open(lake), Lake.open(reference)
    q = "SELECT doc_seq, doc_id, cluster_id FROM minhash_docs ORDER BY doc_seq"
    assert lk.sql(q).rows == ref.sql(q).rows
    assert near_decisions(lake) == near_decisions(reference)


def test_decider_processes_equal_the_driver_through_a_kill(
    reference: Path, corpus: Path, tmp_path: Path
) -> None:
    """``[ingest] deciders = 2``: the band index's rows in two decider processes, partitioned
    by hash. The decisions are the driver's own, through a SIGKILL of the whole process group
    (the deciders die with it) and a resume that reads the band files again; no decider
    outlives the session that started it."""
    import multiprocessing

    cfg = tmp_path / "deciders.toml"
    cfg.write_text(NEAR_CONFIG.replace("[ingest]\n", "[ingest]\ndeciders = 2\n"))
    lake = tmp_path / "lake"
    args = ("ingest", corpus, "--lake", lake, "--config", cfg)
    killed = run_lakecurate(*args, env={"LAKECURATE_FAULT": "after_delta_commit:kill:web_a_00003"})
    assert killed.returncode == -signal.SIGKILL
    assert Lake.open(lake).ingest([corpus], config=cfg, workers=2).ok
    assert not [p for p in multiprocessing.active_children() if "decider" in p.name]
    assert near_decisions(lake) == near_decisions(reference)


def test_chunks_whose_documents_were_all_filtered_are_not_indexed_again_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk none of whose documents passed the filters has nothing for the band index: it
    was taken for a chunk the index lacked, and every later session read its rows back and
    hashed them (5,000 such files: minutes before each command). Chunks the index does lack
    (a state rebuilt from the log) are still indexed."""
    from lakecurate.store import recovery

    data = tmp_path / "data"
    data.mkdir()
    for i in range(6):  # two words: the default filters drop every document
        (data / f"f{i}.jsonl").write_text(f'{{"id": "f{i}", "text": "tiny {i}"}}\n')
    sentence = (
        "the river runs past the old stone bridge and the children walk to school in the "
        "morning with their friends while the baker opens his shop near the market square"
    )
    words = sentence.split(" ")
    prose = " ".join(words[(i * 7) % len(words)] for i in range(90)) + "."
    (data / "prose.jsonl").write_text(f'{{"id": "p", "text": "{prose}"}}\n')
    cfg = tmp_path / "near.toml"
    cfg.write_text(
        NEAR_CONFIG.replace("[dedup]", '[filters]\nsteps = ["gopher_quality"]\n\n[dedup]')
    )
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([data], config=cfg).ok
    assert lake.sql("SELECT count(*) FROM docs").rows == [(1,)]  # the prose alone is kept
    read_back: list[int] = []
    bands_of = recovery.bands_of_committed

    def counting(near, rows, seq):  # type: ignore[no-untyped-def]
        read_back.append(seq)
        return bands_of(near, rows, seq)

    monkeypatch.setattr(recovery, "bands_of_committed", counting)
    again = lake.ingest([data])
    assert again.outcome == "NOTHING_TO_DO" and read_back == []
    (lake.root / "state.duckdb").unlink()  # rebuilt from the log: the prose's chunk is lacking
    rebuilt = Lake.open(tmp_path / "lake").ingest([data])
    assert rebuilt.ok and len(read_back) == 1, read_back
