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

from lakecurate import Lake
from lakecurate.errors import LakeError
from lakecurate.read.export import MANIFEST, sha256_of, verify


@pytest.fixture(scope="module")
def lake(
    tmp_path_factory: pytest.TempPathFactory, corpus: Path, first_part: tuple[Path, Path]
) -> Lake:
    """Two ingests: books + forum (the session's ``first_part``, copied), then everything (a
    later version with more documents)."""
    lake = Lake.open(shutil.copytree(first_part[1], tmp_path_factory.mktemp("export") / "lake"))
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
    old = lake.history().rows[0][0]  # a version from the first ingest
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
        [MANIFEST, *(f["path"] for f in data["files"])]
    )  # no temp file left


def test_export_is_reproducible_and_checked(lake: Lake, tmp_path: Path) -> None:
    latest = lake.history().rows[-1][0]
    a = lake.export(latest, tmp_path / "a", fmt="jsonl.gz", shard_size=64 * 1024)
    b = lake.export(None, tmp_path / "b", fmt="jsonl.gz", shard_size=64 * 1024)
    assert [f.sha256 for f in a.files] == [f.sha256 for f in b.files]
    assert Counter(
        (r["id"], r["content_hash"]) for r in _shard_rows(tmp_path / "a", "jsonl.gz")
    ) == _docs_at(lake, latest)
    # a damaged shard is caught
    shard = tmp_path / "a" / a.files[0].path
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert verify(tmp_path / "a") == [f"{a.files[0].path}: sha256 differs from the manifest"]


def test_export_refuses_a_foreign_folder_and_restarts_an_interrupted_one(
    lake: Lake, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(LakeError, match="is not empty"):
        lake.export(None, foreign)
    done = tmp_path / "done"
    lake.export(None, done)
    with pytest.raises(LakeError, match="is not empty"):
        lake.export(None, done)  # a finished export is never overwritten
    # a real interrupted export: killed after its second shard, no manifest
    interrupted = tmp_path / "interrupted"
    proc = run_cli(
        "export",
        interrupted,
        "--lake",
        lake.root,
        "--shard-size",
        "16KiB",
        env={"LAKECURATE_FAULT": "export_shard:kill:part-00001"},
    )
    assert proc.returncode == -9, proc.stderr
    left = sorted(p.name for p in interrupted.iterdir())
    assert "part-00001.parquet" in left and MANIFEST not in left
    manifest = lake.export(None, interrupted)  # started again: only its own files go
    assert verify(interrupted) == []
    assert sorted(p.name for p in interrupted.iterdir()) == sorted(
        [MANIFEST, *(f.path for f in manifest.files)]
    )
    # the same, with a file someone else put there: nothing is touched
    again = tmp_path / "again"
    proc = run_cli(
        "export",
        again,
        "--lake",
        lake.root,
        "--shard-size",
        "16KiB",
        env={"LAKECURATE_FAULT": "export_shard:kill:part-00001"},
    )
    assert proc.returncode == -9, proc.stderr
    (again / "part-00009.parquet").write_bytes(b"not lakecurate's")
    before = _files(again)
    with pytest.raises(LakeError, match="files it did not write"):
        lake.export(None, again)
    assert _files(again) == before


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_export_never_deletes_files_it_did_not_write(lake: Lake, tmp_path: Path) -> None:
    # D5: a Spark output folder (part-* files, .crc side files, no _SUCCESS) is not an
    # interrupted export of ours, whatever its file names look like.
    spark = tmp_path / "spark"
    spark.mkdir()
    for name in (
        "part-00000-3f2a9c.snappy.parquet",
        ".part-00000-3f2a9c.snappy.parquet.crc",
        "part-00001.parquet",
        ".part-00002.parquet.tmp_1",
    ):
        (spark / name).write_bytes(name.encode() * 10)
    before = _files(spark)
    with pytest.raises(LakeError, match="not an interrupted lakecurate export"):
        lake.export(None, spark)
    assert _files(spark) == before


def test_export_into_the_lake_is_refused(lake: Lake, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    # D5: `export OUT` with OUT the lake's own kept=true partition deleted every data file.
    kept = lake.root / "documents" / "kept=true"
    before = _files(lake.root / "documents")
    docs = lake.sql("SELECT count(*) FROM docs").rows
    proc = run_cli("export", kept, "--lake", lake.root, "--version", "1")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "inside the lake" in proc.stderr, proc.stderr
    for out in (lake.root / "exports", lake.root):
        with pytest.raises(LakeError, match="inside the lake"):
            lake.export(None, out)
    assert not (lake.root / "exports").exists()
    assert _files(lake.root / "documents") == before
    assert lake.sql("SELECT count(*) FROM docs").rows == docs
    link = tmp_path / "link"
    link.symlink_to(kept)  # a way in through a symlink is the same folder
    with pytest.raises(LakeError, match="inside the lake"):
        lake.export(None, link)
    assert _files(lake.root / "documents") == before


def test_jsonl_gz_is_byte_identical_across_processes(lake: Lake, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    # D17: the gzip header held the temp file's name, with the pid of the exporting process.
    shas = []
    for name in ("a", "b"):
        proc = run_cli(
            "export",
            tmp_path / name,
            "--lake",
            lake.root,
            "--version",
            "1",
            "--format",
            "jsonl.gz",
            "--shard-size",
            "32KiB",
        )
        assert proc.returncode == 0, proc.stderr
        files = json.loads((tmp_path / name / MANIFEST).read_text())["files"]
        shas.append([f["sha256"] for f in files])
        for f in files:
            head = (tmp_path / name / f["path"]).read_bytes()[:10]
            assert head[3] & 0x08 == 0  # no file name
            assert head[4:8] == b"\0\0\0\0"  # no time
    assert shas[0] == shas[1] and len(shas[0]) > 1


def test_export_cli(lake: Lake, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "cli"
    proc = run_cli(
        "export",
        out,
        "--lake",
        lake.root,
        "--version",
        "1",
        "--format",
        "jsonl",
        "--shard-size",
        "32KiB",
    )
    assert proc.returncode == 0, proc.stderr
    assert "exported version 1" in proc.stdout and verify(out) == []
    proc = run_cli("export", tmp_path / "x", "--lake", lake.root, "--version", "999")
    assert proc.returncode == 1 and "version 999 does not exist" in proc.stderr
