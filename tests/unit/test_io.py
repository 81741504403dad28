"""Reading chunks: every line becomes a document, a malformed record (raw bytes kept) or a blank
line, and a changed or corrupt input fails the chunk permanently."""

from __future__ import annotations

import base64
import gzip
import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from lakecurate.errors import PermanentChunkError
from lakecurate.ingest import chunking, cutting
from lakecurate.ingest import reader as io
from lakecurate.types import ChunkSpec

OK = b'{"id": "ok", "text": "fine"}'


def _specs(path: Path, chunk_size: int = 1 << 30) -> list[ChunkSpec]:
    fmt = chunking.detect_format(str(path))
    assert fmt is not None
    return cutting.plan_file(str(path), fmt, chunk_size)[1]


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


@pytest.mark.parametrize(
    ("line", "kind"),
    [
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
    ],
)
def test_malformed_line_keeps_raw_bytes_and_kind(tmp_path: Path, line: bytes, kind: str) -> None:
    path = _write(tmp_path / "dirty.jsonl", OK + b"\n" + line + b"\n" + OK + b"\n")
    rows, blank = _read(path)
    assert blank == 0
    assert [r["source_line"] for r in rows] == [1, 2, 3]
    assert [r["kind"] for r in rows] == [None, kind, None]
    bad = rows[1]
    assert bad["raw"] == line
    assert bad["id"] == f"{path}:2"
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
        "abc",
        "7",
        f"{path}:3",
        "-12345678901234567890",
        f"{path}:5",
        f"{path}:6",
        f"{path}:7",
        f"{path}:8",
        f"{path}:9",
    ]
    # an id that cannot name the document is kept in meta, not dropped
    metas = [json.loads(r["meta"]) if r["meta"] else None for r in rows]
    assert metas == [
        None,
        None,
        None,
        None,
        {"id": ""},
        {"id": 1.5},
        {"id": True},
        {"id": None},
        {"id": ["x"]},
    ]


def test_other_fields_go_to_meta_as_json(tmp_path: Path) -> None:
    rec = {
        "id": "m1",
        "text": "body",
        "url": "https://x",
        "n": 3,
        "score": 0.5,
        "tags": ["a", "b"],
        "nested": {"k": "é", "z": None},
        "flag": False,
    }
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
    data = zstandard.compress(
        b"".join(b'{"text": "%s"}\n' % bytes(range(48, 58)) * (i % 7 + 1) for i in range(3000))
    )
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
    table = pa.table(
        {
            "id": list(range(25)),
            "text": [f"book {i}" for i in range(25)],
            "year": [1900 + i for i in range(25)],
        }
    )
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
    pq.write_table(
        pa.table({"id": ["a", "b", "c"], "body": ["x", "y", "z"]}), path, row_group_size=2
    )
    rows, _ = _read(path, chunk_size=1)
    assert len(rows) == 3
    assert [r["kind"] for r in rows] == ["missing_text"] * 3
    assert [r["id"] for r in rows] == [f"{path}:1", f"{path}:2", f"{path}:3"]
    assert [json.loads(r["raw"]) for r in rows] == [
        {"id": "a", "body": "x"},
        {"id": "b", "body": "y"},
        {"id": "c", "body": "z"},
    ]


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


# --- derived ids (D11) ---------------------------------------------------------------------------


def test_derived_ids_carry_the_full_source_path(tmp_path: Path) -> None:
    """Same-named files in two folders once both gave ``part.jsonl:1``."""
    ids = []
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        path = _write(tmp_path / folder / "part.jsonl", b'{"text": "no id"}\nbroken\n')
        rows, _ = _read(path)
        assert [r["id"] for r in rows] == [f"{path}:1", f"{path}:2"]
        assert [r["id_given"] for r in rows] == [False, False]
        ids += [r["id"] for r in rows]
    assert len(set(ids)) == 4


# --- compressed inputs are bounded (D12) ---------------------------------------------------------


def _compress(fmt: str, data: bytes) -> bytes:
    return gzip.compress(data, mtime=0) if fmt == "gz" else zstandard.compress(data)


@pytest.mark.parametrize("fmt", ["gz", "zst"])
def test_compressed_chunk_past_the_limit_is_a_permanent_error(tmp_path: Path, fmt: str) -> None:
    data = _jsonl(0, 1000)
    path = _write(tmp_path / f"big.jsonl.{fmt}", _compress(fmt, data))
    (spec,) = _specs(path)
    assert io.read_chunk(spec, len(data)).table().num_rows == 1000  # exactly the limit is fine
    with pytest.raises(PermanentChunkError) as exc:
        io.read_chunk(spec, len(data) - 1)
    msg = str(exc.value)
    assert str(path) in msg and "\n" not in msg
    assert f"[ingest].max_compressed_chunk_bytes = {len(data) - 1} bytes" in msg
    assert "split or recompress it into smaller shards, or raise the setting" in msg


def _rss_growth(script: str, path: Path) -> tuple[str, int]:
    """Run ``script`` on ``path`` in a fresh interpreter: its output, and the bytes its peak RSS
    grew by (the script prints ``grew N`` last)."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.stdout, int(done.stdout.rsplit("grew ", 1)[1])


_BOUNDED_READ = """
import resource, sys
from lakecurate.ingest import chunking, cutting, reader as io
from lakecurate.errors import PermanentChunkError

path = sys.argv[1]
(spec,) = cutting.plan_file(path, chunking.detect_format(path), 1 << 30)[1]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    io.read_chunk(spec, 4 << 20)
except PermanentChunkError as exc:
    print("refused:", exc)
print("grew", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize("fmt", ["gz", "zst"])
@pytest.mark.parametrize("shape", ["one_line", "short_lines"])
def test_a_compression_bomb_is_refused_without_being_held(
    tmp_path: Path, fmt: str, shape: str
) -> None:
    """128 MiB in a few MiB: reading stops at the limit (4 MiB here), and neither the whole text,
    one endless line nor one call's output of a 10,000:1 zstd frame is ever held. (The planner
    reads the whole stream: the time of the test. Twice the growth bound is enough to see a
    stream held whole.)"""
    if shape == "one_line":
        first, block = b'{"text": "', b"a" * (16 << 20)
    else:
        first, block = b"", json.dumps({"text": "a" * 1000}).encode() + b"\n"
        block *= (16 << 20) // len(block)
    member = _compress(fmt, block)
    path = tmp_path / f"bomb.jsonl.{fmt}"
    with path.open("wb") as f:
        f.write(_compress(fmt, first))
        for _ in range(8):  # gzip members and zstd frames concatenate into one stream
            f.write(member)
    assert path.stat().st_size < 8 << 20
    out, grew = _rss_growth(_BOUNDED_READ, path)
    assert f"refused: {path} decompresses to more than" in out, out
    assert grew < 64 << 20, f"peak RSS grew by {grew / 2**20:.0f} MiB"


# --- slices of a large compressed file (issue 14, item 5) ----------------------------------------


@pytest.mark.parametrize("fmt", ["gz", "zst"])
def test_slices_of_a_compressed_file_read_as_its_text(tmp_path: Path, fmt: str) -> None:
    data = _jsonl(0, 3000)
    plain = _write(tmp_path / "t.jsonl", data)
    path = _write(tmp_path / f"t.jsonl.{fmt}", _compress(fmt, data))
    specs = _specs(path, 5000)
    assert len(specs) > 10 and all(s.is_slice for s in specs)
    rows, _ = _read(path, 5000)
    want, _ = _read(plain, 5000)
    strip = ("source_line", "id", "text", "meta")
    assert [[r[k] for k in strip] for r in rows] == [[r[k] for k in strip] for r in want]


@pytest.mark.parametrize("fmt", ["gz", "zst"])
def test_a_slice_of_a_changed_compressed_file_is_refused(tmp_path: Path, fmt: str) -> None:
    data = _jsonl(0, 3000)
    path = _write(tmp_path / f"t.jsonl.{fmt}", _compress(fmt, data))
    specs = _specs(path, 5000)
    _write(path, _compress(fmt, data.replace(b'"doc 2999"', b'"doc 2998"')))
    assert io.read_chunk(specs[0]).table().num_rows > 0  # the text before the change is the same
    with pytest.raises(PermanentChunkError, match="changed after it was planned"):
        io.read_chunk(specs[-1])
    _write(path, _compress(fmt, data[: len(data) // 2]))  # cut short: the last slice is gone
    with pytest.raises(PermanentChunkError, match="changed after it was planned"):
        io.read_chunk(specs[-1])


_SLICE_READ = """
import resource, sys
from lakecurate.ingest import chunking, cutting, reader as io

path = sys.argv[1]
specs = cutting.plan_file(path, chunking.detect_format(path), 4 << 20)[1]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rows = io.read_chunk(specs[-1]).table().num_rows
print("slices", len(specs), "rows", rows)
print("grew", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize("fmt", ["gz", "zst"])
def test_reading_the_last_slice_holds_only_that_slice(tmp_path: Path, fmt: str) -> None:
    """128 MiB of text in 4 MiB slices: the last one is found by decompressing the text before
    it, none of which is held."""
    block = json.dumps({"text": "a" * 1000}).encode() + b"\n"
    member = _compress(fmt, block * ((16 << 20) // len(block)))
    path = tmp_path / f"big.jsonl.{fmt}"
    with path.open("wb") as f:
        for _ in range(8):
            f.write(member)
    out, grew = _rss_growth(_SLICE_READ, path)
    slices = int(out.split("slices ", 1)[1].split()[0])
    assert slices >= 30, out
    assert grew < 48 << 20, f"peak RSS grew by {grew / 2**20:.0f} MiB"


# --- Parquet columns of any Arrow type, without pandas (D19) -------------------------------------

NS = 1_700_000_000_123_456_789  # 2023-11-14T22:13:20.123456789, sub-microsecond


def _every_type() -> tuple[pa.Table, list[dict[str, Any]]]:
    """A table with a column of each kind a Parquet file can hold, and the meta expected."""
    uuid_storage = pa.array([b"0123456789abcdef", None], pa.binary(16))
    table = pa.table(
        {
            "id": ["r1", "r2"],
            "text": ["first", "second"],
            "ts": pa.array([NS, None], pa.timestamp("ns")),
            "ts_zoned": pa.array([NS, 1], pa.timestamp("ns", tz="America/New_York")),
            "ts_ms": pa.array([1_700_000_000_123, -1], pa.timestamp("ms")),
            "day": pa.array([19675, None], pa.date32()),
            "clock": pa.array([1, 86_399_999_999_999], pa.time64("ns")),
            "dec": pa.array(
                [Decimal("-1234567890123456.7890"), Decimal("0.0001")], pa.decimal128(20, 4)
            ),
            "dec256": pa.array([Decimal("1" * 45 + ".5"), None], pa.decimal256(50, 1)),
            "blob": pa.array([b"\x00\xff", b""], pa.binary()),
            "big_blob": pa.array([b"abc", None], pa.large_binary()),
            "fixed": pa.array([b"xyz", b"\x01\x02\x03"], pa.binary(3)),
            "took": pa.array([-1_500_000_001, 7], pa.duration("ns")),
            "took_s": pa.array([90, None], pa.duration("s")),
            "half": pa.array([1.5, None], pa.float16()),
            "floats": pa.array([float("nan"), float("-inf")], pa.float64()),
            "cat": pa.array(["red", "blue"]).dictionary_encode(),
            "times": pa.array([[NS, None, 5], None], pa.list_(pa.timestamp("ns"))),
            "pairs": pa.array([[b"a", b"b"], None], pa.list_(pa.binary(), 2)),
            "view": pa.array([[1], [2, 3]], pa.list_view(pa.int64())),
            "rec": pa.array(
                [{"at": NS, "n": 1, "raw": b"\xff"}, None],
                pa.struct([("at", pa.timestamp("ns")), ("n", pa.int64()), ("raw", pa.binary())]),
            ),
            "tags": pa.array([[("k", 5)], []], pa.map_(pa.string(), pa.duration("ns"))),
            "uuid": pa.ExtensionArray.from_storage(pa.uuid(), uuid_storage),
            "plain": pa.array([[1, 2], []], pa.list_(pa.int64())),
        }
    )
    ts = "2023-11-14T22:13:20.123456789"
    first = {
        "ts": ts,
        "ts_zoned": ts + "Z",
        "ts_ms": "2023-11-14T22:13:20.123",
        "day": "2023-11-14",
        "clock": "00:00:00.000000001",
        "dec": "-1234567890123456.7890",
        "dec256": "1" * 45 + ".5",
        "blob": "AP8=",
        "big_blob": "YWJj",
        "fixed": "eHl6",
        "took": "-PT1.500000001S",
        "took_s": "PT90S",
        "half": 1.5,
        "floats": "NaN",
        "cat": "red",
        "times": [ts, None, "1970-01-01T00:00:00.000000005"],
        "pairs": ["YQ==", "Yg=="],
        "view": [1],
        "rec": {"at": ts, "n": 1, "raw": "/w=="},
        "tags": [["k", "PT0.000000005S"]],
        "uuid": "30313233-3435-3637-3839-616263646566",
        "plain": [1, 2],
    }
    second = {
        "ts": None,
        "ts_zoned": "1970-01-01T00:00:00.000000001Z",
        "ts_ms": "1969-12-31T23:59:59.999",
        "day": None,
        "clock": "23:59:59.999999999",
        "dec": "0.0001",
        "dec256": None,
        "blob": "",
        "big_blob": None,
        "fixed": "AQID",
        "took": "PT0.000000007S",
        "took_s": None,
        "half": None,
        "floats": "-Infinity",
        "cat": "blue",
        "times": None,
        "pairs": None,
        "view": [2, 3],
        "rec": None,
        "tags": [],
        "uuid": None,
        "plain": [],
    }
    return table, [first, second]


def test_parquet_meta_of_every_arrow_type_is_exact_json(tmp_path: Path) -> None:
    table, expected = _every_type()
    path = tmp_path / "typed.parquet"
    pq.write_table(table, path)
    rows, _ = _read(path)
    assert [(r["id"], r["text"], r["kind"]) for r in rows] == [
        ("r1", "first", None),
        ("r2", "second", None),
    ]
    assert [json.loads(r["meta"]) for r in rows] == expected


def test_parquet_nested_values_are_right_in_every_batch(tmp_path: Path) -> None:
    """Lists, structs and maps are rebuilt per batch: slices of row groups must not shift them."""
    n = 20_000
    lists = [None if i % 7 == 0 else [NS + i] * (i % 3) for i in range(n)]
    table = pa.table(
        {
            "text": [f"t{i}" for i in range(n)],
            "lst": pa.array(lists, pa.list_(pa.timestamp("ns"))),
            "lv": pa.array(
                [[i, i + 1] if i % 5 else None for i in range(n)], pa.list_view(pa.int64())
            ),
            "st": pa.array(
                [None if i % 4 == 0 else {"b": bytes([i % 256])} for i in range(n)],
                pa.struct([("b", pa.binary())]),
            ),
            "mp": pa.array(
                [[(f"k{i}", i)] if i % 6 else None for i in range(n)],
                pa.map_(pa.string(), pa.duration("ns")),
            ),
        }
    )
    path = tmp_path / "nested.parquet"
    pq.write_table(table, path, row_group_size=7_001)
    rows, _ = _read(path, chunk_size=1)
    assert len(rows) == n
    for i, r in enumerate(rows):
        meta = json.loads(r["meta"])
        lst = lists[i]
        assert meta["lst"] == (
            None if lst is None else [f"2023-11-14T22:13:20.{123456789 + i:09d}"] * len(lst)
        ), i
        assert meta["lv"] == ([i, i + 1] if i % 5 else None), i
        assert meta["st"] == (
            None if i % 4 == 0 else {"b": base64.b64encode(bytes([i % 256])).decode()}
        ), i
        assert meta["mp"] == ([[f"k{i}", f"PT0.{i:09d}S"]] if i % 6 else None), i


def test_parquet_id_and_text_columns_of_other_types(tmp_path: Path) -> None:
    path = tmp_path / "odd.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array([Decimal("1.5"), None], pa.decimal128(3, 1)),
                "text": pa.array(["a", "b"], pa.string_view()),
            }
        ),
        path,
    )
    rows, _ = _read(path)
    # a decimal id names no document, as a float id in JSON does: it stays in meta
    assert [r["id"] for r in rows] == [f"{path}:1", f"{path}:2"]
    assert [r["meta"] for r in rows] == ['{"id": "1.5"}', '{"id": null}']
    assert [r["text"] for r in rows] == ["a", "b"]
    path = tmp_path / "bintext.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array(["x", "y"]).dictionary_encode(),
                "text": pa.array([b"looks like text", None]),
            }
        ),
        path,
    )
    rows, _ = _read(path)
    assert [r["kind"] for r in rows] == ["text_not_string"] * 2
    assert [r["error"] for r in rows] == [
        "'text' is binary, not a string",
        "'text' is null, not a string",
    ]
    assert json.loads(rows[0]["raw"]) == {"id": "x", "text": "bG9va3MgbGlrZSB0ZXh0"}


def test_parquet_column_that_cannot_be_read_is_a_permanent_error(tmp_path: Path) -> None:
    """The same bytes fail the same way on every attempt: no retry can help."""
    raw = pa.array([b"fine", b"bad \xff byte"], pa.binary())
    broken = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # not validated
    path = tmp_path / "badutf8.parquet"
    pq.write_table(pa.table({"text": ["a", "b"], "note": broken}), path)
    with pytest.raises(PermanentChunkError) as exc:
        _read(path)
    msg = str(exc.value)
    assert str(path) in msg and "column 'note' of type string" in msg and "\n" not in msg
