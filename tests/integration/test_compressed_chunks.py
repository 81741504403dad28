"""A compressed input larger than ``chunk_size`` is several chunks (issue 14, item 5): cut where
its text would be cut uncompressed, decided exactly as that text, and a kill inside it costs only
the chunks in flight."""

from __future__ import annotations

import gzip
import shutil
import signal
from pathlib import Path

import pytest
import zstandard
from helpers import SMALL_CONFIG, assert_lake_consistent, lake_rows, run_lakecurate

from lakecurate import Lake
from lakecurate.ingest.scheduler import QUICK_TASKS


def _compress(name: str, raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0) if name.endswith(".gz") else zstandard.compress(raw)


def _as_text(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """``lake_rows`` without what names the file (chunk key hex, derived ids): chunk index,
    line, content hash, kept, reason."""
    return [(str(r[0]).split("_")[-2], r[1], r[3], r[4], r[5]) for r in rows]


@pytest.fixture(scope="module")
def plain(
    corpus: Path, small_cfg: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[object, ...]]:
    """``lake_rows`` of web_a.jsonl as it is, ingested once for both compressions."""
    folder = tmp_path_factory.mktemp("plain")
    (folder / "plain").mkdir()
    shutil.copy(corpus / "web_a.jsonl", folder / "plain" / "web_a.jsonl")
    lake = folder / "lake-plain"
    assert Lake.open(lake).ingest([folder / "plain"], config=small_cfg, workers=2).ok
    return lake_rows(lake)


@pytest.mark.parametrize("name", ["web_a.jsonl.gz", "web_a.jsonl.zst"])
def test_a_large_compressed_file_is_decided_as_its_text(
    corpus: Path,
    config_file: Path,
    tmp_path: Path,
    name: str,
    plain: list[tuple[object, ...]],
) -> None:
    raw = (corpus / "web_a.jsonl").read_bytes()
    (tmp_path / "packed").mkdir()
    (tmp_path / "packed" / name).write_bytes(_compress(name, raw))
    lake = tmp_path / "lake-packed"
    assert Lake.open(lake).ingest([tmp_path / "packed"], config=config_file, workers=2).ok
    packed = lake_rows(lake)
    assert len({r[0] for r in packed}) == len(raw) // (64 << 10) + 1 > 4  # 64 KiB chunks
    assert _as_text(packed) == _as_text(plain)
    keys = Lake.open(lake).sql("SELECT count(*) FROM chunks WHERE byte_end > 0")
    assert keys.rows == [(len({r[0] for r in packed}),)]


def test_a_kill_inside_a_compressed_file_redoes_only_the_chunks_in_flight(
    corpus: Path, tmp_path: Path
) -> None:
    raw = (corpus / "web_a.jsonl").read_bytes() * 2
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "web_a.jsonl.gz").write_bytes(gzip.compress(raw, mtime=0))
    cfg = tmp_path / "c.toml"
    # one chunk a task: the chunks are small, and a bundle of them is lost whole
    cfg.write_text(
        SMALL_CONFIG.replace("[ingest]\n", "[ingest]\ncommit_chunks = 2\nbundle_bytes = 0\n")
    )
    reference = tmp_path / "reference"
    assert Lake.open(reference).ingest([tmp_path / "in"], config=cfg, workers=2).ok

    lake = tmp_path / "lake"
    args = ("ingest", tmp_path / "in", "--lake", lake, "--config", cfg, "--workers", "2")
    killed = run_lakecurate(*args, env={"LAKECURATE_FAULT": "worker:kill:web_a_00008"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    success = Lake.open(lake).sql("SELECT chunk_key FROM chunks WHERE status = 'SUCCESS'")
    staged = [p for p in (lake / "staging").iterdir() if ".tmp" not in p.name]
    kept = {k for (k,) in success.rows} | {p.name.split(".")[0] for p in staged}
    assert len(kept) >= 6  # the chunks before the kill are kept
    done = run_lakecurate(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_lake_consistent(lake, lake_rows(reference))
    dispatches = dict(
        Lake.open(lake)
        .sql(
            "SELECT chunk_key, count(*) FROM chunk_events "
            "WHERE message = 'dispatched to a worker' GROUP BY ALL"
        )
        .rows
    )
    dispatched_twice = {k for k, n in dispatches.items() if n > 1}
    # only chunks submitted at the kill are dispatched again (two per worker, more while
    # chunks are quick: scheduler.QUICK_TASKS); nothing committed or staged before it is
    assert not dispatched_twice & kept, sorted(dispatched_twice & kept)
    assert any("_00008_" in k for k in dispatched_twice)
    assert len(dispatched_twice) <= QUICK_TASKS * 2
    assert len(dispatches) >= 12
    # an attempt counts when a worker begins the chunk: only those the two workers were on
    # when the kill came can have used two
    attempts = dict(Lake.open(lake).sql("SELECT chunk_key, attempts FROM chunks").rows)
    begun_twice = {k for k, n in attempts.items() if n > 1}
    assert begun_twice <= dispatched_twice and len(begun_twice) <= 2, attempts
    assert all(attempts[k] >= 1 for k in dispatches)
