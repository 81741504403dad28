"""The bundled example corpus is reproducible and contains the dirt it promises.

``examples/generate_corpus.py`` documents where every kind of dirt sits; these tests pin the
committed files in ``examples/corpus/`` to the generator and check the promised content by
reading all four formats independently of lakecurate's own readers.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pyarrow.parquet as pq
import zstandard

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CORPUS = EXAMPLES / "corpus"
EXPECTED_FILES = {"books.parquet", "forum.jsonl.zst", "web_a.jsonl", "web_b.jsonl.gz"}


def _load_generator() -> ModuleType:
    name = "lakecurate_example_generate_corpus"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / "generate_corpus.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _snapshot(directory: Path) -> dict[str, str]:
    """File name -> SHA-256 of its bytes (digests keep assertion output short)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


def _jsonl_records(data: bytes) -> list[dict]:
    """Records of the JSONL lines that decode and parse; broken lines are skipped."""
    records = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            records.append(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
    return records


def _texts_by_file() -> dict[str, list[object]]:
    forum = zstandard.ZstdDecompressor().decompress((CORPUS / "forum.jsonl.zst").read_bytes())
    web_a = (CORPUS / "web_a.jsonl").read_bytes()
    web_b = gzip.decompress((CORPUS / "web_b.jsonl.gz").read_bytes())
    return {
        "books.parquet": pq.read_table(CORPUS / "books.parquet").column("text").to_pylist(),
        "forum.jsonl.zst": [r.get("text") for r in _jsonl_records(forum)],
        "web_a.jsonl": [r.get("text") for r in _jsonl_records(web_a)],
        "web_b.jsonl.gz": [r.get("text") for r in _jsonl_records(web_b)],
    }


def test_committed_corpus_matches_generator(tmp_path: Path) -> None:
    gen = _load_generator()
    paths = gen.generate(tmp_path)
    assert {p.name for p in paths} == EXPECTED_FILES
    committed = _snapshot(CORPUS)
    regenerated = _snapshot(tmp_path)
    assert set(committed) == set(regenerated) == EXPECTED_FILES
    for name in sorted(EXPECTED_FILES):
        assert regenerated[name] == committed[name], (
            f"{name} differs from examples/corpus/{name}: rerun "
            "`python examples/generate_corpus.py examples/corpus` (or check zlib, libzstd "
            "and pyarrow versions)"
        )


def test_generation_is_deterministic_per_seed(tmp_path: Path) -> None:
    gen = _load_generator()
    first, again, other = tmp_path / "first", tmp_path / "again", tmp_path / "other"
    gen.generate(first, seed=11, scale=0.3)
    gen.generate(again, seed=11, scale=0.3)
    gen.generate(other, seed=12, scale=0.3)
    assert _snapshot(first) == _snapshot(again)
    assert set(_snapshot(first)) == EXPECTED_FILES
    different = _snapshot(other)
    assert set(different) == EXPECTED_FILES
    for name, digest in _snapshot(first).items():
        assert different[name] != digest, name


def test_web_a_lines_contain_the_promised_breakage() -> None:
    data = (CORPUS / "web_a.jsonl").read_bytes()
    assert data.endswith(b"\n")
    lines = data.split(b"\n")[:-1]
    blank = bad_utf8 = bad_json = crlf = 0
    records = []
    for raw in lines:
        if not raw.strip():
            blank += 1
            continue
        if raw.endswith(b"\r"):
            crlf += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            bad_utf8 += 1
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            bad_json += 1
    assert blank == 1
    assert bad_utf8 == 1
    assert bad_json == 1
    assert crlf == 1
    assert len(records) == len(lines) - 3
    assert sum("text" not in r for r in records) == 1
    non_string = [r["text"] for r in records if "text" in r and not isinstance(r["text"], str)]
    assert None in non_string
    assert any(isinstance(t, int | float) for t in non_string)
    assert all(list(r) == ["id", "text", "url", "source"] for r in records if "text" in r)
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids))


def test_corpus_contains_duplicates_across_files_and_empty_texts() -> None:
    texts = _texts_by_file()
    files_of: dict[str, set[str]] = {}
    for name, file_texts in texts.items():
        for text in file_texts:
            if isinstance(text, str) and text.strip():
                files_of.setdefault(text, set()).add(name)
    shared = [t for t, names in files_of.items() if len(names) > 1]
    assert shared, "expected at least one text occurring in two different files"
    for name in EXPECTED_FILES - {"web_a.jsonl"}:
        assert any(name in files_of[t] and "web_a.jsonl" in files_of[t] for t in shared), name
    for name, file_texts in texts.items():
        strings = [t for t in file_texts if isinstance(t, str)]
        assert "" in strings, name
        assert any(t and not t.strip() for t in strings), name
        non_blank = [t for t in strings if t.strip()]
        assert len(non_blank) != len(set(non_blank)), f"{name} has no in-file duplicates"
    assert "   \n\t  " in texts["web_a.jsonl"]
    parquet = pq.ParquetFile(CORPUS / "books.parquet")
    assert parquet.metadata.num_row_groups == 4
    assert parquet.schema_arrow.names == ["id", "text", "url", "source"]


def test_web_a_is_large_enough_to_chunk() -> None:
    size = (CORPUS / "web_a.jsonl").stat().st_size
    assert size > 1_000_000
    assert size > 4 * 256 * 1024
    assert sum(p.stat().st_size for p in CORPUS.iterdir()) < 2_000_000
