"""Reading chunks: every line becomes a document, a malformed record (raw bytes kept) or a blank
line, and a changed or corrupt input fails the chunk permanently."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from lakecurate import chunking, io
from lakecurate.errors import PermanentChunkError
from lakecurate.types import ChunkSpec

OK = b'{"id": "ok", "text": "fine"}'


def _specs(path: Path, chunk_size: int = 1 << 30) -> list[ChunkSpec]:
    fmt = chunking.detect_format(str(path))
    assert fmt is not None
    return chunking.plan_file(str(path), fmt, chunk_size)[1]


def _read(path: Path, chunk_size: int = 1 << 30) -> tuple[list[dict[str, Any]], int]:
    """All rows of all chunks of ``path``, and the number of blank lines."""
    rows: list[dict[str, Any]] = []
    blank = 0
    for spec in _specs(path, chunk_size):
        recs = io.read_chunk(spec)
        table = recs.table()
        assert table.schema == io.RECORD_SCHEMA
        rows.extend(table.to_pylist())
        blank += recs.blank_lines
    return rows, blank


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- malformed records ---------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "kind"), [
    (b'{"text": "caf\xe9"}', "invalid_utf8"),
    (b"\xff\xfe{}", "invalid_utf8"),
    (b'{"text": "x"', "bad_json"),
    (b"not json", "bad_json"),
    (b"{'text': 'single quotes'}", "bad_json"),
    (b'{"text": "a"} trailing', "bad_json"),
    (b"[" * 100_000, "bad_json"),
    (b'{"id": ' + b"7" * 5000 + b', "text": "int too long for str()"}', "bad_json"),
    (b"[1, 2]", "not_object"),
    (b'"just a string"', "not_object"),
    (b"42", "not_object"),
    (b"null", "not_object"),
    (b'{"id": "a", "body": "no text key"}', "missing_text"),
    (b'{"text": 12}', "text_not_string"),
    (b'{"text": 1.5}', "text_not_string"),
    (b'{"text": null}', "text_not_string"),
    (b'{"text": ["a", "b"]}', "text_not_string"),
    (b'{"text": {"a": 1}}', "text_not_string"),
    (b'{"text": true}', "text_not_string"),
    (b'{"text": "\\ud800"}', "invalid_unicode"),
    (b'{"text": "ok", "url": "\\udfff"}', "invalid_unicode"),
    (b'{"id": "\\ud83d", "text": "ok"}', "invalid_unicode"),
    (b'{"text": "ok", "\\ud800": 1}', "invalid_unicode"),
])
def test_malformed_line_keeps_raw_bytes_and_kind(tmp_path: Path, line: bytes, kind: str) -> None:
    path = _write(tmp_path / "dirty.jsonl", OK + b"\n" + line + b"\n" + OK + b"\n")
    rows, blank = _read(path)
    assert blank == 0
    assert [r["source_line"] for r in rows] == [1, 2, 3]
    assert [r["kind"] for r in rows] == [None, kind, None]
    bad = rows[1]
    assert bad["raw"] == line
    assert bad["id"] == "dirty.jsonl:2"
    assert bad["text"] is None
    assert bad["meta"] is None
    assert bad["error"]
    assert rows[0]["raw"] is None
    assert rows[0]["error"] is None
    assert rows[0]["text"] == rows[2]["text"] == "fine"


def test_valid_surrogate_pair_escape_is_fine(tmp_path: Path) -> None:
    path = _write(tmp_path / "emoji.jsonl", b'{"text": "\\ud83d\\ude00"}\n')
    rows, _ = _read(path)
    assert rows[0]["kind"] is None
    assert rows[0]["text"] == "\U0001f600"


def test_blank_and_whitespace_lines_are_counted_not_recorded(tmp_path: Path) -> None:
    data = b"\n   \n\t\t\n" + OK + b"\n\r\n \r\n" + OK + b"\n\n"
    path = _write(tmp_path / "blanks.jsonl", data)
    rows, blank = _read(path)
    assert blank == 6
    assert [r["source_line"] for r in rows] == [4, 7]
    assert all(r["kind"] is None for r in rows)


def test_crlf_line_endings_are_stripped(tmp_path: Path) -> None:
    data = b'{"text": "a"}\r\n{"text": "b\\r"}\r\nbroken\r\n{"text": "c"}'
    path = _write(tmp_path / "dos.jsonl", data)
    rows, _ = _read(path)
    assert [r["text"] for r in rows] == ["a", "b\r", None, "c"]
    assert rows[2]["kind"] == "bad_json"
    assert rows[2]["raw"] == b"broken"


def test_bom_at_start_of_file_is_malformed_but_nothing_is_lost(tmp_path: Path) -> None:
    first = b'\xef\xbb\xbf{"id": "first", "text": "with a BOM"}'
    path = _write(tmp_path / "bom.jsonl", first + b"\n" + OK + b"\n")
    rows, _ = _read(path)
    assert len(rows) == 2
    assert rows[0]["kind"] == "bad_json"
    assert rows[0]["raw"] == first  # every byte, BOM included, can be recovered
    assert "BOM" in rows[0]["error"]
    assert rows[1]["kind"] is None


# --- ids and meta --------------------------------------------------------------------------------


def test_ids(tmp_path: Path) -> None:
    lines = [
        b'{"id": "abc", "text": "t"}',
        b'{"id": 7, "text": "t"}',
        b'{"text": "t"}',
        b'{"id": -12345678901234567890, "text": "t"}',
        b'{"id": "", "text": "t"}',
        b'{"id": 1.5, "text": "t"}',
        b'{"id": true, "text": "t"}',
        b'{"id": null, "text": "t"}',
        b'{"id": ["x"], "text": "t"}',
    ]
    path = _write(tmp_path / "ids.jsonl", b"\n".join(lines) + b"\n")
    rows, _ = _read(path)
    assert [r["id"] for r in rows] == [
        "abc", "7", "ids.jsonl:3", "-12345678901234567890", "ids.jsonl:5", "ids.jsonl:6",
        "ids.jsonl:7", "ids.jsonl:8", "ids.jsonl:9"]
    # an id that cannot name the document is kept in meta, not dropped
    metas = [json.loads(r["meta"]) if r["meta"] else None for r in rows]
    assert metas == [None, None, None, None, {"id": ""}, {"id": 1.5}, {"id": True},
                     {"id": None}, {"id": ["x"]}]


def test_other_fields_go_to_meta_as_json(tmp_path: Path) -> None:
    rec = {"id": "m1", "text": "body", "url": "https://x", "n": 3, "score": 0.5,
           "tags": ["a", "b"], "nested": {"k": "é", "z": None}, "flag": False}
    path = _write(tmp_path / "meta.jsonl", json.dumps(rec).encode() + b"\n" + OK + b"\n")
    rows, _ = _read(path)
    assert rows[0]["text"] == "body"
    meta = json.loads(rows[0]["meta"])
    assert meta == {k: v for k, v in rec.items() if k not in ("id", "text")}
    assert "é" in rows[0]["meta"]  # not \u-escaped
    assert rows[1]["meta"] is None


def test_text_is_not_altered_by_reading(tmp_path: Path) -> None:
    text = "  Zeile 1\r\nline 2\tend  \u3000e\u0301"
    path = _write(tmp_path / "t.jsonl", json.dumps({"text": text}).encode() + b"\n")
    rows, _ = _read(path)
    assert rows[0]["text"] == text


# --- chunks, line numbers ------------------------------------------------------------------------


def test_line_numbers_across_many_chunks(tmp_path: Path) -> None:
    lines = []
    for i in range(1, 301):
        if i % 17 == 0:
            lines.append(b"")
        elif i % 23 == 0:
            lines.append(b"{broken %d" % i)
        else:
            lines.append(b'{"id": "L%d", "text": "line %d"}' % (i, i))
    path = _write(tmp_path / "many.jsonl", b"\n".join(lines) + b"\n")
    assert len(_specs(path, 200)) > 10
    rows, blank = _read(path, chunk_size=200)
    whole, blank_whole = _read(path)
    assert rows == whole
    assert blank == blank_whole == 300 // 17
    expected = [i for i in range(1, 301) if i % 17]
    assert [r["source_line"] for r in rows] == expected
    for r in rows:
        n = r["source_line"]
        if n % 23 == 0:
            assert r["kind"] == "bad_json"
            assert r["raw"] == b"{broken %d" % n
        else:
            assert (r["id"], r["text"]) == (f"L{n}", f"line {n}")


# --- compressed inputs ---------------------------------------------------------------------------


def _jsonl(start: int, n: int) -> bytes:
    return b"".join(b'{"id": "%d", "text": "doc %d"}\n' % (i, i) for i in range(start, start + n))


def test_multi_member_gzip_reads_every_member(tmp_path: Path) -> None:
    data = gzip.compress(_jsonl(0, 50)) + gzip.compress(_jsonl(50, 30)) + gzip.compress(b"\n")
    path = _write(tmp_path / "multi.jsonl.gz", data)
    rows, blank = _read(path)
    assert [r["id"] for r in rows] == [str(i) for i in range(80)]
    assert [r["source_line"] for r in rows] == list(range(1, 81))
    assert blank == 1


def test_gzip_without_trailing_newline_and_with_crlf(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.jsonl.gz", gzip.compress(b'{"text": "a"}\r\n{"text": "b"}'))
    rows, _ = _read(path)
    assert [r["text"] for r in rows] == ["a", "b"]


@pytest.mark.parametrize("cut", [10, 200, -1, -6])
def test_truncated_gzip_is_a_permanent_error_naming_the_file(tmp_path: Path, cut: int) -> None:
    data = gzip.compress(_jsonl(0, 500))
    path = _write(tmp_path / "cut.jsonl.gz", data[:cut])
    with pytest.raises(PermanentChunkError) as exc:
        _read(path)
    assert str(path) in str(exc.value)


def test_gzip_garbage_is_a_permanent_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "junk.jsonl.gz", b"this was never gzip\n")
    with pytest.raises(PermanentChunkError, match=re.escape(str(path))):
        _read(path)


def test_zstd_multi_frame(tmp_path: Path) -> None:
    data = zstandard.compress(_jsonl(0, 40)) + zstandard.compress(_jsonl(40, 60))
    path = _write(tmp_path / "forum.jsonl.zst", data)
    rows, _ = _read(path)
    assert [r["id"] for r in rows] == [str(i) for i in range(100)]
    assert [r["source_line"] for r in rows] == list(range(1, 101))


def test_zstd_streamed_without_content_size(tmp_path: Path) -> None:
    path = tmp_path / "stream.jsonl.zst"
    with path.open("wb") as f, zstandard.ZstdCompressor().stream_writer(f) as w:
        for i in range(0, 3000, 100):
            w.write(_jsonl(i, 100))
    rows, _ = _read(path)
    assert [r["id"] for r in rows] == [str(i) for i in range(3000)]


@pytest.mark.parametrize("cut", [5, 0.5, -1])
def test_truncated_zstd_is_a_permanent_error(tmp_path: Path, cut: float) -> None:
    # incompressible-ish text so the frame is long and a cut lands inside it
    data = zstandard.compress(b"".join(
        b'{"text": "%s"}\n' % bytes(range(48, 58)) * (i % 7 + 1) for i in range(3000)))
    end = int(len(data) * cut) if isinstance(cut, float) else cut
    path = _write(tmp_path / "cut.jsonl.zst", data[:end])
    with pytest.raises(PermanentChunkError) as exc:
        _read(path)
    assert str(path) in str(exc.value)


def test_zstd_garbage_is_a_permanent_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "junk.jsonl.zst", b"definitely not zstd data")
    with pytest.raises(PermanentChunkError, match=re.escape(str(path))):
        _read(path)


# --- changed inputs ------------------------------------------------------------------------------


def test_jsonl_changed_in_place_after_planning(tmp_path: Path) -> None:
    data = _jsonl(0, 100)
    path = _write(tmp_path / "moving.jsonl", data)
    specs = _specs(path, 500)
    changed = data.replace(b"doc 42", b"doc 24")
    assert len(changed) == len(data)
    assert changed != data
    path.write_bytes(changed)
    with pytest.raises(PermanentChunkError) as exc:
        for spec in specs:
            io.read_chunk(spec)
    assert str(path) in str(exc.value)
    assert "changed after it was planned" in str(exc.value)
    # chunks whose bytes did not change still read fine
    assert io.read_chunk(specs[0]).table().num_rows > 0


def test_gzip_changed_after_planning(tmp_path: Path) -> None:
    path = _write(tmp_path / "moving.jsonl.gz", gzip.compress(_jsonl(0, 10)))
    (spec,) = _specs(path)
    path.write_bytes(gzip.compress(_jsonl(1, 10)))  # still valid gzip, other content
    with pytest.raises(PermanentChunkError, match="changed after it was planned"):
        io.read_chunk(spec)


def test_deleted_after_planning(tmp_path: Path) -> None:
    path = _write(tmp_path / "gone.jsonl", _jsonl(0, 3))
    (spec,) = _specs(path)
    path.unlink()
    with pytest.raises(PermanentChunkError, match="disappeared"):
        io.read_chunk(spec)


# --- Parquet -------------------------------------------------------------------------------------


def test_parquet_rows(tmp_path: Path) -> None:
    path = tmp_path / "books.parquet"
    table = pa.table({"id": list(range(25)), "text": [f"book {i}" for i in range(25)],
                      "year": [1900 + i for i in range(25)]})
    pq.write_table(table, path, row_group_size=10)
    assert len(_specs(path, 1)) == 3
    rows, blank = _read(path, chunk_size=1)
    assert blank == 0
    assert [r["source_line"] for r in rows] == list(range(1, 26))
    assert [r["id"] for r in rows] == [str(i) for i in range(25)]
    assert [r["text"] for r in rows] == [f"book {i}" for i in range(25)]
    assert [json.loads(r["meta"]) for r in rows] == [{"year": 1900 + i} for i in range(25)]
    assert all(r["kind"] is None for r in rows)


def test_parquet_without_text_column_keeps_every_row_as_malformed(tmp_path: Path) -> None:
    path = tmp_path / "notext.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "body": ["x", "y", "z"]}), path,
                   row_group_size=2)
    rows, _ = _read(path, chunk_size=1)
    assert len(rows) == 3
    assert [r["kind"] for r in rows] == ["missing_text"] * 3
    assert [r["id"] for r in rows] == ["notext.parquet:1", "notext.parquet:2",
                                       "notext.parquet:3"]
    assert [json.loads(r["raw"]) for r in rows] == [
        {"id": "a", "body": "x"}, {"id": "b", "body": "y"}, {"id": "c", "body": "z"}]


def test_parquet_int_or_null_text_is_text_not_string(tmp_path: Path) -> None:
    path = tmp_path / "inttext.parquet"
    pq.write_table(pa.table({"text": pa.array([1, 2, None], pa.int64())}), path)
    rows, _ = _read(path)
    assert [r["kind"] for r in rows] == ["text_not_string"] * 3
    assert [json.loads(r["raw"]) for r in rows] == [{"text": 1}, {"text": 2}, {"text": None}]
    path2 = tmp_path / "nulltext.parquet"
    pq.write_table(pa.table({"text": pa.array(["ok", None], pa.string())}), path2)
    rows, _ = _read(path2)
    assert [r["kind"] for r in rows] == [None, "text_not_string"]


def test_parquet_changed_after_planning(tmp_path: Path) -> None:
    path = tmp_path / "moving.parquet"
    texts = [f"t{i}" for i in range(30)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=10)
    specs = _specs(path, 1)
    texts[25] = "changed"
    pq.write_table(pa.table({"text": texts}), path, row_group_size=10)
    assert io.read_chunk(specs[0]).table().num_rows == 10
    with pytest.raises(PermanentChunkError, match="changed after it was planned"):
        io.read_chunk(specs[2])


def test_parquet_rewritten_with_fewer_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "shrunk.parquet"
    table = pa.table({"text": [f"t{i}" for i in range(30)]})
    pq.write_table(table, path, row_group_size=10)
    specs = _specs(path, 1)
    pq.write_table(table, path, row_group_size=30)
    for spec in specs:
        with pytest.raises(PermanentChunkError) as exc:
            io.read_chunk(spec)
        assert str(path) in str(exc.value)


def test_parquet_replaced_by_garbage(tmp_path: Path) -> None:
    path = tmp_path / "broken.parquet"
    pq.write_table(pa.table({"text": ["a"]}), path)
    (spec,) = _specs(path)
    path.write_bytes(b"garbage")
    with pytest.raises(PermanentChunkError, match=re.escape(str(path))):
        io.read_chunk(spec)
