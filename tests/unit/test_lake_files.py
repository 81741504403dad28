"""``lake.record`` (the commit record) and ``lake.atomic`` (whole-or-nothing files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakecurate.lake import atomic
from lakecurate.lake.record import (
    APPEND,
    REDECIDE,
    RESTORE,
    SEQ_KEY,
    SUPERSEDE,
    ChunkRecord,
    CommitRecord,
)

CHUNK = {"rows_in": 3, "rows_kept": 2, "rows_malformed": 0, "funnel": [["parse", 3, 0]]}


@pytest.mark.parametrize(
    "record",
    [
        CommitRecord(
            APPEND,
            "run-1",
            chunks=(ChunkRecord("a_00000_x", 10, 3, 2, CHUNK),),
            config_hash="h",
            config_text="[dedup]\nexact = true\n",
        ),
        CommitRecord(
            APPEND,
            "run-1",
            chunks=(
                ChunkRecord("a_00000_x", 10, 3, 2, CHUNK),
                ChunkRecord("a_00001_y", 11, 5, 4, CHUNK),
                ChunkRecord("b_00000_z", 12, 0, 0, CHUNK),
            ),
            config_hash="h",
        ),
        CommitRecord(
            REDECIDE, "run-2", chunks=(ChunkRecord("a_00000_x", 12, 3, 1, CHUNK),), config_hash="h"
        ),
        CommitRecord(SUPERSEDE, "run-3", superseded=("a_00000_x", "b_00001_y")),
        CommitRecord(RESTORE, "run-4", restored=7),
        CommitRecord("COMPACT", "run-5"),
    ],
    ids=["APPEND", "APPEND-group", "REDECIDE", "SUPERSEDE", "RESTORE", "COMPACT"],
)
def test_a_record_reads_back_as_it_was_written(record: CommitRecord) -> None:
    entry = {SEQ_KEY: "12", "operation": "WRITE", **record.metadata()}
    assert all(isinstance(v, str) for v in record.metadata().values())  # commitInfo: strings
    back = CommitRecord.parse(entry)
    assert back.seq == 12
    assert back == CommitRecord(**{**record.__dict__, "seq": 12})


def test_a_group_commit_names_each_chunk_and_its_own_seq() -> None:
    chunks = (ChunkRecord("a", 7, 3, 2, CHUNK), ChunkRecord("b", 8, 5, 1, CHUNK))
    back = CommitRecord.parse({SEQ_KEY: "8", **CommitRecord(APPEND, "r", chunks=chunks).metadata()})
    assert back.chunk_keys == ["a", "b"]
    assert (back.rows_in, back.rows_kept) == (8, 3)
    assert back.chunk(7) == chunks[0] and back.chunk(8) == chunks[1] and back.chunk(9) is None


def test_a_record_written_before_groups_reads_as_one_chunk() -> None:
    entry = {
        SEQ_KEY: "4",
        "lakecurate.chunk_key": "k",
        "lakecurate.rows_in": "3",
        "lakecurate.rows_kept": "2",
        "lakecurate.result": '{"rows_in": 3}',
    }
    back = CommitRecord.parse(entry)
    assert back.kind == APPEND
    assert back.chunks == (ChunkRecord("k", 4, 3, 2, {"rows_in": 3}),)


def test_a_commit_lakecurate_did_not_make_has_no_kind() -> None:
    back = CommitRecord.parse({"operation": "OPTIMIZE", "operationMetrics": {}})
    assert (back.kind, back.seq, back.chunk_keys) == ("", None, [])


def test_a_damaged_result_is_read_as_missing_not_raised() -> None:
    entry = {SEQ_KEY: "3", "lakecurate.chunk_key": "k", "lakecurate.result": "{not json"}
    back = CommitRecord.parse(entry)
    assert (back.kind, back.chunk_keys, back.chunks[0].result) == (APPEND, ["k"], None)
    assert CommitRecord.parse({SEQ_KEY: "3", "lakecurate.chunks": "[{not json"}).chunks == ()


def test_replacing_publishes_the_file_only_when_the_block_succeeds(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    atomic.write_text(target, "old")
    with pytest.raises(RuntimeError), atomic.replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]  # no temp file left behind
    atomic.write_text(target, "new", hidden=True)
    assert target.read_text() == "new"


def test_temp_names_are_recognised(tmp_path: Path) -> None:
    with atomic.replacing(tmp_path / "x.bloom") as tmp:
        assert atomic.is_temp(tmp)
        tmp.write_bytes(b"1")
    with atomic.replacing(tmp_path / "report.html", hidden=True) as tmp:
        assert tmp.name.startswith(".") and atomic.is_temp(tmp)
        tmp.write_bytes(b"1")
    assert not atomic.is_temp(tmp_path / "x.bloom")
    assert atomic.is_temp(tmp_path / "lakecurate.toml.tmp")  # what lakecurate 0.1 left
