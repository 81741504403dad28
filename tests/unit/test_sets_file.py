"""The sets file (issue 14): a worker's near-dedup sets apart from its staged file, read by the
driver by row only, put in place as a commit's signature file without the driver reading it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lakecurate.errors import LakeError
from lakecurate.ingest import staging
from lakecurate.lake import sets
from lakecurate.lake.storage import Location
from lakecurate.schema import BANDS_COLUMN, SIGNATURE_COLUMN
from lakecurate.steps.near.signatures import split_sets
from lakecurate.store.signatures import ChunkSets, SignatureFiles

LIST = pa.list_(pa.uint32())


def chunk(lines: list[int], lists: list[list[int] | None]) -> pa.Table:
    return pa.table(
        {"source_line": pa.array(lines, pa.int64()), SIGNATURE_COLUMN: pa.array(lists, LIST)}
    )


def test_split_sets_keeps_the_signed_rows_by_rank_without_copying_in_line_order() -> None:
    rows = chunk([1, 2, 5, 9], [[3, 4], None, [], [7]])
    rest, found = split_sets(rows)
    assert rest.column_names == ["source_line"]
    assert found["row"].to_pylist() == [0, 2, 3]
    assert found["signature"].to_pylist() == [[3, 4], [], [7]]
    original = rows[SIGNATURE_COLUMN].chunk(0).values.buffers()[1]
    assert found["signature"].chunk(0).values.buffers()[1].address == original.address


def test_split_sets_ranks_rows_out_of_line_order() -> None:
    """A row's key is its rank in line order (the order the driver decides the chunk in), not
    its place in the staged file."""
    rows = chunk([9, 1, 5, 2], [[1], [2], None, [4]])
    _, found = split_sets(rows)
    assert found["row"].to_pylist() == [0, 1, 3]
    assert found["signature"].to_pylist() == [[2], [4], [1]]


def write_sets(path: Path, rows: list[int], lists: list[list[int]]) -> str:
    table = pa.table({"row": pa.array(rows, pa.int64()), "signature": pa.array(lists, LIST)})
    return sets.write(table, Location(str(path)))


def test_a_sets_file_becomes_the_commit_signature_file_by_hard_link(tmp_path: Path) -> None:
    src = tmp_path / "staging" / "c.h.sets.arrow"
    write_sets(src, [0, 3], [[1, 2], [5]])
    files = SignatureFiles(tmp_path / "signatures")
    chunk_sets = ChunkSets.of_file(7, Location(str(src)))
    assert chunk_sets.rows().tolist() == [0, 3]
    assert chunk_sets.read([7 << 32 | 3])["signature"].to_pylist() == [[5]]
    chunk_sets.store(files)
    placed = tmp_path / "signatures" / "7.arrow"
    assert os.stat(placed).st_ino == os.stat(src).st_ino  # the same bytes, not read or copied
    src.unlink()  # the staged files go after the commit: the signature file stays
    got = files.read([7 << 32 | 0, 7 << 32 | 3])
    assert got["doc_seq"].to_pylist() == [7 << 32, 7 << 32 | 3]
    assert got["signature"].to_pylist() == [[1, 2], [5]]
    assert sorted(files.doc_seqs().tolist()) == [7 << 32, 7 << 32 | 3]
    with pytest.raises(LakeError, match="lacks signatures"):
        files.read([7 << 32 | 1])


def test_a_rewritten_sets_file_leaves_the_placed_one_alone(tmp_path: Path) -> None:
    """A worker redoing a chunk writes a new file (temp + rename): a commit's signature file
    linked to the old one keeps the old bytes."""
    src = tmp_path / "c.sets.arrow"
    write_sets(src, [0], [[1]])
    files = SignatureFiles(tmp_path / "signatures")
    ChunkSets.of_file(2, Location(str(src))).store(files)
    write_sets(src, [0], [[9, 9]])
    assert files.read([2 << 32])["signature"].to_pylist() == [[1]]


def test_signature_files_of_the_layout_before_are_read(tmp_path: Path) -> None:
    """Files written before sets files hold ``doc_seq`` instead of ``row``."""
    folder = tmp_path / "signatures"
    folder.mkdir()
    old = pa.table(
        {
            "doc_seq": pa.array([5 << 32 | 1, 5 << 32 | 4], pa.int64()),
            "signature": pa.array([[1], [2]], LIST),
        }
    )
    with (
        pa.OSFile(str(folder / "5.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, old.schema) as writer,
    ):
        writer.write_table(old)
    files = SignatureFiles(folder)
    assert files.read([5 << 32 | 4])["signature"].to_pylist() == [[2]]
    files.write(pa.table({"doc_seq": pa.array([6 << 32 | 2], pa.int64()), "signature": [[3]]}))
    assert sorted(files.doc_seqs().tolist()) == [5 << 32 | 1, 5 << 32 | 4, 6 << 32 | 2]


U64 = pa.list_(pa.uint64())


def staged_pair(tmp_path: Path) -> tuple[Location, dict[str, Path]]:
    """A staged file of three rows (out of line order) with its sets and bands files."""
    path = Location(str(tmp_path / "k.h.parquet"))
    side = {"sets": tmp_path / "k.h.sets.arrow", "bands": tmp_path / "k.h.bands.arrow"}
    digest = write_sets(side["sets"], [0], [[1, 2, 3]])
    bands = pa.table(
        {"row": pa.array([0, 2], pa.int64()), "bands": pa.array([[10, 11], [30, 31]], U64)}
    )
    bands_digest = sets.write(bands, Location(str(side["bands"])))
    result = {
        "chunk_key": "k",
        "staged_path": path.uri,
        "input_sha256": "x",
        "config_hash": "h",
        "rows_in": 3,
        "rows_kept": 3,
        "rows_dropped": 0,
        "rows_malformed": 0,
        "blank_lines": 0,
        "filter_stats": [],
        "worker": "w",
    }
    meta = {
        staging.RESULT_KEY: json.dumps(result).encode(),
        staging.SETS_KEY: digest.encode(),
        staging.BANDS_KEY: bands_digest.encode(),
    }
    rows = pa.table({"source_line": pa.array([7, 1, 4], pa.int64())})
    staging.write_atomic_parquet(rows.replace_schema_metadata(meta), path)
    return path, side


@pytest.mark.parametrize("kind", ["sets", "bands"])
def test_a_staged_file_is_reused_only_with_its_side_files_intact(tmp_path: Path, kind: str) -> None:
    path, side = staged_pair(tmp_path)
    assert staging.read_staged_result(path) is not None
    with open(side[kind], "r+b") as f:  # another file than the one the staged file sealed
        f.seek(-9, os.SEEK_END)
        f.write(b"x")
    assert staging.read_staged_result(path) is None
    assert not Path(path.uri).exists()  # discarded: the chunk is redone


@pytest.mark.parametrize("kind", ["sets", "bands"])
def test_a_staged_file_without_a_side_file_is_redone(tmp_path: Path, kind: str) -> None:
    path, side = staged_pair(tmp_path)
    side[kind].unlink()
    assert staging.read_staged_result(path) is None


def test_delete_staged_removes_all_three(tmp_path: Path) -> None:
    path, side = staged_pair(tmp_path)
    staging.delete_staged(path.uri)
    assert not Path(path.uri).exists() and not any(p.exists() for p in side.values())


def test_the_driver_reads_the_bands_file_as_the_band_column_of_the_staged_rows(
    tmp_path: Path,
) -> None:
    """The bands file is keyed by rank in line order; the staged rows are in another order."""
    path, side = staged_pair(tmp_path)
    keys, bands_file = staging.read_keys(path.uri)
    assert bands_file is not None and bands_file.path.uri == str(side["bands"])
    # Lines 7, 1, 4 are ranks 2, 0, 1: rank 0 (line 1) and rank 2 (line 7) have bands.
    assert keys[BANDS_COLUMN].to_pylist() == [[30, 31], [10, 11], None]
    assert keys[staging.ROW].to_pylist() == [0, 1, 2]


def test_chunk_sets_in_memory_match_those_of_a_file(tmp_path: Path) -> None:
    doc_seq = (np.int64(3) << np.int64(32)) | np.array([0, 1, 2], dtype=np.int64)
    docs = pa.table({"doc_seq": doc_seq, "signature": pa.array([[1], None, [4, 5]], LIST)})
    memory = ChunkSets.of_docs(3, docs)
    src = tmp_path / "s.arrow"
    write_sets(src, [0, 2], [[1], [4, 5]])
    from_file = ChunkSets.of_file(3, Location(str(src)))
    assert memory.rows().tolist() == from_file.rows().tolist() == [0, 2]
    assert memory.read(doc_seq[[2]]).equals(from_file.read(doc_seq[[2]]))


def test_take_reads_the_rows_asked_for_by_runs(tmp_path: Path) -> None:
    """Rows read one run of touching lists at a time equal the file's own rows, for any
    subset (adjacent rows, gaps, empty lists, the first and the last)."""
    rng = np.random.default_rng(3)
    lists = [
        rng.integers(0, 2**32, rng.integers(0, 6), dtype=np.uint32).tolist() for _ in range(300)
    ]
    write_sets(tmp_path / "s.arrow", list(range(300)), lists)
    file = sets.SetsFile(Location(str(tmp_path / "s.arrow")))
    for _ in range(20):
        at = np.unique(rng.integers(0, 300, rng.integers(1, 120)))
        at = np.union1d(at, [0, 299]) if rng.random() < 0.5 else at
        assert file.take(at).to_pylist() == [lists[i] for i in at]


def test_a_staged_file_of_the_layout_before_keeps_its_band_column(tmp_path: Path) -> None:
    """Staged before bands files (a run cut off, then resumed by this version): the band
    hashes are a column of the staged file, and the driver decides from it."""
    path = Location(str(tmp_path / "k.h.parquet"))
    rows = pa.table(
        {
            "source_line": pa.array([1, 2], pa.int64()),
            BANDS_COLUMN: pa.array([[5, 6], None], U64),
        }
    )
    staging.write_atomic_parquet(rows, path)
    keys, bands_file = staging.read_keys(path.uri)
    assert bands_file is None
    assert keys[BANDS_COLUMN].to_pylist() == [[5, 6], None]


def test_the_digest_a_write_returns_is_the_file_s(tmp_path: Path) -> None:
    """Hashed while written (the worker does not read the file back): the seal must still be
    the file's own sha256, or every staged chunk would be redone on resume."""
    path = tmp_path / "s.arrow"
    lists = [[i, i + 1] for i in range(5000)]
    assert write_sets(path, list(range(5000)), lists) == sets.digest(Location(str(path)))
