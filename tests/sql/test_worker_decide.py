"""``worker.process_chunk`` end to end: normalisation, the empty filter, within-chunk exact dedup
(``sql/worker/decide.sql``), the funnel, and the staged file."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakecurate.ingest import cutting, worker
from lakecurate.ingest import staging as staged_file
from lakecurate.lake.storage import Location
from lakecurate.schema import DOCUMENT_SCHEMA
from lakecurate.types import ChunkResult, ChunkSpec, Format, WorkOrder


def _line(text: object, doc_id: object = None, **meta: object) -> bytes:
    rec: dict[str, object] = {} if doc_id is None else {"id": doc_id}
    rec["text"] = text
    rec.update(meta)
    return json.dumps(rec).encode()


def _plan(path: Path, chunk_size: int = 1 << 30) -> list[ChunkSpec]:
    return cutting.plan_file(str(path), Format.JSONL, chunk_size)[1]


def _process(
    tmp_path: Path, lines: list[bytes], *, exact: bool = True, name: str = "w.jsonl"
) -> tuple[ChunkResult, list[dict[str, Any]]]:
    """Write ``lines`` as one JSONL chunk, process it; the result and the staged rows."""
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    (spec,) = _plan(path)
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    order = WorkOrder(staging_dir=str(staging), run_id="r", config_hash="c", exact_dedup=exact)
    result = worker.process_chunk(spec, order)
    return result, pq.read_table(result.staged_path).to_pylist()


def _md5(s: str) -> str:
    return hashlib.md5(s.encode()).hexdigest()


def test_normalisation_gives_variants_the_same_hash(tmp_path: Path) -> None:
    variants = [
        "Café au lait\nzweite Zeile",
        "Cafe\u0301 au lait\nzweite Zeile",  # NFD -> NFC
        "Café au lait\r\nzweite Zeile",  # CRLF -> LF
        "Café au lait\rzweite Zeile",  # lone CR -> LF
        "  \tCafé au lait\nzweite Zeile \n\n",  # outer whitespace
        "\u00a0\u3000Café au lait\nzweite Zeile\u2028",  # Unicode outer whitespace
        "\r\n Cafe\u0301 au lait\r\nzweite Zeile\r\n",
    ]
    result, rows = _process(
        tmp_path, [_line(v, f"v{i}") for i, v in enumerate(variants)], exact=False
    )
    norm = "Café au lait\nzweite Zeile"
    assert [r["text"] for r in rows] == [norm] * len(variants)
    assert {r["content_hash"] for r in rows} == {_md5(norm)}
    assert all(r["kept"] for r in rows)
    assert result.rows_kept == len(variants)


def test_inner_differences_are_not_normalised_away(tmp_path: Path) -> None:
    texts = ["a b", "a  b", "a\tb", "a\nb", "A b", "a b."]
    _, rows = _process(tmp_path, [_line(t) for t in texts])
    assert [r["text"] for r in rows] == texts
    assert len({r["content_hash"] for r in rows}) == len(texts)
    assert all(r["kept"] for r in rows)


@pytest.mark.parametrize("exact", [True, False])
def test_empty_and_whitespace_only_text_is_filtered(tmp_path: Path, exact: bool) -> None:
    empties = ["", " ", "   \n\t  ", "\n\n", "\r\n", " \t \t ", "\u00a0", "\u3000\u2003"]
    lines = [_line("real", "keep"), *(_line(t, f"e{i}") for i, t in enumerate(empties))]
    result, rows = _process(tmp_path, lines, exact=exact)
    assert rows[0]["kept"] is True
    assert rows[0]["reason"] is None
    for r in rows[1:]:
        assert r["kept"] is False
        assert r["reason"] == "filter:empty"
        assert r["text"] == ""
        assert r["content_hash"] is None
        assert r["dup_of"] is None  # empties are not duplicates of each other
    assert result.rows_kept == 1
    assert result.rows_dropped == len(empties)
    assert dict((s, d) for s, _, d in result.filter_stats)["filter:empty"] == len(empties)


def test_within_chunk_duplicates_keep_the_first_line(tmp_path: Path) -> None:
    lines = [
        _line("alpha", "a1"),  # 1
        _line("beta", "b1"),  # 2
        _line("alpha", "a2"),  # 3 dup of a1
        b"{broken",  # 4
        _line(" alpha\n", "a3"),  # 5 dup of a1 after normalisation
        _line("beta", "b2"),  # 6 dup of b1
        _line("gamma"),  # 7 no id
        _line("gamma", "g2"),  # 8 dup of w.jsonl:7
        _line("alpha", "a1"),  # 9 same id again, still a dup
    ]
    result, rows = _process(tmp_path, lines)
    got = [(r["id"], r["kept"], r["reason"], r["dup_of"]) for r in rows]
    derived = f"{tmp_path / 'w.jsonl'}"  # ids derived from the full path: unique in a lake
    assert got == [
        ("a1", True, None, None),
        ("b1", True, None, None),
        ("a2", False, "exact_dup", "a1"),
        (f"{derived}:4", False, "malformed:bad_json", None),
        ("a3", False, "exact_dup", "a1"),
        ("b2", False, "exact_dup", "b1"),
        (f"{derived}:7", True, None, None),
        ("g2", False, "exact_dup", f"{derived}:7"),
        ("a1", False, "exact_dup", "a1"),
    ]
    dups = [r for r in rows if r["reason"] == "exact_dup"]
    by_id = {r["id"]: r for r in rows if r["kept"]}
    for d in dups:
        assert d["content_hash"] == by_id[d["dup_of"]]["content_hash"]
    assert result.rows_kept == 3
    assert result.rows_malformed == 1
    assert result.rows_dropped == 5


def test_without_exact_dedup_duplicates_are_kept(tmp_path: Path) -> None:
    lines = [_line("same", f"s{i}") for i in range(5)] + [_line("", "e")]
    result, rows = _process(tmp_path, lines, exact=False)
    assert [r["kept"] for r in rows] == [True] * 5 + [False]
    assert [r["reason"] for r in rows] == [None] * 5 + ["filter:empty"]
    assert all(r["dup_of"] is None for r in rows)
    assert len({r["content_hash"] for r in rows[:5]}) == 1
    assert result.filter_stats[-1] == ("exact_dup:chunk", 5, 0)


def test_dedup_is_per_chunk(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    path.write_bytes(_line("dup", "x1") + b"\n" + _line("dup", "x2") + b"\n")
    specs = _plan(path, chunk_size=1)
    assert len(specs) == 2
    order = WorkOrder(staging_dir=str(tmp_path), run_id="r", config_hash="c")
    results = [worker.process_chunk(s, order) for s in specs]
    assert [r.rows_kept for r in results] == [1, 1]  # lake-wide dedup is the driver's job


def test_funnel_adds_up(tmp_path: Path) -> None:
    lines = [
        _line("one", "1"),
        _line("two", "2"),
        _line("one", "3"),
        b"",
        b"   ",
        _line(""),
        _line("  "),
        b"[1]",
        b'{"text": 5}',
        b"\xff",
        _line("two"),
        _line("three"),
        b'{"no": "text"}',
        _line("one"),
    ]
    result, rows = _process(tmp_path, lines)
    assert result.blank_lines == 2
    assert result.rows_in == len(rows) == len(lines) - 2
    assert result.rows_in == result.rows_kept + result.rows_dropped + result.rows_malformed
    assert (result.rows_kept, result.rows_dropped, result.rows_malformed) == (3, 5, 4)
    assert result.rows_kept == sum(r["kept"] for r in rows)
    assert result.rows_malformed == sum(
        r["reason"].startswith("malformed:") for r in rows if r["reason"]
    )
    n, m, e, d = result.rows_in, 4, 2, 3
    assert result.filter_stats == [
        ("parse", n, m),
        ("filter:empty", n - m, e),
        ("exact_dup:chunk", n - m - e, d),
    ]
    step_in, dropped = result.filter_stats[-1][1:]
    assert step_in - dropped == result.rows_kept
    malformed = sorted(r["reason"] for r in rows if r["reason"] and "malformed" in r["reason"])
    assert malformed == [
        "malformed:invalid_utf8",
        "malformed:missing_text",
        "malformed:not_object",
        "malformed:text_not_string",
    ]


def test_malformed_rows_keep_raw_and_error(tmp_path: Path) -> None:
    _, rows = _process(tmp_path, [_line("ok"), b'{"text": "caf\xe9"}', b"{oops"])
    bad = rows[1:]
    assert [r["raw"] for r in bad] == [b'{"text": "caf\xe9"}', b"{oops"]
    assert [r["reason"] for r in bad] == ["malformed:invalid_utf8", "malformed:bad_json"]
    for r in bad:
        assert r["kept"] is False
        assert r["text"] is None
        assert r["content_hash"] is None
        assert r["error"]
    assert rows[0]["raw"] is None
    assert rows[0]["error"] is None


def test_staged_file_is_final_and_carries_the_result(tmp_path: Path) -> None:
    lines = [_line(f"doc {i % 7}", f"id{i}", url=f"u{i}") for i in range(30)]
    result, rows = _process(tmp_path, lines)
    staging = tmp_path / "staging"
    (spec,) = _plan(tmp_path / "w.jsonl")
    path = Path(result.staged_path)
    assert path == staging / f"{spec.chunk_key}.c.parquet"
    assert path.is_file()
    assert os.listdir(staging) == [path.name]  # no .tmp_ leftovers
    assert staged_file.read_staged_result(Location.of(path)) == result
    assert result.chunk_key == spec.chunk_key
    assert result.input_sha256 == spec.input_sha256
    assert result.config_hash == "c"
    table = pq.read_table(path)
    assert table.schema.remove_metadata() == DOCUMENT_SCHEMA
    for r in rows:
        assert (
            r["chunk_key"],
            r["source_path"],
            r["input_sha256"],
            r["run_id"],
            r["config_hash"],
        ) == (spec.chunk_key, spec.source_path, spec.input_sha256, "r", "c")
        assert r["lang"] is None
    assert [json.loads(r["meta"]) for r in rows] == [{"url": f"u{i}"} for i in range(30)]
    # processing the same chunk again replaces the file, atomically, with the same content
    again = worker.process_chunk(
        spec, WorkOrder(staging_dir=str(staging), run_id="r", config_hash="c")
    )
    assert os.listdir(staging) == [path.name]
    assert pq.read_table(path).to_pylist() == rows
    assert (again.rows_in, again.rows_kept, again.filter_stats) == (
        result.rows_in,
        result.rows_kept,
        result.filter_stats,
    )


def test_read_staged_result_of_missing_or_foreign_file(tmp_path: Path) -> None:
    assert staged_file.read_staged_result(Location.of(tmp_path / "absent.parquet")) is None
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"x": [1]}), foreign)
    assert staged_file.read_staged_result(Location.of(foreign)) is None


def test_rows_are_ordered_by_source_line(tmp_path: Path) -> None:
    lines: list[bytes] = []
    expected: list[tuple[int, str]] = []
    for i in range(1, 401):
        if i % 11 == 0:
            lines.append(b"")  # blank: no row, but the line still counts
            continue
        lines.append(_line(f"text {(i * 7919) % 37}", f"n{i}"))
        expected.append((i, f"n{i}"))
    _, rows = _process(tmp_path, lines)
    assert [(r["source_line"], r["id"]) for r in rows] == expected
    # and each row's text is the one on that line of the file
    file_lines = (tmp_path / "w.jsonl").read_bytes().split(b"\n")
    for r in rows:
        assert json.loads(file_lines[r["source_line"] - 1])["id"] == r["id"]


def test_source_lines_of_a_later_chunk(tmp_path: Path) -> None:
    path = tmp_path / "later.jsonl"
    path.write_bytes(b"".join(_line(f"t{i}", f"k{i}") + b"\n" for i in range(1, 51)))
    specs = _plan(path, chunk_size=300)
    assert len(specs) > 2
    order = WorkOrder(staging_dir=str(tmp_path), run_id="r", config_hash="c")
    seen = []
    for spec in specs:
        res = worker.process_chunk(spec, order)
        seen += [(r["source_line"], r["id"]) for r in pq.read_table(res.staged_path).to_pylist()]
    assert seen == [(i, f"k{i}") for i in range(1, 51)]


def test_cjk_without_spaces(tmp_path: Path) -> None:
    cjk = "日本語のテキストには空白がありません。中文也没有空格。한국어"
    _, rows = _process(
        tmp_path, [_line(cjk, "j1"), _line(f"\u3000{cjk}\n", "j2"), _line(cjk + "。", "j3")]
    )
    assert rows[0]["text"] == cjk
    assert rows[0]["content_hash"] == _md5(cjk)
    assert (rows[1]["reason"], rows[1]["dup_of"]) == ("exact_dup", "j1")
    assert rows[2]["kept"] is True


def test_one_very_long_line(tmp_path: Path) -> None:
    long_text = ("lorem ipsum dolor sit amet " * 40_000)[:1_000_000]
    assert len(long_text) == 1_000_000
    result, rows = _process(
        tmp_path, [_line("short", "s"), _line(long_text, "big"), _line(long_text, "big2")]
    )
    assert rows[1]["text"] == long_text.strip()
    assert rows[1]["kept"] is True
    assert rows[1]["content_hash"] == _md5(long_text.strip())
    assert (rows[2]["reason"], rows[2]["dup_of"]) == ("exact_dup", "big")
    assert result.rows_kept == 2


WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from",
    "at which but have an they you were her she there had been one all would their we",
    "river stone mill children boats morning baker shop bread town smell recipe",
)


def test_a_bundle_of_chunks_stages_each_as_it_would_alone(tmp_path: Path) -> None:
    """Small chunks processed as one task (one filter query over all their records) are
    staged exactly as each alone: rows, verdicts, funnel, redactions, near-dedup sets and
    bands. With the default preset plus PII, chunks of one file and of several, one of
    nothing but malformed lines, exact copies within and across chunks."""
    from lakecurate import config

    rng = random.Random(3)
    words = [w for line in WORDS for w in line.split()]

    def prose(sentences: int) -> str:
        return " ".join(
            " ".join(rng.choice(words) for _ in range(rng.randrange(8, 16))).capitalize() + "."
            for _ in range(sentences)
        )

    french = (
        "Le matin, le boulanger ouvre sa boutique avant le lever du soleil, et toute la ville "
        "se réveille avec l'odeur du pain chaud. Les enfants regardent passer les bateaux sur "
        "la rivière pendant que leurs parents vont au marché acheter des légumes et du fromage. "
        "Le soir, les familles se retrouvent autour de la table pour parler de leur journée."
    )
    chinese = "每天早上，面包师在太阳升起之前打开他的店铺，整个小镇都闻到了面包的香味。" * 6
    mail = " Write to anna.berg@example.org for the recipe."
    same = prose(12)
    files = {
        "a.jsonl": [_line(same, "a1"), _line("too short", "a2"), _line(same, "a3")],
        "b.jsonl": [_line(french, "b1"), _line(chinese), b"", _line(prose(9) + mail, "a1")],
        "c.jsonl": [b"{broken", b"[1]", b'{"text": 5}'],
        "c2.jsonl": [b"", b"   ", b""],  # no records at all
        "d.jsonl": [_line(prose(6 + i % 5) + mail * (i % 2), f"d{i}") for i in range(12)],
    }
    specs = []
    for name, lines in files.items():
        (tmp_path / name).write_bytes(b"\n".join(lines) + b"\n")
        specs += _plan(tmp_path / name, chunk_size=4096)
    assert len(specs) > len(files)  # d.jsonl is cut into several chunks
    specs = [specs[-1], *specs[:-1]]  # a bundle's chunks need not be in key order
    text = (Path(config.__file__).parent / "presets" / "multilingual.toml").read_text("utf-8")
    text = text.replace('"fineweb"]', '"fineweb", "pii"]')
    staged: dict[str, list[Any]] = {}
    for how in ("alone", "bundled"):
        (tmp_path / how).mkdir()
        order = WorkOrder(str(tmp_path / how), "r", "c", decisions=text)
        if how == "alone":
            results = [worker.process_chunk(s, order) for s in specs]
        else:
            results = worker.process_chunks(specs, order)
        staged[how] = []
        for result in results:
            table = pq.read_table(result.staged_path)
            meta = dict(table.schema.metadata or {})
            del meta[staged_file.RESULT_KEY]  # holds the seconds and the worker
            beside = (tmp_path / how).glob(f"{result.chunk_key}*")  # the sets and bands
            sets = sorted(p.read_bytes() for p in beside if str(p) != result.staged_path)
            result.seconds, result.worker, result.staged_path = 0.0, "", ""
            staged[how].append((result, table.replace_schema_metadata().to_pylist(), meta, sets))
    assert staged["bundled"] == staged["alone"]
    assert any(result.rows_in == 0 for result, *_ in staged["alone"])
    rows = [r for _, rows, _, _ in staged["alone"] for r in rows]
    assert {r["lang"] for r in rows} >= {"en", "fr", "zh"}
    assert any(r["kept"] for r in rows)
    assert {r["reason"] for r in rows} >= {"exact_dup", "filter:gopher_repetition", None}
    assert sum(result.redactions.get("email", 0) for result, *_ in staged["alone"]) > 0


def test_a_chunk_that_fails_on_its_own_in_a_bundle_returns_its_error_in_its_place(
    tmp_path: Path,
) -> None:
    """A chunk whose input changed after planning fails alone in its bundle: its error (with
    the worker's traceback as a note) takes its place, its neighbours are staged; alone, the
    error is raised as before."""
    from lakecurate.errors import PermanentChunkError

    specs = []
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.jsonl").write_bytes(_line(f"text of {name}", name) + b"\n")
        specs += _plan(tmp_path / f"{name}.jsonl")
    (tmp_path / "b.jsonl").write_bytes(_line("changed since it was planned", "b") + b"\n")
    order = WorkOrder(staging_dir=str(tmp_path), run_id="r", config_hash="c")
    a, b, c = worker.process_chunks(specs, order)
    assert isinstance(a, ChunkResult) and isinstance(c, ChunkResult)
    assert isinstance(b, PermanentChunkError)
    assert any("In the worker" in n and "Traceback" in n for n in b.__notes__)
    assert [r["id"] for r in pq.read_table(c.staged_path).to_pylist()] == ["c"]
    with pytest.raises(PermanentChunkError):
        worker.process_chunks([specs[1]], order)
