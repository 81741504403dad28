"""No silent loss of input (issue 16, item 2), through real files, lakes and CLI runs.

Every common JSON-lines name and compression is read and gives the same documents as the plain
``.jsonl`` of the same records; the record fields holding text and id are configurable; files
that are not read are named per kind; a file whose records are mostly malformed for one reason
ends the ingest with exit code 3 and a line saying what to change.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from helpers import PROSE, run_lakecurate

from lakecurate import Lake
from lakecurate.ingest import cutting
from lakecurate.types import Format

CONFIG = "[ingest]\nmax_attempts = 1\nretry_backoff = 0.05\n"
MALFORMED_EXIT = 3

_COMPRESS = {
    "": lambda b: b,
    ".gz": gzip.compress,
    ".zst": lambda b: zstandard.ZstdCompressor().compress(b),
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
}
# Every name with every compression; the default run keeps each name and each compression
# once (plain .jsonl and .ndjson, .json.gz, .jsonl with each other compression; .jsonl.gz is
# the suite corpus's web_b), `-m slow` runs the other combinations.
ALIASES = [
    name + comp
    if (name == ".jsonl" and comp != ".gz") or name + comp in (".ndjson", ".json.gz")
    else pytest.param(name + comp, marks=pytest.mark.slow)
    for name in (".jsonl", ".ndjson", ".json")
    for comp in _COMPRESS
    if name + comp != ".json"
]


def _records(n: int = 6, text: str = "text", id_: str = "id") -> list[dict[str, Any]]:
    return [
        {id_: f"doc-{i}", text: PROSE[i % len(PROSE)] + f" ({i})", "url": f"http://e/{i}"}
        for i in range(n)
    ]


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _write(path: Path, data: bytes) -> Path:
    """``data`` compressed as the name says (a name ending in none of them: as is)."""
    compression = next((c for c in _COMPRESS if c and path.name.endswith(c)), "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_COMPRESS[compression](data))
    return path


def _config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "lakecurate.toml"
    path.write_text(CONFIG + extra, encoding="utf-8")
    return path


def _documents(lake: Path) -> list[tuple[Any, ...]]:
    """What a lake holds, independent of the file's name: id, line, text, meta, decision."""
    return (
        Lake.open(lake)
        .sql(
            "SELECT id, source_line, text, meta, kept, reason, id_given FROM documents ORDER BY ALL"
        )
        .rows
    )


def _ingest(*args: object) -> tuple[int, str]:
    done = run_lakecurate("ingest", *args)
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    return done.returncode, out


# --- every format round-trips ----------------------------------------------------------------


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    """The documents of the plain ``.jsonl`` of the records every alias holds."""
    tmp = tmp_path_factory.mktemp("plain")
    _write(tmp / "in" / "web.jsonl", _jsonl(_records()))
    Lake.open(tmp / "lake").ingest([tmp / "in"], config=_config(tmp), workers=1)
    rows = _documents(tmp / "lake")
    assert len(rows) == 6 and all(r[4] for r in rows)  # all kept: a real comparison
    return rows


@pytest.mark.parametrize("suffix", ALIASES)
def test_every_alias_gives_the_documents_of_the_plain_jsonl(
    tmp_path: Path, suffix: str, plain: list[tuple[Any, ...]]
) -> None:
    _write(tmp_path / "in" / f"web{suffix}", _jsonl(_records()))
    report = Lake.open(tmp_path / "lake").ingest(
        [tmp_path / "in"], config=_config(tmp_path), workers=1
    )
    assert report.ok and not report.malformed and not report.skipped, report
    assert report.files == 1 and report.rows_kept == 6
    assert _documents(tmp_path / "lake") == plain
    key = Lake.open(tmp_path / "lake").sql("SELECT chunk_key FROM chunks").rows[0][0]
    assert key.startswith("web_00000_"), key  # the stem is the name without the whole suffix


@pytest.mark.parametrize("fmt", [Format.JSONL, Format.JSONL_GZ, Format.JSONL_ZST, Format.PARQUET])
def test_chunk_keys_of_the_formats_read_before_are_unchanged(tmp_path: Path, fmt: Format) -> None:
    """Chunks are content-addressed: a changed key would re-do every existing lake."""
    path = tmp_path / f"web.{fmt.value}"
    if fmt is Format.PARQUET:
        pq.write_table(pa.table({"text": ["a", "b"]}), path)
    else:
        _write(path, _jsonl(_records(2)))
    _, specs = cutting.plan_file(str(path), fmt, 1 << 30)
    (spec,) = specs
    assert spec.chunk_key == cutting.chunk_key("web", 0, str(path), 1, spec.input_sha256)


def test_a_truncated_bz2_or_xz_file_is_dead_with_its_format_named(tmp_path: Path) -> None:
    data = _jsonl(_records(200))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl.bz2").write_bytes(bz2.compress(data)[:-20])
    (tmp_path / "in" / "b.jsonl.xz").write_bytes(lzma.compress(data)[:-20])
    code, out = _ingest(tmp_path / "in", "--lake", tmp_path / "lake", "--config", _config(tmp_path))
    assert code == 2, out
    dead = [line for line in out.splitlines() if line.startswith("DEAD: ")]
    assert len(dead) == 2, out
    assert any("a.jsonl.bz2" in d and "bzip2" in d for d in dead), dead
    assert any("b.jsonl.xz" in d and "xz" in d for d in dead), dead


# --- the record fields -----------------------------------------------------------------------


@pytest.mark.parametrize(  # the default run keeps "content"
    "field", ["content", pytest.param("body", marks=pytest.mark.slow)]
)
def test_records_without_text_end_the_run_with_the_fix(tmp_path: Path, field: str) -> None:
    path = _write(tmp_path / "in" / "x.jsonl", _jsonl(_records(text=field)))
    code, out = _ingest(tmp_path / "in", "--lake", tmp_path / "lake", "--config", _config(tmp_path))
    assert code == MALFORMED_EXIT, out
    assert f"error: no `text` field in 6 of 6 records of {path}; set [input].text_field" in out
    assert "(fields seen: " in out and field in out.split("fields seen: ")[1], out
    # the lake is committed all the same, the records kept as rejected rows
    rows = _documents(tmp_path / "lake")
    assert [r[5] for r in rows] == ["malformed:missing_text"] * 6
    # said again on a re-run: the verdict comes from the lake, not from this run's work
    code, again = _ingest(tmp_path / "in", "--lake", tmp_path / "lake")
    assert code == MALFORMED_EXIT and "nothing to do" in again, again
    assert "no `text` field in 6 of 6 records" in again


def test_the_text_and_id_fields_are_read_from_where_they_are_named(tmp_path: Path) -> None:
    _write(tmp_path / "in" / "x.jsonl", _jsonl(_records(text="content", id_="doc_id")))
    code, out = _ingest(
        tmp_path / "in",
        "--lake",
        tmp_path / "lake",
        "--text-field",
        "content",
        "--id-field",
        "doc_id",
    )
    assert code == 0, out
    rows = (
        Lake.open(tmp_path / "lake")
        .sql("SELECT id, text, meta, id_given FROM docs ORDER BY id")
        .rows
    )
    assert len(rows) == 6
    assert rows[0] == ("doc-0", PROSE[0] + " (0)", json.dumps({"url": "http://e/0"}), True)
    toml = (tmp_path / "lake" / "lakecurate.toml").read_text(encoding="utf-8")
    assert '[input]\ntext_field = "content"\nid_field = "doc_id"' in toml
    # the lake remembers them; another field is another pipeline and is refused
    code, out = _ingest(tmp_path / "in", "--lake", tmp_path / "lake")
    assert code == 0 and "nothing to do" in out, out
    code, out = _ingest(tmp_path / "in", "--lake", tmp_path / "lake", "--text-field", "body")
    assert code == 1 and "would decide differently" in out, out


def test_the_input_section_of_a_config_file_is_the_option(tmp_path: Path) -> None:
    _write(tmp_path / "in" / "x.jsonl", _jsonl(_records(text="body")))
    cfg = _config(tmp_path, '\n[input]\ntext_field = "body"\n')
    code, out = _ingest(tmp_path / "in", "--lake", tmp_path / "lake", "--config", cfg)
    assert code == 0, out
    assert Lake.open(tmp_path / "lake").sql("SELECT count(*) FROM docs").rows[0][0] == 6


def test_a_parquet_text_column_of_ints_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "in" / "p.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"text": [1, 2, 3, 4], "title": ["a", "b", "c", "d"]}), path)
    code, out = _ingest(tmp_path / "in", "--lake", tmp_path / "lake")
    assert code == MALFORMED_EXIT, out
    line = next(x for x in out.splitlines() if x.startswith("error: "))
    assert f"`text` is not a string in 4 of 4 records of {path}" in line, line
    assert (
        "int64" in line and "set [input].text_field" in line and "fields seen: text, title" in line
    )


@pytest.mark.parametrize(("bad", "code"), [(2, 0), (3, MALFORMED_EXIT)])
def test_the_threshold_is_more_than_half_of_a_file(tmp_path: Path, bad: int, code: int) -> None:
    """2 of 4 records malformed is said in the lake only; 3 of 4 ends the run non-zero."""
    good = _jsonl(_records(4 - bad))
    broken = b"".join(b'{"id": %d, "text": ' % i + b"\n" for i in range(bad))
    _write(tmp_path / "in" / "x.jsonl", good + broken)
    got, out = _ingest(tmp_path / "in", "--lake", tmp_path / "lake")
    assert got == code, out
    assert (f"not valid JSON in {bad} of 4 records" in out) == (code != 0), out
    report = Lake.open(tmp_path / "lake2").ingest([tmp_path / "in"], workers=1)
    assert bool(report.malformed) == (code != 0), report.malformed


# --- files that are not read are named -------------------------------------------------------


def test_skipped_files_are_named_per_kind(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _write(folder / "good.jsonl", _jsonl(_records()))
    for name in ("notes.txt", "table.csv", "meta.json", "sub/more.txt"):
        _write(folder / name, b"x\n")
    _write(folder / "._good.jsonl", b"\x00\x05\x16\x07 mac resource fork")
    _write(folder / ".cache" / "x.jsonl", _jsonl(_records(2)))
    _write(folder / "empty.jsonl", b"")
    code, out = _ingest(folder, "--lake", tmp_path / "lake")
    assert code == 0, out
    lines = [x for x in out.splitlines() if x.startswith("note: skipped")]
    assert len(lines) == 3, out
    unsupported, hidden, empty = lines
    assert "skipped 4 file(s) (1 .csv, 1 .json, 2 .txt): not a format" in unsupported
    assert "rename a .json holding one JSON object per line to .jsonl" in unsupported
    assert all(str(folder / n) in unsupported for n in ("notes.txt", "table.csv", "meta.json"))
    assert "skipped 2 file(s): hidden" in hidden and str(folder / ".cache") in hidden, hidden
    assert str(folder / "._good.jsonl") in hidden
    assert "empty file" in empty and str(folder / "empty.jsonl") in empty
    assert Lake.open(tmp_path / "lake").sql("SELECT count(*) FROM docs").rows[0][0] == 6
    report = Lake.open(tmp_path / "lake").ingest([folder])
    assert report.skipped == [line.removeprefix("note: ") for line in lines]


def test_a_hidden_file_read_once_leaves_when_the_folder_alone_is_ingested(
    tmp_path: Path,
) -> None:
    """A folder walk passes hidden files over, so a clean run of the folder has none of their
    rows: one read before (named on the command line, or by an older lakecurate) leaves the
    lake when the folder alone is ingested again, as a removed file does."""
    folder = tmp_path / "in"
    _write(folder / "good.jsonl", _jsonl(_records(4)))
    hidden = [{"id": f"h-{i}", "text": f"A hidden note, number {i}. " + PROSE[i]} for i in range(3)]
    _write(folder / ".extra.jsonl", _jsonl(hidden))
    lake = tmp_path / "lake"
    code, out = _ingest(folder, folder / ".extra.jsonl", "--lake", lake)
    assert code == 0, out
    assert Lake.open(lake).sql("SELECT count(*) FROM docs").rows[0][0] == 7
    code, out = _ingest(folder, "--lake", lake)
    assert code == 0 and "no longer in the input folders" in out, out
    clean = tmp_path / "clean"
    assert _ingest(folder, "--lake", clean)[0] == 0
    query = "SELECT id, kept, reason FROM documents ORDER BY id"
    assert Lake.open(lake).sql(query).rows == Lake.open(clean).sql(query).rows


def test_a_folder_with_nothing_readable_says_what_it_skipped(tmp_path: Path) -> None:
    for name in ("a.txt", "b.csv", ".c.jsonl"):
        _write(tmp_path / "in" / name, b"x\n")
    code, out = _ingest(tmp_path / "in", "--lake", tmp_path / "lake")
    assert code == 1, out
    assert out.count("\n") == 1 and "(skipped: 1 hidden, 2 unsupported)" in out, out
    assert not (tmp_path / "lake").exists()


def test_many_skipped_files_show_a_few_and_the_count(tmp_path: Path) -> None:
    for i in range(12):
        _write(tmp_path / "in" / f"f{i:02d}.txt", b"x\n")
    _write(tmp_path / "in" / "good.jsonl", _jsonl(_records(1)))
    report = Lake.open(tmp_path / "lake").ingest([tmp_path / "in"], workers=1)
    (line,) = report.skipped
    assert line.startswith("skipped 12 file(s) (12 .txt)") and line.endswith("and 7 more"), line
