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
    CommitRecord,
)

CHUNK = {"rows_in": 3, "rows_kept": 2, "rows_malformed": 0, "funnel": [["parse", 3, 0]]}


@pytest.mark.parametrize(
    "record",
    [
        CommitRecord(
            APPEND,
            "run-1",
            chunk_key="a_00000_x",
            config_hash="h",
            rows_in=3,
            rows_kept=2,
            result=CHUNK,
            config_text="[dedup]\nexact = true\n",
        ),
        CommitRecord(
            REDECIDE,
            "run-2",
            chunk_key="a_00000_x",
            config_hash="h",
            rows_in=3,
            rows_kept=1,
            result=CHUNK,
        ),
        CommitRecord(SUPERSEDE, "run-3", superseded=("a_00000_x", "b_00001_y")),
        CommitRecord(RESTORE, "run-4", restored=7),
        CommitRecord("COMPACT", "run-5"),
    ],
    ids=lambda r: r.kind,
)
def test_a_record_reads_back_as_it_was_written(record: CommitRecord) -> None:
    entry = {SEQ_KEY: "12", "operation": "WRITE", **record.metadata()}
    assert all(isinstance(v, str) for v in record.metadata().values())  # commitInfo: strings
    back = CommitRecord.parse(entry)
    assert back.seq == 12
    assert back == CommitRecord(**{**record.__dict__, "seq": 12})


def test_a_commit_lakecurate_did_not_make_has_no_kind() -> None:
    back = CommitRecord.parse({"operation": "OPTIMIZE", "operationMetrics": {}})
    assert (back.kind, back.seq, back.chunk_keys) == ("", None, [])


def test_a_damaged_result_is_read_as_missing_not_raised() -> None:
    entry = {SEQ_KEY: "3", "lakecurate.chunk_key": "k", "lakecurate.result": "{not json"}
    back = CommitRecord.parse(entry)
    assert (back.kind, back.chunk_keys, back.result) == (APPEND, ["k"], None)


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
