"""Hostile input (issue 7): every case gives a clear per-record or per-file error, never a crash
and never a silent drop.

One real ``lakecurate ingest`` process reads a folder of generated hostile files (and, when
``../shared/data/hostile/`` is there, every JSONTestSuite file and the Big List of Naughty
Strings wrapped as JSONL; read at run time, never copied into the repository). Then, for every
chunk: rows_in = kept + dropped + malformed, the rows are exactly the chunk's non-blank lines
(so lines in = rows + blank lines), every malformed row is in ``rejects`` with its raw bytes
and an error, and every file that could not be read is named on an ``error:`` line.

A single 200 MB line is a separate ``slow`` test measuring the ingest's peak memory.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import re
import resource
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from helpers import ROOT, cli_env, lakecurate_cmd, run_lakecurate, start_lakecurate

from lakecurate import Lake

SHARED = ROOT.parent / "shared" / "data" / "hostile"
CONFIG = '[ingest]\nchunk_size = "4KiB"\nmax_attempts = 2\nretry_backoff = 0.05\n'
KEPT = "kept"

# -- the generated cases: file name -> bytes, and the expected outcome of chosen lines ----------
# (None for the outcome of a line means "blank": counted, no row.)


def _ok(text: str, **extra: Any) -> bytes:
    return json.dumps({"text": text, **extra}, ensure_ascii=False).encode()


def _cases() -> dict[str, tuple[bytes, dict[int, str | None]]]:
    rng = random.Random(20261202)
    deep_ok = b'{"text": "nested meta", "m": ' + b"[" * 500 + b"]" * 500 + b"}"
    return {
        "invalid_utf8.jsonl": (
            b"\n".join(
                [
                    _ok("fine before"),
                    b'{"text": "a lone \xff byte"}',
                    b'{"text": "overlong \xc0\xaf slash"}',
                    b'{"text": "cut \xe2\x82 euro"}',
                    b'{"text": "CESU surrogate \xed\xa0\x80"}',
                    b'{"text": "latin-1 caf\xe9"}',
                    _ok("fine after: caf\u00e9 \u20ac \U0001f600"),
                ]
            )
            + b"\n",
            {
                1: KEPT,
                2: "malformed:invalid_utf8",
                3: "malformed:invalid_utf8",
                4: "malformed:invalid_utf8",
                5: "malformed:invalid_utf8",
                6: "malformed:invalid_utf8",
                7: KEPT,
            },
        ),
        "surrogates.jsonl": (
            b"\n".join(
                [
                    b'{"text": "lone high \\ud800 escape"}',
                    b'{"text": "lone low \\udfff escape"}',
                    b'{"id": "\\ud83d", "text": "surrogate in the id"}',
                    b'{"text": "surrogate in a meta key", "\\udc00": 1}',
                    b'{"text": "surrogate in meta", "url": "\\ud800"}',
                    b'{"text": "a pair is fine \\ud83d\\ude00"}',
                    b'{"text": "escaped backslash, not an escape: \\\\ud800"}',
                ]
            )
            + b"\n",
            {
                1: "malformed:invalid_unicode",
                2: "malformed:invalid_unicode",
                3: "malformed:invalid_unicode",
                4: "malformed:invalid_unicode",
                5: "malformed:invalid_unicode",
                6: KEPT,
                7: KEPT,
            },
        ),
        "control_chars.jsonl": (
            b"\n".join(
                [
                    b'{"text": "raw NUL \x00 inside a string"}',
                    b'{"text": "escaped NUL \\u0000 inside a string"}',
                    b'\x00{"text": "NUL before the object"}',
                    b'{"text": "escaped controls \\u0001\\u0007\\u001b[31m red"}',
                    b'{"text": "raw tab \t inside a string"}',
                    b'{"text": "raw ESC \x1b[0m inside a string"}',
                    b'{"text": "raw DEL \x7f is allowed by JSON"}',
                    b"\t \x0c",  # whitespace only: a blank line
                ]
            )
            + b"\n",
            {
                1: "malformed:bad_json",
                2: KEPT,
                3: "malformed:bad_json",
                4: KEPT,
                5: "malformed:bad_json",
                6: "malformed:bad_json",
                7: KEPT,
                8: None,
            },
        ),
        "bom.jsonl": (
            b"\xef\xbb\xbf"
            + _ok("after a BOM")
            + b"\n"
            + _ok("second line")
            + b"\n"
            + b"\xef\xbb\xbf"
            + _ok("a BOM in the middle")
            + b"\n",
            {1: "malformed:bad_json", 2: KEPT, 3: "malformed:bad_json"},
        ),
        "crlf.jsonl": (
            _ok("dos one")
            + b"\r\n"
            + _ok("dos two")
            + b"\r\n\r\n"
            + _ok("text with \r\n inside")
            + b"\r\n",
            {1: KEPT, 2: KEPT, 3: None, 4: KEPT},
        ),
        "bare_cr.jsonl": (
            _ok("mac one")
            + b"\r"
            + _ok("mac two")
            + b"\r"
            + _ok("mac three")
            + b"\n"
            + _ok("unix after")
            + b"\n",
            {1: "malformed:bad_json", 2: KEPT},
        ),
        "no_final_newline.jsonl": (
            _ok("first") + b"\n" + _ok("last, no newline"),
            {1: KEPT, 2: KEPT},
        ),
        "cut_mid_object.jsonl": (
            _ok("complete") + b'\n{"id": "cut", "text": "the write st',
            {1: KEPT, 2: "malformed:bad_json"},
        ),
        "truncated.jsonl.gz": (
            gzip.compress(
                b"".join(_ok(f"gz record {i} " + "x" * 50) + b"\n" for i in range(2000)), mtime=0
            )[:3000],
            {},
        ),
        "multi_member.jsonl.gz": (
            gzip.compress(_ok("member one") + b"\n", mtime=0)
            + gzip.compress(_ok("member two") + b"\n", mtime=0)
            + gzip.compress(_ok("member three"), mtime=0),
            {1: KEPT, 2: KEPT, 3: KEPT},
        ),
        "empty.jsonl": (b"", {}),
        "empty.jsonl.gz": (b"", {}),
        "empty.jsonl.zst": (b"", {}),
        "binary.jsonl": (rng.randbytes(30_000), {}),
        "deep.jsonl": (
            b"\n".join(
                [
                    b"[" * 100_000,
                    b'{"text": "deep", "m": ' + b'{"a": ' * 100_000,
                    deep_ok,
                ]
            )
            + b"\n",
            {1: "malformed:bad_json", 2: "malformed:bad_json", 3: KEPT},
        ),
        "text_types.jsonl": (
            b"\n".join(
                [
                    b'{"text": 31415926}',
                    b'{"text": 1.5}',
                    b'{"text": null}',
                    b'{"text": ["a"]}',
                    b'{"text": {"a": 1}}',
                    b'{"text": true}',
                    b'{"id": "no-text", "body": "x"}',
                    b'"just a string"',
                    b"42",
                    b"null",
                    b"[1, 2]",
                    b"true",
                    b'{"text": "ok", "score": NaN}',
                    b'{"text": "ok", "score": -Infinity}',
                    b'{"text": "ok", "score": 1e400}',
                    b'{"id": 123456789012345678901234567890, "text": "a very large integer id"}',
                ]
            )
            + b"\n",
            {
                **{i: "malformed:text_not_string" for i in range(1, 7)},
                7: "malformed:missing_text",
                **{i: "malformed:not_object" for i in range(8, 13)},
                13: "malformed:bad_json",
                14: "malformed:bad_json",
                15: "malformed:bad_json",
                16: KEPT,
            },
        ),
        "duplicate_keys.jsonl": (
            b"\n".join(
                [
                    b'{"text": "first value", "text": "second value"}',
                    b'{"id": "a", "id": "b", "text": "two ids"}',
                    b'{"text": "nested", "meta": {"k": 1, "k": 2}}',
                    b'{"text": "keys differ in case", "Text": "fine"}',
                ]
            )
            + b"\n",
            {
                1: "malformed:duplicate_key",
                2: "malformed:duplicate_key",
                3: "malformed:duplicate_key",
                4: KEPT,
            },
        ),
        "with spaces.jsonl": (_ok("a file name with spaces") + b"\n", {1: KEPT}),
        "\u00fcn\u00efc\u00f6d\u00e9 \u6587\u4ef6 \U0001f986.jsonl": (
            _ok("a unicode file name") + b"\n",
            {1: KEPT},
        ),
        # (a leading dot makes a name hidden: skipped and said, see test_silent_loss.py)
        "dots...jsonl": (_ok("a name of dots") + b"\n", {1: KEPT}),
        "a..b.jsonl": (_ok("dots inside a name") + b"\n", {1: KEPT}),
    }


def _parquet_cases(folder: Path) -> dict[str, list[str]]:
    """Parquet files of the wrong shape: file name -> expected reason of each row."""
    pq.write_table(pa.table({"id": [1, 2], "body": ["no", "text"]}), folder / "no_text.parquet")
    pq.write_table(pa.table({"id": ["i1", "i2"], "text": [7, 8]}), folder / "text_int.parquet")
    pq.write_table(
        pa.table({"text": pa.array([b"\xff\xfe", b"ok"], pa.binary())}),
        folder / "text_binary.parquet",
    )
    pq.write_table(
        pa.table({"text": pa.array([["a"], None], pa.list_(pa.string()))}),
        folder / "text_list.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "id": ["x1", "x2"],
                "text": ["a row with odd columns", None],
                "when": pa.array([0, 1], pa.timestamp("us")),
                "tags": pa.array([["a", "b"], []], pa.list_(pa.string())),
                "nested": pa.array([{"k": 1}, {"k": None}], pa.struct([("k", pa.int64())])),
                "blob": pa.array([b"\x00\xff", None], pa.binary()),
            }
        ),
        folder / "extra_types.parquet",
    )
    (folder / "garbage.parquet").write_bytes(b"PAR1 this is not a parquet file")
    (folder / "empty.parquet").write_bytes(b"")
    return {
        "no_text.parquet": ["malformed:missing_text"] * 2,
        "text_int.parquet": ["malformed:text_not_string"] * 2,
        "text_binary.parquet": ["malformed:text_not_string"] * 2,
        "text_list.parquet": ["malformed:text_not_string"] * 2,
        "extra_types.parquet": [KEPT, "malformed:text_not_string"],
    }


# file (relative to the input folder) -> what its error line must say
FILE_ERRORS = {
    "garbage.parquet": "not a readable Parquet file",
    "empty.parquet": "not a readable Parquet file",
    "loop_a.jsonl": "symlink loop",
    "loop_b.jsonl": "symlink loop",
    "self_loop.jsonl": "symlink loop",
    "dangling.jsonl": "broken link",
    "latin1_\udce9.jsonl": "not valid UTF-8",
}


def _build(folder: Path) -> None:
    gen = folder / "gen"
    gen.mkdir(parents=True)
    for name, (data, _) in _cases().items():
        (gen / name).write_bytes(data)
    (gen / "sub").mkdir()
    (gen / "sub" / "inner.jsonl").write_bytes(_ok("in a subfolder") + b"\n")
    os.symlink("..", gen / "sub" / "back")  # a directory cycle: must not be walked
    os.symlink("loop_b.jsonl", gen / "loop_a.jsonl")
    os.symlink("loop_a.jsonl", gen / "loop_b.jsonl")
    os.symlink("self_loop.jsonl", gen / "self_loop.jsonl")
    os.symlink("nowhere.jsonl", gen / "dangling.jsonl")
    (gen / "latin1_\udce9.jsonl").write_bytes(_ok("a name that is not UTF-8") + b"\n")
    if os.path.exists("/proc/self/mem"):  # a file even root cannot read (EIO)
        os.symlink("/proc/self/mem", gen / "kernel_refuses.jsonl")
    _parquet_cases(gen)
    if SHARED.is_dir():
        _wrap_shared(folder / "shared")


def _wrap_shared(out: Path) -> None:
    """JSONTestSuite files as JSONL (verbatim, and as the value of ``text``), and the BLNS."""
    out.mkdir()
    jts = sorted((SHARED / "jsontestsuite").glob("*.json"))
    verbatim, as_text, as_value = [], [], []
    for path in jts:
        data = path.read_bytes().rstrip(b"\r\n")
        name = path.stem.encode()
        verbatim.append(data)
        as_text.append(b'{"id": "' + name + b'", "text": ' + data + b"}")
        as_value.append(
            b'{"id": "value:'
            + name
            + b'", "text": "jsontestsuite '
            + name
            + b'", "value": '
            + data
            + b"}"
        )
    for wrapping, lines in (("verbatim", verbatim), ("as_text", as_text), ("as_value", as_value)):
        (out / f"jts_{wrapping}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    strings = json.loads((SHARED / "blns" / "blns.json").read_bytes())
    (out / "blns_json.jsonl").write_bytes(
        b"".join(
            json.dumps({"id": f"blns-{i}", "text": s}, ensure_ascii=False).encode() + b"\n"
            for i, s in enumerate(strings)
        )
    )
    raw_lines = (SHARED / "blns" / "blns.txt").read_bytes().split(b"\n")
    (out / "blns_raw_in_text.jsonl").write_bytes(
        b"".join(b'{"text": "' + line.rstrip(b"\r") + b'"}\n' for line in raw_lines)
    )
    (out / "blns_lines_verbatim.jsonl").write_bytes(b"\n".join(raw_lines))
    decoded = []
    for line in (SHARED / "blns" / "blns.base64.txt").read_bytes().split(b"\n"):
        if line.strip() and not line.startswith(b"#"):
            try:
                decoded.append(base64.b64decode(line.strip(), validate=True))
            except ValueError:
                continue
    (out / "blns_base64_in_text.jsonl").write_bytes(
        b"".join(
            b'{"text": "' + d.replace(b"\n", b"\\n").replace(b"\r", b"\\r") + b'"}\n'
            for d in decoded
        )
    )


def _run(folder: Path, lake: Path, config: str) -> subprocess.CompletedProcess[str]:
    cfg = folder.parent / f"{lake.name}.toml"
    cfg.write_text(config, encoding="utf-8")
    inputs = (folder, folder / "gen" / "sub" / ".." / "sub")
    return run_lakecurate(
        "ingest", *inputs, "--lake", lake, "--config", cfg, "--workers", "2", timeout=600
    )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    """(input folder, lake, the completed ingest process)."""
    base = tmp_path_factory.mktemp("hostile")
    folder = base / "in"
    _build(folder)
    lake = base / "lake"
    return folder, lake, _run(folder, lake, CONFIG)


def _reader_lines(data: bytes) -> list[bytes]:
    """How a JSONL reader must see ``data``: split on LF, a trailing CR removed, no empty last
    part. Written independently of lakecurate.ingest.reader."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p[:-1] if p.endswith(b"\r") else p for p in parts]


def _decompressed(path: str, fmt: str, start: int | None, end: int | None) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if fmt == "jsonl":
        return data[start:end]
    if fmt == "jsonl.gz":
        return gzip.decompress(data)
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as r:
        return r.read()


def _rows(lake: Path) -> list[dict[str, Any]]:
    return (
        Lake.open(lake)
        .sql(
            "SELECT chunk_key, source_path, source_line, id, kept, reason, "
            "error, raw, text, meta FROM documents ORDER BY ALL"
        )
        .dicts()
    )


def _chunks(lake: Path) -> list[dict[str, Any]]:
    return Lake.open(lake).sql("SELECT * FROM chunks ORDER BY chunk_key").dicts()


def check_accounting(lake: Path) -> dict[str, list[dict[str, Any]]]:
    """Every chunk's counts add up and its rows are exactly its non-blank lines; returns the rows
    by source file name."""
    rows = _rows(lake)
    by_chunk: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_chunk.setdefault(r["chunk_key"], []).append(r)
    by_file: dict[str, list[dict[str, Any]]] = {}
    for c in _chunks(lake):
        mine = by_chunk.pop(c["chunk_key"], [])
        if c["status"] == "DEAD":
            assert mine == [], c["chunk_key"]
            continue
        assert c["status"] == "SUCCESS", c
        key = c["chunk_key"]
        assert c["rows_in"] == c["rows_kept"] + c["rows_dropped"] + c["rows_malformed"], c
        assert c["rows_in"] == len(mine), key
        assert c["rows_kept"] == sum(r["kept"] for r in mine), key
        assert c["rows_malformed"] == sum(
            (r["reason"] or "").startswith("malformed:") for r in mine
        ), key
        for r in mine:
            assert r["kept"] == (r["reason"] is None), r
            if (r["reason"] or "").startswith("malformed:"):
                assert r["raw"] is not None and r["error"], r
                assert r["id"] == f"{c['source_path']}:{r['source_line']}"
            if r["kept"]:
                assert r["raw"] is None and r["text"] is not None, r
        if c["format"] == "parquet":
            pf = pq.ParquetFile(c["source_path"])
            n = sum(
                pf.metadata.row_group(i).num_rows
                for i in range(c["row_group_start"], c["row_group_end"])
            )
            assert [r["source_line"] for r in mine] == list(
                range(c["first_line"], c["first_line"] + n)
            ), key
        else:
            lines = _reader_lines(
                _decompressed(c["source_path"], c["format"], c["byte_start"], c["byte_end"])
            )
            numbered = {c["first_line"] + i: raw for i, raw in enumerate(lines)}
            records = {n: raw for n, raw in numbered.items() if raw.strip()}
            blanks = len(numbered) - len(records)
            assert len(numbered) == len(mine) + blanks, key  # lines in = rows + blank lines
            assert sorted(r["source_line"] for r in mine) == sorted(records), key
            for r in mine:
                if (r["reason"] or "").startswith("malformed:"):
                    assert r["raw"] == records[r["source_line"]], (key, r["source_line"])
        by_file.setdefault(os.path.basename(c["source_path"]), []).extend(mine)
    assert by_chunk == {}, f"rows of no known chunk: {list(by_chunk)}"
    return by_file


def test_the_run_finishes_and_names_every_unreadable_file(hostile: tuple[Path, Path, Any]) -> None:
    folder, lake, done = hostile
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    assert done.returncode == 2, out  # file errors and a DEAD chunk, named; the rest ingested
    errors = [line for line in done.stdout.splitlines() if line.startswith("error: ")]
    for name, why in FILE_ERRORS.items():
        shown = (
            str(folder / "gen" / name)
            .encode("utf-8", "surrogateescape")
            .decode("utf-8", "backslashreplace")
        )
        assert any(shown in e and why in e for e in errors), (name, errors)
    if (folder / "gen" / "kernel_refuses.jsonl").exists():
        assert any("kernel_refuses.jsonl" in e and "cannot read" in e for e in errors), errors
    dead = [line for line in done.stdout.splitlines() if line.startswith("DEAD: ")]
    assert len(dead) == 1 and "truncated" in dead[0] and "gzip" in dead[0], dead
    for empty in ("empty.jsonl", "empty.jsonl.gz", "empty.jsonl.zst"):
        assert any(empty in n and "empty file" in n for n in done.stdout.splitlines()), empty
    assert not list(lake.rglob("*.tmp_*"))


def test_every_chunk_accounts_for_every_line(hostile: tuple[Path, Path, Any]) -> None:
    by_file = check_accounting(hostile[1])
    assert len(by_file) >= len(_cases()) - 4  # all but the empty and the truncated files


@pytest.mark.parametrize("name", sorted(n for n, (_, e) in _cases().items() if e))
def test_expected_outcome_per_line(name: str, hostile: tuple[Path, Path, Any]) -> None:
    rows = {r["source_line"]: r for r in check_accounting_cached(hostile[1])[name]}
    _, expected = _cases()[name]
    want_lines = {n for n, what in expected.items() if what is not None}
    for line, what in expected.items():
        if what is None:
            assert line not in rows, f"line {line} is blank and must not be a row"
            continue
        got = rows[line]
        assert (KEPT if got["kept"] else got["reason"]) == what, (line, got)
    assert want_lines <= set(rows)


_ACCOUNTING: dict[Path, dict[str, list[dict[str, Any]]]] = {}


def check_accounting_cached(lake: Path) -> dict[str, list[dict[str, Any]]]:
    if lake not in _ACCOUNTING:
        _ACCOUNTING[lake] = check_accounting(lake)
    return _ACCOUNTING[lake]


def test_what_is_kept_is_exactly_what_was_written(hostile: tuple[Path, Path, Any]) -> None:
    by_file = check_accounting_cached(hostile[1])
    texts = {r["text"] for rows in by_file.values() for r in rows if r["kept"]}
    # control characters are stripped in normalisation (rule version 2, docs/filters.md)
    assert "escaped NUL  inside a string" in texts
    assert "raw DEL  is allowed by JSON" in texts
    assert "text with \n inside" in texts  # CRLF inside a text is normalised to LF
    assert "a pair is fine \U0001f600" in texts
    assert "escaped backslash, not an escape: \\ud800" in texts
    big = [r for r in by_file["text_types.jsonl"] if r["kept"]]
    assert big[0]["id"] == "123456789012345678901234567890"
    extra = {r["id"]: r for r in by_file["extra_types.parquet"]}
    meta = json.loads(extra["x1"]["meta"])
    assert meta["tags"] == ["a", "b"] and meta["nested"] == {"k": 1} and meta["when"]
    dup = by_file["duplicate_keys.jsonl"][0]
    assert "duplicate key 'text'" in dup["error"]
    assert dup["raw"] == b'{"text": "first value", "text": "second value"}'
    bom = by_file["bom.jsonl"][0]
    assert bom["raw"].startswith(b"\xef\xbb\xbf") and "BOM" in bom["error"]
    binary = by_file["binary.jsonl"]
    assert binary and not any(r["kept"] for r in binary)
    inner = by_file["inner.jsonl"]
    assert len(inner) == 1  # named twice (folder and gen/sub/../sub), walked once


def test_reject_errors_are_readable(hostile: tuple[Path, Path, Any]) -> None:
    errors = {
        r["error"]
        for rows in check_accounting_cached(hostile[1]).values()
        for r in rows
        if r["error"]
    }
    assert not [e for e in errors if "at at" in e or "NoneType" in e]
    assert "'text' is null, not a string" in errors
    assert "a JSON array, not an object" in errors


# -- JSONTestSuite and the Big List of Naughty Strings (../shared/data/hostile) -----------------

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is not there")


# Rule version 2 (docs/usage.md, sql/worker/decide.sql `normalise`), written again in Python as
# this test's oracle: escape sequences and C0 controls but tab and LF removed, line-breaking
# controls made LF, C1 code points read as Windows-1252.
_ESCAPES = re.compile(
    r"\x1b[\]P^_X][^\x07\x1b\n]*(?:\x07|\x1b\\)|\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?|[^\x00-\x1f\x7f]\x08"
    r"|[\x00-\x08\x0e-\x1b\x1f\x7f\x81\x8d\x8f\x90\x9d]"
)
_BREAKS = re.compile(r"[\x0b\x0c\x1c-\x1e]")
_C1 = {
    c: bytes([c]).decode("cp1252")
    for c in range(0x80, 0xA0)
    if c not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}


def _normalised(s: str) -> str:
    """docs/usage.md: CRLF/CR -> LF, controls (rule version 2), NFC, outer whitespace
    (str.isspace) trimmed."""
    s = s.replace("\r\n", "\n").replace("\r", "\n")
    if re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", s):
        s = _BREAKS.sub("\n", _ESCAPES.sub("", s)).translate(_C1)
    return unicodedata.normalize("NFC", s).strip()


@needs_shared
def test_jsontestsuite_files_parse_as_the_suite_says(hostile: tuple[Path, Path, Any]) -> None:
    """``n_`` (must not parse) files are rejected however they are wrapped; ``y_`` (must parse)
    files are never a parse failure, and as the value of a field they are kept with that value
    intact in ``meta``; ``i_`` (either way) files are accounted like every line."""
    by_file = check_accounting_cached(hostile[1])
    wrappings = ("jts_verbatim.jsonl", "jts_as_text.jsonl", "jts_as_value.jsonl")
    rows = {w: {r["source_line"]: r for r in by_file[w]} for w in wrappings}
    parse_failures = ("malformed:bad_json", "malformed:invalid_utf8", "malformed:invalid_unicode")
    line, checked = 0, 0
    for path in sorted((SHARED / "jsontestsuite").glob("*.json")):
        raw = path.read_bytes().rstrip(b"\r\n")
        first, line = line + 1, line + 1 + raw.count(b"\n")
        if raw.count(b"\n"):
            continue  # spread over several lines: covered by the accounting check
        for wrapping in wrappings:
            got = rows[wrapping].get(first)
            if got is None:
                assert not raw.strip(), path.name  # a blank line
                continue
            checked += 1
            if path.name.startswith("n_"):
                assert got["reason"] in parse_failures, (wrapping, path.name, got["reason"])
            if path.name.startswith("y_"):
                assert got["reason"] not in parse_failures, (wrapping, path.name, got["error"])
        value_row = rows["jts_as_value.jsonl"][first]
        if path.name.startswith("y_"):
            assert value_row["kept"], (path.name, value_row["reason"])
            assert json.loads(value_row["meta"])["value"] == json.loads(raw), path.name
    assert checked >= 250
    for r in by_file["jts_as_text.jsonl"]:
        if r["kept"]:  # the id is the file's name
            value = json.loads((SHARED / "jsontestsuite" / f"{r['id']}.json").read_bytes())
            assert r["text"] == _normalised(value), r["id"]


@needs_shared
def test_naughty_strings_round_trip(hostile: tuple[Path, Path, Any]) -> None:
    by_file = check_accounting_cached(hostile[1])
    strings = json.loads((SHARED / "blns" / "blns.json").read_bytes())
    rows = {r["id"]: r for r in by_file["blns_json.jsonl"]}
    assert len(rows) == len(strings)
    seen: dict[str, str] = {}
    for i, s in enumerate(strings):
        r = rows[f"blns-{i}"]
        norm = _normalised(s)
        if r["kept"]:
            assert r["text"] == norm, (i, s)
            seen.setdefault(norm, r["id"])
        else:
            assert r["reason"] in ("filter:empty", "exact_dup"), (i, s, r["reason"])
            assert (norm == "") == (r["reason"] == "filter:empty"), (i, s)
    for name in (
        "blns_raw_in_text.jsonl",
        "blns_lines_verbatim.jsonl",
        "blns_base64_in_text.jsonl",
    ):
        assert by_file[name], name  # accounted line by line in check_accounting


# -- single cases with their own ingest ----------------------------------------------------------


def test_a_missing_path_is_one_clear_error(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "nowhere" / "data.jsonl"
    done = run_cli("ingest", missing, "--lake", tmp_path / "lake")
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: {missing}: no such file or folder"


def test_an_explicit_symlink_loop_is_one_clear_error(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    loop = tmp_path / "loop.jsonl"
    os.symlink(loop.name, loop)
    done = run_cli("ingest", loop, "--lake", tmp_path / "lake")
    assert done.returncode == 1
    assert (
        done.stderr.startswith(f"error: {loop}: not a readable file")
        and "Traceback" not in done.stderr
    )


def test_an_unreadable_file_is_a_file_error(tmp_path: Path, config_file: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "in"
    data.mkdir()
    (data / "fine.jsonl").write_bytes(_ok("readable") + b"\n")
    locked = data / "locked.jsonl"
    locked.write_bytes(_ok("unreadable") + b"\n")
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):
            pytest.skip(
                "running as root: chmod 000 does not stop reading (the EIO case of "
                "test_the_run_finishes_and_names_every_unreadable_file covers it)"
            )
        done = run_cli("ingest", data, "--lake", tmp_path / "lake", "--config", config_file)
    finally:
        locked.chmod(0o644)
    assert done.returncode == 2
    assert f"error: {locked}: cannot read (Permission denied)" in done.stdout
    assert Lake.open(tmp_path / "lake").sql("SELECT count(*) FROM docs").rows == [(1,)]


# -- a single 200 MB line: memory stays bounded -----------------------------------------------

LINE_MB = 200
# Measured (docs/reliability.md): driver ~2.7 GiB, worker ~1.4 GiB, whole run ~3.8 GiB for a
# 200 MiB line. A chunk is processed in memory, so the bound is per chunk, i.e. per longest
# line when one line is bigger than chunk_size: about 14 copies of it in the driver.
MAX_PROCESS_RSS = 16 * LINE_MB * 2**20 + 400 * 2**20
MAX_TOTAL_RSS = 24 * LINE_MB * 2**20 + 800 * 2**20


def _session_rss(sid: int) -> dict[int, int]:
    """RSS in bytes of every process of session ``sid``."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                if int(f.read().rsplit(")", 1)[1].split()[3]) != sid:
                    continue
            with open(f"/proc/{pid}/statm", encoding="ascii") as f:
                out[int(pid)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return out


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_a_200_mb_line_is_ingested_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    words = b"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod".split()
    rng = random.Random(1)
    with open(path, "wb") as f:
        f.write(_ok("a small document before") + b"\n")
        f.write(b'{"id": "huge", "text": "')
        block = b" ".join(rng.choice(words) for _ in range(200_000)) + b" "
        written = 0
        while written < LINE_MB * 2**20:
            f.write(block)
            written += len(block)
        f.write(b'"}\n' + _ok("a small document after") + b"\n")
    cfg = tmp_path / "lakecurate.toml"
    cfg.write_text('[ingest]\nchunk_size = "64KiB"\n', encoding="utf-8")
    proc = start_lakecurate(
        "ingest", path, "--lake", tmp_path / "lake", "--config", cfg, "--workers", "2"
    )
    peak_total, peak_each = 0, 0
    while proc.poll() is None:
        sizes = _session_rss(proc.pid)
        peak_total = max(peak_total, sum(sizes.values()))
        peak_each = max([peak_each, *sizes.values()])
        time.sleep(0.02)
    out, err = proc.communicate()
    assert proc.returncode == 0, out + err
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(
        f"peak RSS: whole run {peak_total / 2**20:.0f} MiB, largest process "
        f"{peak_each / 2**20:.0f} MiB (ru_maxrss of children {children / 2**20:.0f} MiB)"
    )
    assert peak_each <= MAX_PROCESS_RSS
    assert peak_total <= MAX_TOTAL_RSS
    rows = (
        Lake.open(tmp_path / "lake")
        .sql("SELECT id, kept, length(text) FROM documents ORDER BY source_line")
        .rows
    )
    assert [(r[0], r[1]) for r in rows] == [
        (f"{path}:1", True),
        ("huge", True),
        (f"{path}:3", True),
    ]
    assert rows[1][2] >= LINE_MB * 2**20


# -- a compression bomb: refused at the limit, memory bounded ---------------------------------

_PEAK_RSS = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(done.returncode)
print(done.stdout + done.stderr)
print("largest process", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


@pytest.mark.parametrize("fmt", ["gz", "zst"])
def test_a_compression_bomb_is_dead_at_once_with_bounded_memory(tmp_path: Path, fmt: str) -> None:
    """2 GiB in 4.6 MB of gzip (0.2 MB of zstd) once drove a worker past 9.5 GB (here 256 MiB,
    eight times the limit: the run's time is the planner decompressing it). Lines are cut
    into chunks of ``chunk_size`` now, so the bomb is one endless line: past
    ``max_compressed_chunk_bytes`` its chunk is DEAD on its first attempt, and no process of the
    run (the planner reads the whole stream) grows with the decompressed size."""
    block = b"a" * (64 << 20)
    member = gzip.compress(block, mtime=0) if fmt == "gz" else zstandard.compress(block)
    bomb = tmp_path / f"bomb.jsonl.{fmt}"
    with bomb.open("wb") as f:
        f.write(
            gzip.compress(b'{"text": "', mtime=0)
            if fmt == "gz"
            else zstandard.compress(b'{"text": "')
        )
        for _ in range(4):  # members / frames concatenate into one 256 MiB stream
            f.write(member)
    assert bomb.stat().st_size < 3 << 20
    fine = tmp_path / "fine.jsonl"
    fine.write_bytes(_ok("a small neighbour") + b"\n")
    cfg = tmp_path / "lakecurate.toml"
    cfg.write_text(
        '[ingest]\nmax_attempts = 3\nretry_backoff = 0.05\nmax_compressed_chunk_bytes = "32MiB"\n',
        encoding="utf-8",
    )
    lake = tmp_path / "lake"
    ingest = lakecurate_cmd("ingest", bomb, fine, "--lake", lake, "--config", cfg, "--workers", "2")
    cmd = [sys.executable, "-c", _PEAK_RSS, *ingest]
    done = subprocess.run(
        cmd, check=False, capture_output=True, text=True, cwd=ROOT, env=cli_env(), timeout=600
    )
    code, out = done.stdout.split("\n", 1)
    peak = int(out.rsplit("largest process ", 1)[1])
    assert code == "2", out + done.stderr  # a DEAD chunk, named; the rest ingested
    dead = [ln for ln in out.splitlines() if ln.startswith("DEAD: ")]
    assert len(dead) == 1 and f"{bomb} decompresses to more than" in dead[0], dead
    assert "max_compressed_chunk_bytes = 33554432 bytes (32 MiB)" in dead[0]
    chunks = {c["source_path"]: c for c in _chunks(lake)}
    assert (chunks[str(bomb)]["status"], chunks[str(bomb)]["attempts"]) == ("DEAD", 1)
    assert chunks[str(fine)]["status"] == "SUCCESS"
    print(f"largest process peak RSS {peak / 2**20:.0f} MiB")
    assert peak < 512 << 20, f"{peak / 2**20:.0f} MiB"  # about 200; half the stream is 512
