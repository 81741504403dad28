"""`export --version N OUT`: the shards hold exactly the kept documents of version N (as a
multiset of (id, content_hash)), the manifest's checksums verify, the same version always gives
the same bytes, and an interrupted export is started again rather than mixed with a new one."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import SMALL_CONFIG

from lakecurate import Lake
from lakecurate.errors import LakeError
from lakecurate.export import MANIFEST, sha256_of, verify


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Lake:
    """Two ingests: books + forum, then everything (a later version with more documents)."""
    root = tmp_path_factory.mktemp("export")
    first = root / "first"
    first.mkdir()
    for name in ("books.parquet", "forum.jsonl.zst"):
        shutil.copy(corpus / name, first / name)
    (root / "lakecurate.toml").write_text(SMALL_CONFIG, encoding="utf-8")
    lake = Lake.open(root / "lake")
    assert lake.ingest([first], config=root / "lakecurate.toml").ok
    assert lake.ingest([corpus]).ok
    return lake


def _docs_at(lake: Lake, version: int) -> Counter[tuple[str, str]]:
    return Counter(lake.at(version=version).sql("SELECT id, content_hash FROM docs").rows)


def _shard_rows(out: Path, fmt: str) -> list[dict[str, object]]:
    manifest = json.loads((out / MANIFEST).read_text())
    rows: list[dict[str, object]] = []
    for f in manifest["files"]:
        path = out / f["path"]
        if fmt == "parquet":
            part = pq.read_table(path).to_pylist()
        else:
            raw = gzip.decompress(path.read_bytes()) if fmt == "jsonl.gz" else path.read_bytes()
            part = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
        assert len(part) == f["rows"]
        rows += part
    return rows


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "jsonl.gz"])
def test_export_of_version_n_is_docs_at_n(lake: Lake, tmp_path: Path, fmt: str) -> None:
    old = lake.history().rows[2][0]  # a version from the first ingest
    out = tmp_path / "out"
    manifest = lake.export(old, out, fmt=fmt, shard_size=16 * 1024)
    assert len(manifest.files) > 1  # small shards: several of them
    rows = _shard_rows(out, fmt)
    assert Counter((r["id"], r["content_hash"]) for r in rows) == _docs_at(lake, old)
    assert manifest.rows == len(rows) == sum(_docs_at(lake, old).values())
    # input order, so the same version always gives the same shards
    keys = [(r["chunk_key"], r["source_line"]) for r in rows]
    assert keys == sorted(keys)
    assert verify(out) == []
    data = json.loads((out / MANIFEST).read_text())
    assert data["version"] == old and data["format"] == fmt
    assert data["config_hashes"] == [lake.config().hash]
    for f in data["files"]:
        assert sha256_of(out / f["path"]) == f["sha256"]
        assert (out / f["path"]).stat().st_size == f["bytes"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MANIFEST, *(f["path"] for f in data["files"])])  # no temp file left


def test_export_is_reproducible_and_checked(lake: Lake, tmp_path: Path) -> None:
    latest = lake.history().rows[-1][0]
    a = lake.export(latest, tmp_path / "a", fmt="jsonl.gz", shard_size=64 * 1024)
    b = lake.export(None, tmp_path / "b", fmt="jsonl.gz", shard_size=64 * 1024)
    assert [f.sha256 for f in a.files] == [f.sha256 for f in b.files]
    assert Counter((r["id"], r["content_hash"]) for r in _shard_rows(tmp_path / "a", "jsonl.gz")
                   ) == _docs_at(lake, latest)
    # a damaged shard is caught
    shard = tmp_path / "a" / a.files[0].path
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert verify(tmp_path / "a") == [f"{a.files[0].path}: sha256 differs from the manifest"]


def test_export_refuses_a_foreign_folder_and_restarts_an_interrupted_one(
        lake: Lake, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(LakeError, match="is not empty"):
        lake.export(None, foreign)
    done = tmp_path / "done"
    lake.export(None, done)
    with pytest.raises(LakeError, match="is not empty"):
        lake.export(None, done)  # a finished export is never overwritten
    # an interrupted export: shards and a temp file, no manifest
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    (interrupted / "part-00000.parquet").write_bytes(b"half")
    (interrupted / ".part-00001.parquet.tmp_1").write_bytes(b"partial")
    manifest = lake.export(None, interrupted)
    assert verify(interrupted) == []
    assert sorted(p.name for p in interrupted.iterdir()) == sorted(
        [MANIFEST, *(f.path for f in manifest.files)])


def test_export_cli(lake: Lake, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "cli"
    proc = run_cli("export", out, "--lake", lake.root, "--version", "1", "--format", "jsonl",
                   "--shard-size", "32KiB")
    assert proc.returncode == 0, proc.stderr
    assert "exported version 1" in proc.stdout and verify(out) == []
    proc = run_cli("export", tmp_path / "x", "--lake", lake.root, "--version", "999")
    assert proc.returncode == 1 and "version 999 does not exist" in proc.stderr
