"""Shared fixtures: a generated dirty corpus, a small-chunk config, and a way to run the CLI as a
real process (the crash tests kill it with SIGKILL)."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import (
    NEAR_CONFIG,
    SMALL_CONFIG,
    TEST_DEFAULT_PRESET,
    lake_rows,
    load_generator,
    run_lakecurate,
)
from s3server import S3Server, running_s3, use

import lakecurate
from lakecurate.config import PRESET_ENV

os.environ[PRESET_ENV] = TEST_DEFAULT_PRESET  # see helpers.TEST_DEFAULT_PRESET
# Every ingest spawns worker (and decider) processes that import lakecurate again. With
# PYTHONDONTWRITEBYTECODE set (as on the development machine) nothing writes its bytecode, so
# each of them compiled the package from source: about 0.3 s of CPU per ingest, hundreds of
# ingests. Compiled once here, they all read it.
compileall.compile_dir(Path(lakecurate.__file__).parent, quiet=1)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example generator's corpus at a third of its size (several chunks per big file)."""
    out = tmp_path_factory.mktemp("corpus")
    load_generator().generate(out, seed=7, scale=0.3)
    return out


@pytest.fixture(scope="session")
def small_cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small-chunk config, shared by the tests that compare with ``small_reference``."""
    path = tmp_path_factory.mktemp("small-cfg") / "lakecurate.toml"
    path.write_text(SMALL_CONFIG, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def small_lake(corpus: Path, small_cfg: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted ingest of ``corpus`` with ``small_cfg`` (two workers), made once per
    session. Never written to: a test that needs such a lake of its own copies it
    (``shutil.copytree``: the same files, as a new ingest would write them)."""
    from lakecurate import Lake

    lake = tmp_path_factory.mktemp("small-ref") / "lake"
    assert Lake.open(lake).ingest([corpus], config=small_cfg, workers=2).ok
    return lake


@pytest.fixture(scope="session")
def near_lake(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ingest of ``corpus`` with ``NEAR_CONFIG`` (two workers; near dedup with the default
    rule, link = "kept"), made once per session. Never written to: copy it to start from it."""
    from lakecurate import Lake

    folder = tmp_path_factory.mktemp("near-ref")
    (folder / "lakecurate.toml").write_text(NEAR_CONFIG, encoding="utf-8")
    lake = folder / "lake"
    assert Lake.open(lake).ingest([corpus], config=folder / "lakecurate.toml", workers=2).ok
    return lake


@pytest.fixture(scope="session")
def first_part(
    corpus: Path, small_cfg: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """(folder, lake): the corpus's books.parquet and forum.jsonl.zst in a folder of their own,
    and that folder ingested with ``small_cfg``, once per session. Neither is ever written to:
    copy the lake to start from it (its inputs stay where they are)."""
    from lakecurate import Lake

    root = tmp_path_factory.mktemp("first-part")
    folder = root / "first"
    folder.mkdir()
    for name in ("books.parquet", "forum.jsonl.zst"):
        shutil.copy(corpus / name, folder / name)
    assert Lake.open(root / "lake").ingest([folder], config=small_cfg).ok
    return folder, root / "lake"


@pytest.fixture(scope="session")
def small_reference(small_lake: Path) -> list[tuple[object, ...]]:
    """``lake_rows`` of ``small_lake``: what every crashed, full-disk or broken-worker run must
    end up equal to."""
    return lake_rows(small_lake)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """A lakecurate.toml with 64 KiB chunks and fast retries."""
    path = tmp_path / "lakecurate.toml"
    path.write_text(SMALL_CONFIG, encoding="utf-8")
    return path


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m lakecurate ARGS`` as a real process; returns the completed process
    (``helpers.run_lakecurate``)."""
    return run_lakecurate


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One loopback S3 server for the session (tests/s3server.py)."""
    with running_s3() as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Server:
    """The S3 server, with this test's environment pointed at it and the state folders of
    its object-store lakes under its own tmp_path."""
    use(s3_server, monkeypatch)
    monkeypatch.setenv("LAKECURATE_STATE_DIR", str(tmp_path / "state"))
    return s3_server
