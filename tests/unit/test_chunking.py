"""Input discovery and deterministic, content-addressed chunk planning."""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from lakecurate.errors import InputError
from lakecurate.ingest import chunking, cutting
from lakecurate.types import ChunkSpec, Format

KEY = re.compile(r"^(?P<stem>[A-Za-z0-9._-]+)_(?P<index>\d{5})_(?P<hex>[0-9a-f]{8})$")


def _touch(path: Path, data: bytes = b'{"text": "x"}\n') -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _lines(n: int, seed: int = 1) -> bytes:
    """``n`` JSONL lines of varied lengths."""
    rng = random.Random(seed)
    return b"".join(
        b'{"id": %d, "text": "%s"}\n' % (i, b"w" * rng.randint(0, 120)) for i in range(n)
    )


def _plan(path: Path, chunk_size: int) -> tuple[str, list[ChunkSpec]]:
    fmt = chunking.detect_format(str(path))
    assert fmt is not None
    return cutting.plan_file(str(path), fmt, chunk_size)


def _check_jsonl(path: Path, sha: str, specs: list[ChunkSpec], chunk_size: int) -> None:
    """Every invariant of a plain-JSONL plan, checked against the file's bytes."""
    data = path.read_bytes()
    assert specs, "a non-empty file has chunks"
    assert specs[0].byte_start == 0
    assert specs[-1].byte_end == len(data)
    stem = path.name[: -len(".jsonl")]
    for i, s in enumerate(specs):
        assert s.byte_start is not None
        assert s.byte_end is not None
        piece = data[s.byte_start : s.byte_end]
        if i + 1 < len(specs):
            assert specs[i + 1].byte_start == s.byte_end  # contiguous
            assert piece.endswith(b"\n")
            assert len(piece) >= chunk_size
            # the cut is the first newline at or after the target size, not a later one
            assert b"\n" not in piece[chunk_size - 1 : -1]
        assert piece, "no empty chunks"
        assert s.chunk_index == i
        assert s.format is Format.JSONL
        assert s.source_path == str(path)
        assert s.source_sha256 == sha
        assert s.first_line == data[: s.byte_start].count(b"\n") + 1
        assert s.input_bytes == len(piece)
        assert s.input_sha256 == hashlib.sha256(piece).hexdigest()
        assert s.chunk_key == cutting.chunk_key(stem, i, str(path), s.first_line, s.input_sha256)
        assert s.row_group_start is None
        assert s.row_group_end is None


# --- discover ------------------------------------------------------------------------------------


def test_discover_walks_folders_recursively_sorted_and_skips_unknown(tmp_path: Path) -> None:
    root = tmp_path / "in"
    wanted = [
        _touch(root / "z.jsonl"),
        _touch(root / "a" / "b" / "deep.jsonl.gz"),
        _touch(root / "a" / "c.parquet"),
        _touch(root / "m" / "x.jsonl.zst"),
        _touch(root / "UPPER.JSONL"),
        _touch(root / "a" / "b" / "x.jsonl.bz2"),
    ]
    for junk in ("notes.txt", "data.json", "README", "a/b/x.jsonl.lz4", "m/x.gz", "a/.jsonl~"):
        _touch(root / junk)
    skipped: dict[str, list[str]] = {}
    found = chunking.discover([root], skipped=skipped)
    assert sorted(skipped[chunking.SKIP_UNSUPPORTED]) == sorted(
        str(root / j) for j in ("notes.txt", "data.json", "README", "a/b/x.jsonl.lz4", "m/x.gz")
    )
    assert skipped[chunking.SKIP_HIDDEN] == [str(root / "a" / ".jsonl~")]
    assert found == sorted(found)
    assert [p for p, _ in found] == sorted(str(p) for p in wanted)
    formats = dict(found)
    assert formats[str(root / "a" / "b" / "deep.jsonl.gz")] is Format.JSONL_GZ
    assert formats[str(root / "a" / "c.parquet")] is Format.PARQUET
    assert formats[str(root / "m" / "x.jsonl.zst")] is Format.JSONL_ZST
    assert formats[str(root / "UPPER.JSONL")] is Format.JSONL
    assert all(os.path.isabs(p) for p, _ in found)


def test_discover_explicit_files_and_folders_are_merged_once(tmp_path: Path) -> None:
    f = _touch(tmp_path / "d" / "one.jsonl")
    g = _touch(tmp_path / "two.jsonl")
    found = chunking.discover([tmp_path / "d", f, str(g), tmp_path / "d"])
    assert found == [(str(f), Format.JSONL), (str(g), Format.JSONL)]


def test_discover_relative_paths_become_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = _touch(tmp_path / "rel.jsonl")
    monkeypatch.chdir(tmp_path)
    assert chunking.discover(["rel.jsonl"]) == [(str(f), Format.JSONL)]


def test_discover_explicit_unknown_suffix_is_an_error(tmp_path: Path) -> None:
    f = _touch(tmp_path / "data.json")
    with pytest.raises(InputError) as exc:
        chunking.discover([f])
    assert str(f) in str(exc.value)
    assert "unknown input format" in str(exc.value)


def test_discover_missing_path_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "x.jsonl"
    with pytest.raises(InputError) as exc:
        chunking.discover([_touch(tmp_path / "ok.jsonl"), missing])
    assert str(missing) in str(exc.value)
    assert "no such file" in str(exc.value)


def test_discover_broken_link_is_an_error(tmp_path: Path) -> None:
    link = tmp_path / "dangling.jsonl"
    os.symlink(tmp_path / "gone.jsonl", link)
    with pytest.raises(InputError, match="broken link"):
        chunking.discover([link])


def test_discover_empty_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    _touch(empty / "only.txt")
    with pytest.raises(InputError) as exc:
        chunking.discover(p for p in [empty])  # a generator: the message must still name it
    assert "no input files found" in str(exc.value)
    assert str(empty) in str(exc.value)


def test_discover_does_not_follow_a_symlink_loop(tmp_path: Path) -> None:
    root = tmp_path / "loop"
    f = _touch(root / "sub" / "a.jsonl")
    g = _touch(root / "b.jsonl")
    os.symlink(root, root / "sub" / "back")  # sub/back -> loop/ (a cycle)
    os.symlink(root / "sub", root / "side")  # a second way into sub/
    found = chunking.discover([root])
    assert found == [(str(g), Format.JSONL), (str(f), Format.JSONL)]


# --- plan_file: plain JSONL ----------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 50, 200, 1000, 10**9])
def test_jsonl_chunks_cover_the_file_on_line_boundaries(tmp_path: Path, chunk_size: int) -> None:
    path = _touch(tmp_path / "web.jsonl", _lines(300))
    sha, specs = _plan(path, chunk_size)
    _check_jsonl(path, sha, specs, chunk_size)
    if chunk_size == 1:
        assert len(specs) == 300  # one line per chunk
    if chunk_size == 10**9:
        assert len(specs) == 1


def test_jsonl_plan_across_read_blocks(tmp_path: Path) -> None:
    """A file larger than the 8 MiB read block: cuts near and across block boundaries."""
    rng = random.Random(5)
    parts, size = [], 0
    while size < 9 * 1024 * 1024:
        line = b'{"text": "%s"}\n' % (b"q" * rng.randint(0, 40_000))
        parts.append(line)
        size += len(line)
    path = _touch(tmp_path / "big.jsonl", b"".join(parts))
    for chunk_size in (3 * 1024 * 1024, 8 * 1024 * 1024 - 7, 8 * 1024 * 1024 + 1):
        sha, specs = _plan(path, chunk_size)
        _check_jsonl(path, sha, specs, chunk_size)
        assert len(specs) >= 2


def test_jsonl_plan_is_deterministic_and_content_addressed(tmp_path: Path) -> None:
    data = _lines(200)
    a = _touch(tmp_path / "one" / "web.jsonl", data)
    b = _touch(tmp_path / "two" / "web.jsonl", data)
    sha1, first = _plan(a, 500)
    sha2, again = _plan(a, 500)
    assert (sha1, first) == (sha2, again)
    sha3, elsewhere = _plan(b, 500)
    assert sha3 == sha1
    assert [s.input_sha256 for s in elsewhere] == [s.input_sha256 for s in first]
    # the same bytes in another file are that file's own chunks (issue 12, D6)
    assert not {s.chunk_key for s in elsewhere} & {s.chunk_key for s in first}
    assert [s.chunk_key[:-8] for s in elsewhere] == [s.chunk_key[:-8] for s in first]
    assert {s.source_path for s in elsewhere} == {str(b)}


def test_appending_changes_only_the_tail(tmp_path: Path) -> None:
    chunk_size = 1000
    data = _lines(100)
    path = _touch(tmp_path / "grow.jsonl", data)
    old_sha, old = _plan(path, chunk_size)
    assert old[-1].input_bytes < chunk_size  # the tail chunk is short, so appending extends it
    path.write_bytes(data + _lines(40, seed=2))
    new_sha, new = _plan(path, chunk_size)
    _check_jsonl(path, new_sha, new, chunk_size)
    assert len(new) > len(old)
    n = len(old) - 1
    assert [(s.chunk_key, s.byte_start, s.byte_end, s.first_line) for s in new[:n]] == [
        (s.chunk_key, s.byte_start, s.byte_end, s.first_line) for s in old[:n]
    ]
    assert new[n].chunk_key != old[n].chunk_key
    assert new[n].byte_start == old[n].byte_start
    assert new_sha != old_sha


def test_a_line_larger_than_the_chunk_size_is_never_split(tmp_path: Path) -> None:
    huge = b'{"text": "' + b"h" * 5000 + b'"}\n'
    path = _touch(tmp_path / "huge.jsonl", huge)
    sha, specs = _plan(path, 100)
    assert len(specs) == 1
    assert (specs[0].byte_start, specs[0].byte_end) == (0, len(huge))
    path.write_bytes(b'{"text": "a"}\n' + huge + b'{"text": "b"}\n' + huge)
    sha, specs = _plan(path, 100)
    _check_jsonl(path, sha, specs, 100)
    assert [s.first_line for s in specs] == [1, 3]


def test_file_without_trailing_newline(tmp_path: Path) -> None:
    data = _lines(50).rstrip(b"\n")
    path = _touch(tmp_path / "open.jsonl", data)
    sha, specs = _plan(path, 300)
    _check_jsonl(path, sha, specs, 300)
    assert not data[specs[-1].byte_start : specs[-1].byte_end].endswith(b"\n")
    last = data[specs[-1].byte_start :]
    assert specs[-1].first_line + last.count(b"\n") == 50  # the last line is line 50


def test_single_line_without_newline_is_one_chunk(tmp_path: Path) -> None:
    path = _touch(tmp_path / "one.jsonl", b'{"text": "only"}')
    sha, specs = _plan(path, 1)
    _check_jsonl(path, sha, specs, 1)
    assert len(specs) == 1


def test_empty_file_has_no_chunks(tmp_path: Path) -> None:
    path = _touch(tmp_path / "empty.jsonl", b"")
    sha, specs = _plan(path, 100)
    assert specs == []
    assert sha == hashlib.sha256().hexdigest()


def test_blank_lines_are_counted_in_first_line(tmp_path: Path) -> None:
    data = b"\n\n" + b'{"text": "a"}\n' + b"\r\n   \n" + b'{"text": "b"}\n' * 3
    path = _touch(tmp_path / "blanks.jsonl", data)
    sha, specs = _plan(path, 1)
    _check_jsonl(path, sha, specs, 1)
    assert [s.first_line for s in specs] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_unsafe_characters_in_the_stem_are_replaced(tmp_path: Path) -> None:
    path = _touch(tmp_path / "my data (v2).jsonl")
    _, specs = _plan(path, 100)
    m = KEY.match(specs[0].chunk_key)
    assert m is not None
    assert m.group("stem") == "my_data_v2_"
    assert m.group("index") == "00000"
    assert specs[0].chunk_key == cutting.chunk_key(
        "my_data_v2_", 0, str(path), 1, specs[0].input_sha256
    )


# --- plan_file: compressed JSONL -----------------------------------------------------------------


_COMPRESSED = [("web.jsonl.gz", Format.JSONL_GZ), ("web.jsonl.zst", Format.JSONL_ZST)]


def _compress(fmt: Format, raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0) if fmt is Format.JSONL_GZ else zstandard.compress(raw)


@pytest.mark.parametrize(("name", "fmt"), _COMPRESSED)
def test_compressed_jsonl_that_fits_is_one_chunk_named_by_the_file(
    tmp_path: Path, name: str, fmt: Format
) -> None:
    raw = _lines(2000)
    data = _compress(fmt, raw)
    path = _touch(tmp_path / name, data)
    sha, specs = cutting.plan_file(str(path), fmt, len(raw))  # the text fits exactly
    digest = hashlib.sha256(data).hexdigest()
    assert sha == digest
    (s,) = specs
    assert s.format is fmt and not s.is_slice
    assert (s.byte_start, s.byte_end, s.input_bytes) == (0, len(data), len(data))
    assert (s.first_line, s.chunk_index) == (1, 0)
    assert s.input_sha256 == s.source_sha256 == digest
    assert s.chunk_key == cutting.chunk_key("web", 0, str(path), 1, digest)  # as it always was


@pytest.mark.parametrize(("name", "fmt"), _COMPRESSED)
@pytest.mark.parametrize("chunk_size", [1, 100, 5000, 40_000])
def test_larger_compressed_jsonl_is_cut_like_its_text(
    tmp_path: Path, name: str, fmt: Format, chunk_size: int
) -> None:
    """Slices of a compressed file are cut exactly where the same text, uncompressed, is cut."""
    raw = _lines(2000)
    plain = _touch(tmp_path / "plain" / "web.jsonl", raw)
    path = _touch(tmp_path / name, _compress(fmt, raw))
    sha, specs = cutting.plan_file(str(path), fmt, chunk_size)
    plain_sha, plain_specs = cutting.plan_file(str(plain), Format.JSONL, chunk_size)
    assert len(specs) == len(plain_specs) > 1
    assert sha == plain_sha  # the pieces' digests, in order
    for s, p in zip(specs, plain_specs, strict=True):
        assert s.is_slice and s.format is fmt and s.source_sha256 == sha
        fields = ("byte_start", "byte_end", "first_line", "input_sha256", "input_bytes")
        assert [getattr(s, f) for f in fields] == [getattr(p, f) for f in fields]
        assert s.chunk_key == cutting.chunk_key(
            "web", s.chunk_index, str(path), s.first_line, s.input_sha256
        )
    assert _plan(path, chunk_size) == (sha, specs)


@pytest.mark.parametrize(("name", "fmt"), _COMPRESSED)
def test_corrupt_compressed_file_stays_one_chunk(tmp_path: Path, name: str, fmt: Format) -> None:
    """Planning does not fail on a stream that does not decompress: its worker says what is
    wrong with it (the chunk goes DEAD with the corrupt-stream message)."""
    data = _compress(fmt, _lines(2000))[:-40] + b"garbage!" * 5
    path = _touch(tmp_path / name, data)
    (s,) = cutting.plan_file(str(path), fmt, 100)[1]
    assert not s.is_slice and s.input_sha256 == hashlib.sha256(data).hexdigest()


def test_empty_compressed_file_has_no_chunks(tmp_path: Path) -> None:
    path = _touch(tmp_path / "nothing.jsonl.gz", b"")
    assert _plan(path, 100)[1] == []


# --- plan_file: Parquet --------------------------------------------------------------------------


def _write_parquet(path: Path, texts: list[str], row_group_size: int) -> None:
    table = pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts})
    pq.write_table(table, path, row_group_size=row_group_size)


def _check_parquet(path: Path, sha: str, specs: list[ChunkSpec]) -> None:
    md = pq.ParquetFile(path).metadata
    assert specs[0].row_group_start == 0
    assert specs[-1].row_group_end == md.num_row_groups
    rows_before = 0
    for i, s in enumerate(specs):
        assert s.row_group_start is not None
        assert s.row_group_end is not None
        assert s.row_group_start < s.row_group_end
        if i + 1 < len(specs):
            assert specs[i + 1].row_group_start == s.row_group_end
        assert s.first_line == rows_before + 1
        rows_before += sum(
            md.row_group(g).num_rows for g in range(s.row_group_start, s.row_group_end)
        )
        assert s.format is Format.PARQUET
        assert s.chunk_index == i
        assert s.source_sha256 == sha
        assert s.byte_start is None
        assert s.input_bytes > 0
        assert s.chunk_key == cutting.chunk_key(
            path.name[: -len(".parquet")], i, str(path), s.first_line, s.input_sha256
        )
    assert rows_before == md.num_rows


def test_parquet_one_chunk_per_row_group_with_a_tiny_chunk_size(tmp_path: Path) -> None:
    path = tmp_path / "books.parquet"
    _write_parquet(path, [f"text {i}" for i in range(35)], row_group_size=10)
    sha, specs = _plan(path, 1)
    _check_parquet(path, sha, specs)
    assert [(s.row_group_start, s.row_group_end) for s in specs] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert [s.first_line for s in specs] == [1, 11, 21, 31]
    assert len({s.chunk_key for s in specs}) == 4


@pytest.mark.parametrize("chunk_size", [1, 500, 1000, 3000, 10**9])
def test_parquet_groups_of_row_groups_are_contiguous(tmp_path: Path, chunk_size: int) -> None:
    path = tmp_path / "books.parquet"
    rng = random.Random(3)
    _write_parquet(path, ["x" * rng.randint(1, 60) for _ in range(200)], row_group_size=13)
    sha, specs = _plan(path, chunk_size)
    _check_parquet(path, sha, specs)
    if chunk_size == 10**9:
        assert len(specs) == 1
    assert _plan(path, chunk_size) == (sha, specs)


def test_parquet_changing_one_row_group_changes_only_its_key(tmp_path: Path) -> None:
    path = tmp_path / "books.parquet"
    texts = [f"book text {i}" for i in range(40)]
    _write_parquet(path, texts, row_group_size=10)
    old_sha, old = _plan(path, 1)
    texts[15] = "a rather longer replacement for one document " * 4  # shifts later groups
    _write_parquet(path, texts, row_group_size=10)
    new_sha, new = _plan(path, 1)
    _check_parquet(path, new_sha, new)
    assert [a.chunk_key == b.chunk_key for a, b in zip(old, new, strict=True)] == [
        True,
        False,
        True,
        True,
    ]
    assert new_sha != old_sha


def test_parquet_of_another_name_has_its_own_keys(tmp_path: Path) -> None:
    texts = [f"t{i}" for i in range(20)]
    _write_parquet(tmp_path / "a.parquet", texts, row_group_size=10)
    _write_parquet(tmp_path / "b.parquet", texts, row_group_size=10)
    _, a = _plan(tmp_path / "a.parquet", 1)
    _, b = _plan(tmp_path / "b.parquet", 1)
    assert [s.input_sha256 for s in a] == [s.input_sha256 for s in b]
    assert not {s.chunk_key for s in a} & {s.chunk_key for s in b}


@pytest.mark.parametrize("data", [b"", b"this is not parquet at all", b"PAR1" + b"\0" * 40])
def test_non_parquet_named_parquet_is_an_input_error(tmp_path: Path, data: bytes) -> None:
    path = _touch(tmp_path / "fake.parquet", data)
    with pytest.raises(InputError) as exc:
        _plan(path, 100)
    assert str(path) in str(exc.value)
