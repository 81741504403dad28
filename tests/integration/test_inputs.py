"""Inputs end to end through a real lake: ids derived from the full source path (D11), compressed
files bounded by ``[ingest].max_compressed_chunk_bytes`` (D12), and Parquet metadata columns of
any Arrow type carried without pandas, an unreadable column failing at once (D19)."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from helpers import PROSE

from lakecurate import Lake

CONFIG = "[ingest]\nmax_attempts = 3\nretry_backoff = 0.05\n"


def _config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "lakecurate.toml"
    path.write_text(CONFIG + extra, encoding="utf-8")
    return path


def _chunks(lake: Path) -> list[dict[str, Any]]:
    return (
        Lake.open(lake)
        .sql(
            "SELECT chunk_key, source_path, status, attempts, last_error "
            "FROM chunks ORDER BY source_path"
        )
        .dicts()
    )


def test_same_named_files_in_two_folders_keep_distinct_ids(tmp_path: Path) -> None:
    """x/part.jsonl and y/part.jsonl once both derived ``part.jsonl:<line>``, and a record whose
    own id was ``part.jsonl:2`` made it three documents kept under one id."""
    inputs = tmp_path / "in"
    for folder in ("x", "y"):
        (inputs / folder).mkdir(parents=True)
        (inputs / folder / "part.jsonl").write_text(
            "".join(json.dumps({"text": f"{folder}: {PROSE[n]}"}) + "\n" for n in range(3)),
            encoding="utf-8",
        )
    (inputs / "z").mkdir()
    (inputs / "z" / "given.jsonl").write_text(
        json.dumps({"id": "part.jsonl:2", "text": PROSE[5]}) + "\n", encoding="utf-8"
    )
    lake = tmp_path / "lake"
    assert Lake.open(lake).ingest([inputs], config=_config(tmp_path), workers=1).ok
    rows = (
        Lake.open(lake)
        .sql("SELECT id, id_given, source_path, source_line FROM docs ORDER BY ALL")
        .dicts()
    )
    ids = [r["id"] for r in rows]
    assert len(rows) == 7 and len(set(ids)) == 7, ids
    for r in rows:
        if not r["id_given"]:
            assert r["id"] == f"{r['source_path']}:{r['source_line']}"
            assert r["source_path"] in (
                str(inputs / "x" / "part.jsonl"),
                str(inputs / "y" / "part.jsonl"),
            )
    assert [r["id"] for r in rows if r["id_given"]] == ["part.jsonl:2"]


def test_a_compressed_file_past_the_limit_is_dead_at_once(tmp_path: Path) -> None:
    """4 MiB of text in a few KiB with a 1 MiB limit: DEAD after one attempt, the message says
    what to do; raising the setting and ``retry`` then ingests it."""
    line = json.dumps({"text": "a long and very repetitive line " * 30}).encode() + b"\n"
    inputs = tmp_path / "in"
    inputs.mkdir()
    bomb = inputs / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(line * ((4 << 20) // len(line)), mtime=0))
    small = inputs / "small.jsonl.zst"
    small.write_bytes(
        zstandard.compress(b"".join(json.dumps({"text": t}).encode() + b"\n" for t in PROSE))
    )
    lake = tmp_path / "lake"
    limit = 'max_compressed_chunk_bytes = "{}"\n'
    report = Lake.open(lake).ingest(
        [inputs], workers=1, config=_config(tmp_path, limit.format("1MiB"))
    )
    assert [key for key, _ in report.dead] == [
        c["chunk_key"] for c in _chunks(lake) if c["status"] == "DEAD"
    ]
    (dead,) = [c for c in _chunks(lake) if c["status"] == "DEAD"]
    assert dead["source_path"] == str(bomb)
    assert dead["attempts"] == 1
    assert (
        f"{bomb} decompresses to more than [ingest].max_compressed_chunk_bytes = 1048576 "
        "bytes (1 MiB)"
    ) in dead["last_error"]
    assert "split or recompress it into smaller shards" in dead["last_error"]
    assert Lake.open(lake).sql("SELECT count(*) FROM docs").rows == [(len(PROSE),)]

    assert Lake.open(lake).retry() == [dead["chunk_key"]]
    report = Lake.open(lake).ingest(
        [inputs], workers=1, config=_config(tmp_path, limit.format("16MiB"))
    )
    assert report.ok, report.dead
    assert Lake.open(lake).sql(
        "SELECT count(*) FROM documents WHERE source_path = $p", params={"p": str(bomb)}
    ).rows == [((4 << 20) // len(line),)]


NS = 1_700_000_000_123_456_789  # 2023-11-14T22:13:20.123456789


def test_parquet_meta_of_every_arrow_type_is_kept_without_pandas(tmp_path: Path) -> None:
    """A sub-microsecond timestamp[ns] once made the chunk DEAD after three retries asking to
    'Install pandas'; every record is kept now, and meta holds each value as JSON."""
    table = pa.table(
        {
            "id": ["a", "b"],
            "text": PROSE[:2],
            "at": pa.array([NS, None], pa.timestamp("ns")),
            "price": pa.array([Decimal("19.99"), Decimal("-0.01")], pa.decimal128(10, 2)),
            "blob": pa.array([b"\x00\xff", b""], pa.binary()),
            "seen": pa.array([[NS, NS + 1], []], pa.list_(pa.timestamp("ns"))),
            "src": pa.array(
                [{"at": NS, "n": 1}, None],
                pa.struct([("at", pa.timestamp("ns")), ("n", pa.int32())]),
            ),
            "lang": pa.array(["en", "en"]).dictionary_encode(),
            "took": pa.array([1, -1_500_000_001], pa.duration("ns")),
        }
    )
    path = tmp_path / "typed.parquet"
    pq.write_table(table, path)
    lake = tmp_path / "lake"
    report = Lake.open(lake).ingest([path], config=_config(tmp_path), workers=1)
    assert report.ok, report.dead
    rows = Lake.open(lake).sql("SELECT id, kept, meta FROM documents ORDER BY id").rows
    assert [(r[0], r[1]) for r in rows] == [("a", True), ("b", True)]
    ts = "2023-11-14T22:13:20.123456789"
    assert [json.loads(r[2]) for r in rows] == [
        {
            "at": ts,
            "price": "19.99",
            "blob": "AP8=",
            "seen": [ts, "2023-11-14T22:13:20.123456790"],
            "src": {"at": ts, "n": 1},
            "lang": "en",
            "took": "PT0.000000001S",
        },
        {
            "at": None,
            "price": "-0.01",
            "blob": "",
            "seen": [],
            "src": None,
            "lang": "en",
            "took": "-PT1.500000001S",
        },
    ]
    assert [c["attempts"] for c in _chunks(lake)] == [1]


def test_a_parquet_column_that_cannot_be_read_is_dead_after_one_attempt(tmp_path: Path) -> None:
    """Invalid UTF-8 in a string column fails the same way every time: no pointless retries."""
    raw = pa.array([b"fine", b"bad \xff byte"], pa.binary())
    broken = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # not validated
    path = tmp_path / "badutf8.parquet"
    pq.write_table(pa.table({"text": PROSE[:2], "note": broken}), path)
    lake = tmp_path / "lake"
    report = Lake.open(lake).ingest([path], config=_config(tmp_path), workers=1)
    assert len(report.dead) == 1
    (chunk,) = _chunks(lake)
    assert (chunk["status"], chunk["attempts"]) == ("DEAD", 1)
    assert f"{path}: Parquet column 'note' of type string cannot be read" in chunk["last_error"]
