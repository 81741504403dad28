"""Duplicate labels that do not depend on how inputs are cut (issue 17, item 5): an exact copy
of a near duplicate is an ``exact_dup`` of the kept document whether or not it shares a chunk
with the near duplicate; after changed inputs the labels equal a clean run's; a lake indexed
before near duplicates were is brought up to the rule once."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from lakecurate import Lake
from lakecurate.lake.paths import LakePaths
from lakecurate.store.key_files import KeyFiles
from lakecurate.store.state import StateStore

NEAR = '[ingest]\nchunk_size = "{size}"\n[near_dedup]\nenabled = true\n'


def _texts() -> tuple[str, str, list[str]]:
    """An original, a near duplicate of it (one word changed of 120), and unrelated fillers."""
    r = random.Random(7)
    words = [f"w{i}" for i in range(3000)]
    base = [r.choice(words) for _ in range(120)]
    near = " ".join([*base[:-1], "zzz"])
    fillers = [" ".join(r.choice(words) for _ in range(120)) for _ in range(12)]
    return " ".join(base), near, fillers


def _write(path: Path, records: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _config(tmp_path: Path, size: str) -> Path:
    cfg = tmp_path / f"cfg-{size}.toml"
    cfg.write_text(NEAR.format(size=size), encoding="utf-8")
    return cfg


def _labels(lake: Lake) -> list[tuple[object, ...]]:
    return lake.sql(
        "SELECT id, kept, reason, dup_of FROM documents ORDER BY source_path, source_line"
    ).rows


def _by_id(lake: Lake) -> dict[str, tuple[object, ...]]:
    return {str(r[0]): r[1:] for r in _labels(lake)}


def test_labels_do_not_depend_on_the_chunk_size(tmp_path: Path) -> None:
    base, near, fillers = _texts()
    records = [{"id": "k", "text": base}, {"id": "a", "text": near}]
    records += [{"id": f"f{i}", "text": t} for i, t in enumerate(fillers)]
    records += [{"id": "copy", "text": near}]
    data = tmp_path / "in.jsonl"
    _write(data, records)
    lakes = {}
    for size in ("1KiB", "64MiB"):
        lake = Lake.open(tmp_path / f"lake-{size}")
        assert lake.ingest([data], config=_config(tmp_path, size)).ok
        assert lake.verify().ok
        lakes[size] = lake
    small, large = lakes["1KiB"], lakes["64MiB"]
    assert small.sql("SELECT count(DISTINCT chunk_key) FROM documents").rows[0][0] > 2
    assert large.sql("SELECT count(DISTINCT chunk_key) FROM documents").rows[0][0] == 1
    assert _labels(small) == _labels(large)
    assert _by_id(small)["a"] == (False, "near_dup", "k")
    assert _by_id(small)["copy"] == (False, "exact_dup", "k")


def _three_files(root: Path) -> dict[str, Path]:
    base, near, _ = _texts()
    files = {"k": root / "1.jsonl", "a": root / "2.jsonl", "copy": root / "3.jsonl"}
    for doc_id, text in (("k", base), ("a", near), ("copy", near)):
        _write(files[doc_id], [{"id": doc_id, "text": text}])
    return files


def test_labels_after_an_input_leaves_equal_a_clean_run(tmp_path: Path) -> None:
    """The exact copy names the kept document, not the near duplicate it copies: when the near
    duplicate's input goes, the copy is the first of its content and becomes a near duplicate;
    when the kept document's goes, the near duplicate is kept and the copy is its exact copy."""
    cfg = _config(tmp_path, "64MiB")
    for gone, expected in (
        ("a", {"k": (True, None, None), "copy": (False, "near_dup", "k")}),
        ("k", {"a": (True, None, None), "copy": (False, "exact_dup", "a")}),
    ):
        root = tmp_path / f"in-{gone}"
        files = _three_files(root)
        lake = Lake.open(tmp_path / f"lake-{gone}")
        assert lake.ingest([root], config=cfg).ok
        assert _by_id(lake)["copy"] == (False, "exact_dup", "k")
        files[gone].unlink()
        report = lake.ingest([root])
        assert report.ok and report.chunks_redecided >= 1
        assert _by_id(lake) == expected
        clean = Lake.open(tmp_path / f"clean-{gone}")
        assert clean.ingest([root], config=cfg).ok
        assert _labels(lake) == _labels(clean)
        assert lake.verify().ok


def test_a_lake_indexed_before_near_duplicates_is_brought_up_once(tmp_path: Path) -> None:
    """A state whose content index holds kept documents only (as before issue 17) gets its
    near duplicates on the next write, then labels a new exact copy as a clean run does."""
    root = tmp_path / "in"
    files = _three_files(root)
    copy = files["copy"].read_text(encoding="utf-8")
    files["copy"].unlink()
    cfg = _config(tmp_path, "64MiB")
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([root], config=cfg).ok
    (near_hash,) = lake.sql("SELECT content_hash FROM documents WHERE id = 'a'").rows[0]
    state = LakePaths.of(tmp_path / "lake").state
    store = StateStore.open(state)  # the old index: kept contents only, no rule mark
    keys = KeyFiles(store.con)
    rows = keys.read("content")
    hi, lo = (pa.scalar(int(near_hash[i : i + 16], 16), pa.uint64()) for i in (0, 16))
    near = pc.and_(pc.equal(rows["hi"], hi), pc.equal(rows["lo"], lo))
    with store.transaction():
        keys.clear("content")
        keys.write("content", rows.filter(pc.invert(near)))
        store.con.execute("DELETE FROM lake_meta WHERE key = 'content_index'")
    store.close()
    assert not lake.verify().ok  # the index misses the near duplicate
    files["copy"].write_text(copy, encoding="utf-8")
    report = lake.ingest([root])
    assert report.ok
    assert any("near duplicates" in note for note in report.notes), report.notes
    assert _by_id(lake)["copy"] == (False, "exact_dup", "k")
    assert lake.verify().ok
    clean = Lake.open(tmp_path / "clean")
    assert clean.ingest([root], config=cfg).ok
    assert _labels(lake) == _labels(clean)
