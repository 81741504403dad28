"""kill -9 of a real ``lakecurate ingest`` process at the dangerous moments, then a plain re-run:
the lake must equal one from an uninterrupted run, with nothing duplicated or left behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from helpers import (
    ROOT,
    cli_env,
    kill_then_finish,
    lake_rows,
    lakecurate_cmd,
    log_chunk_versions,
    run_lakecurate,
)

from lakecurate import Lake
from lakecurate.lake.record import CommitRecord


def ingest_args(corpus: Path, lake: Path, small_cfg: Path) -> tuple[object, ...]:
    return ("ingest", corpus, "--lake", lake, "--config", small_cfg, "--workers", "2")


def assert_consistent(lake: Path, small_reference: list) -> None:  # type: ignore[type-arg]
    """The invariants every lake must satisfy after any crash and a completed re-run."""
    assert lake_rows(lake) == small_reference
    leftovers = [p for p in lake.rglob("*") if ".tmp" in p.name]
    assert leftovers == []
    assert list((lake / "staging").iterdir()) == []
    dt = DeltaTable(str(lake / "documents"))
    for uri in dt.file_uris():  # every file the log names exists and is readable
        pq.read_table(uri)
    referenced = {os.path.normpath(u) for u in dt.file_uris()}
    on_disk = {os.path.normpath(str(p)) for p in (lake / "documents").rglob("*.parquet")}
    assert on_disk == referenced  # no orphan data file from an interrupted write
    lk = Lake.open(lake)
    committed, twice = log_chunk_versions(dt)
    assert twice == []
    success = dict(
        lk.sql("SELECT chunk_key, delta_version FROM chunks WHERE status = 'SUCCESS'").rows
    )
    assert success == committed  # DuckDB and the Delta log agree, version for version
    assert lk.sql("SELECT count(*) FROM commits WHERE status <> 'DONE'").rows[0][0] == 0
    assert dt.transaction_version("lakecurate") == lk.sql("SELECT max(seq) FROM commits").rows[0][0]
    assert lk.sql("SELECT DISTINCT status FROM chunks").rows == [("SUCCESS",)]
    (n_hashes, n_docs) = lk.sql(
        "SELECT (SELECT count(*) FROM content_hashes), (SELECT count(*) FROM docs)"
    ).rows[0]
    assert n_hashes == n_docs


POINTS = [
    "plan:kill:web_a.jsonl",  # a worker cutting an input, other chunks maybe running
    pytest.param(  # while workers run; the default run kills a running worker's chunk in
        # test_compressed_chunks.py (and at random moments in test_chaos_fast.py)
        "worker:kill:web_a_00002",
        marks=pytest.mark.slow,
    ),
    "staged_write:kill:web_a_00003",  # a staged file half-written (temp file present)
    "before_delta_commit:kill:web_a_00001",  # intent recorded, Delta not yet written
    pytest.param(  # between the Delta commit and the state update; the default run has the
        # same test at this point in a later group (GROUP_POINTS), and the near-dedup and S3 ones
        "after_delta_commit:kill:web_a_00002",
        marks=pytest.mark.slow,
    ),
    "during_state_update:kill:web_a_00004",  # inside the state transaction
    pytest.param(  # a later file, after several commits (the same point as web_a_00002)
        "after_delta_commit:kill:forum", marks=pytest.mark.slow
    ),
]


@pytest.fixture
def group_cfg(small_cfg: Path, tmp_path: Path) -> Path:
    """``small_cfg`` with Delta commits of three chunks: a kill leaves groups on either side."""
    cfg = tmp_path / "groups.toml"
    cfg.write_text(small_cfg.read_text().replace("[ingest]\n", "[ingest]\ncommit_chunks = 3\n"))
    return cfg


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_point_then_rerun(
    point: str,
    corpus: Path,
    group_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    kill_then_finish(ingest_args(corpus, lake, group_cfg), point, lake, small_reference)
    # the interrupted run is on record as killed; the re-run as OK
    outcomes = [
        r[0] for r in Lake.open(lake).sql("SELECT outcome FROM runs ORDER BY started_at").rows
    ]
    assert outcomes == ["KILLED", "OK"]


def test_a_kill_between_key_files_and_their_transaction_leaves_nothing(
    corpus: Path,
    group_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """A batch's key files placed, its transaction not committed: no commit names them, the
    re-run sweeps them, and `verify` finds nothing left over."""
    lake = tmp_path / "lake"
    point = "key_file_written:kill:ids-"
    kill_then_finish(ingest_args(corpus, lake, group_cfg), point, lake, small_reference)
    assert Lake.open(lake).verify().ok


@pytest.mark.slow  # the default run kills at random in test_chaos_fast (the same checks and more)
def test_random_kills_until_done(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """SIGKILL the whole ingest at random moments, resuming each time with the same command."""
    rng = random.Random(20261202)
    lake = tmp_path / "lake"
    args = ingest_args(corpus, lake, small_cfg)
    kills = 0
    for _ in range(12):
        proc = subprocess.Popen(  # bytes: killed at random, its output may end mid-character
            lakecurate_cmd(*args),
            env=cli_env(),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        time.sleep(rng.uniform(0.3, 2.5))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.communicate(timeout=60)
        if proc.returncode == 0:
            break
    else:
        assert run_lakecurate(*args).returncode == 0
    assert kills >= 1
    final = run_lakecurate(*args)
    assert "nothing to do" in final.stdout
    assert_consistent(lake, small_reference)


def _damage_staged(path: Path, how: str) -> None:
    """A staged file hurt after its worker wrote it: torn, one byte flipped, or rewritten as a
    valid Parquet file with one document changed and every key-value of the original kept."""
    import pyarrow as pa

    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "bit-flipped":
        flipped = bytearray(data)
        flipped[len(data) // 3] ^= 0x04
        path.write_bytes(bytes(flipped))
    else:
        table = pq.read_table(path)
        raw = pq.read_metadata(path).metadata or {}
        texts = table["text"].to_pylist()
        first = next(i for i, t in enumerate(texts) if t)
        texts[first] = "tampered " + texts[first]
        table = table.set_column(
            table.schema.get_field_index("text"),
            "text",
            pa.array(texts, table.schema.field("text").type),
        )
        with pq.ParquetWriter(path, table.schema, compression="zstd") as writer:
            writer.write_table(table)
            writer.add_key_value_metadata(
                {
                    k: v
                    for k, v in raw.items()
                    if k not in table.schema.metadata and k != b"ARROW:schema"
                }
            )


@pytest.mark.parametrize(  # the default run keeps "bit-flipped"; `-m slow` runs the others
    "how",
    [
        pytest.param("truncated", marks=pytest.mark.slow),
        "bit-flipped",
        pytest.param("rewritten", marks=pytest.mark.slow),
    ],
)
def test_damaged_staged_file_is_redone_not_committed(
    how: str,
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """D20: a staged file damaged between the kill and the resume fails its checksum, is deleted
    and its chunk is processed again; the lake equals an uninterrupted run's."""
    lake = tmp_path / "lake"
    args = ingest_args(corpus, lake, small_cfg)
    killed = run_lakecurate(*args, env={"LAKECURATE_FAULT": "before_delta_commit:kill:web_a_00001"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    staged = sorted((lake / "staging").glob("*.parquet"))
    assert staged, "the kill left no staged file to damage"
    for path in staged:
        _damage_staged(path, how)
    done = run_lakecurate(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_consistent(lake, small_reference)
    # lake_rows leaves the text out: every text must still be the one its hash was made from
    assert Lake.open(lake).sql(
        "SELECT count(*) FROM documents WHERE text LIKE 'tampered%' OR md5(text) <> content_hash"
    ).rows == [(0,)]


GROUP_POINTS = [
    "index_ahead:kill:web_a_00004",  # a chunk decided, its index rows written ahead
    "after_delta_commit:kill:web_a_00004",  # the group in the log, its state not updated
    pytest.param("before_delta_commit:kill:web_a_00004", marks=pytest.mark.slow),
    pytest.param("delta_write:kill:web_a_00004", marks=pytest.mark.slow),
    pytest.param("during_state_update:kill:web_a_00004", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("point", GROUP_POINTS)
def test_kill_inside_a_group_then_rerun(
    point: str,
    corpus: Path,
    group_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """Groups of three chunks, killed in the middle of a later group: the groups already in
    the log stay as they are, the interrupted one is finished or redone, and the lake equals
    a clean run (made with the default grouping)."""
    lake = tmp_path / "lake"
    before = kill_then_finish(ingest_args(corpus, lake, group_cfg), point, lake, small_reference)
    assert len(before) >= 3  # at least one earlier group was committed before the kill
    sizes = [
        len(CommitRecord.parse(e).chunks) for e in DeltaTable(str(lake / "documents")).history()
    ]
    assert max(sizes) <= 3


def test_grouping_changes_no_decision(
    corpus: Path,
    small_cfg: Path,
    small_reference: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """One commit per chunk (``commit_seconds = 0``) and one per two chunks give the lake a
    default run gives, in as many Delta commits as the grouping says."""
    for extra, per_commit in (
        ("commit_seconds = 0\n", 1),
        ("commit_chunks = 2\ncommit_seconds = 1000\n", 2),
    ):
        cfg = tmp_path / f"{per_commit}.toml"
        cfg.write_text(small_cfg.read_text().replace("[ingest]\n", f"[ingest]\n{extra}"))
        lake = tmp_path / f"lake{per_commit}"
        report = Lake.open(lake).ingest([corpus], config=cfg, workers=2)
        assert report.ok
        assert lake_rows(lake) == small_reference
        history = DeltaTable(str(lake / "documents")).history()
        assert len(history) == -(-report.chunks_committed // per_commit)
        assert {len(CommitRecord.parse(e).chunks) for e in history} <= {1, per_commit}
