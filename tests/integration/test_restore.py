"""`restore N` then `ingest` gives the same table as if the later ingests never happened."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from helpers import lake_rows

from lakecurate import Lake
from lakecurate.errors import LakeError


def _write(path: Path, docs: list[tuple[str, str]]) -> None:
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in docs))


def test_restore_then_ingest_equals_never_having_ingested(
    tmp_path: Path, corpus: Path, config_file: Path
) -> None:
    base = tmp_path / "base"
    shutil.copytree(corpus, base)
    extra = tmp_path / "extra"
    extra.mkdir()
    _write(extra / "later.jsonl", [("x1", "a later document"), ("x2", "another later one")])
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([base], config=config_file).ok
    v_after_first = lake.sql("SELECT max(delta_version) FROM chunks").rows[0][0]
    # a later ingest adds a file and changes another (supersedes its rows)
    lines = gzip.decompress((base / "web_b.jsonl.gz").read_bytes()).split(b"\n")
    (base / "web_b.jsonl.gz").write_bytes(gzip.compress(b"\n".join(lines[5:]), mtime=0))
    assert lake.ingest([base, extra]).ok
    assert lake.sql("SELECT count(*) FROM docs WHERE id = 'x1'").rows[0][0] == 1

    new_version = lake.restore(v_after_first)
    assert new_version > v_after_first
    # the table is back to what it was, and the state agrees with it
    assert lake.sql("SELECT count(*) FROM docs WHERE id = 'x1'").rows[0][0] == 0
    statuses = dict(lake.sql("SELECT status, count(*) FROM chunks GROUP BY ALL").rows)
    assert (
        statuses.get("SUCCESS", 0)
        == lake.sql("SELECT count(DISTINCT chunk_key) FROM documents").rows[0][0]
    )
    (n_hashes, n_docs) = lake.sql(
        "SELECT (SELECT count(*) FROM content_hashes), (SELECT count(*) FROM docs)"
    ).rows[0]
    assert n_hashes == n_docs

    # now a different later ingest: the result equals a lake that only ever saw base + this
    other = tmp_path / "other"
    other.mkdir()
    _write(other / "other.jsonl", [("o1", "a later document"), ("x1", "id reused later")])
    assert lake.ingest([other]).ok
    fresh_base = tmp_path / "fresh_base"
    shutil.copytree(corpus, fresh_base)
    twin = Lake.open(tmp_path / "twin")
    assert twin.ingest([fresh_base], config=config_file).ok
    assert twin.ingest([other]).ok

    def strip(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
        """Chunk keys and derived ids name the source path, which differs: keep the keys'
        stem and index, and ids relative to the input folder."""
        return sorted(
            (str(r[0])[:-9], r[1], str(r[2]).replace("fresh_base", "base"), *r[3:]) for r in rows
        )

    assert strip(lake_rows(tmp_path / "lake")) == strip(lake_rows(tmp_path / "twin"))


def test_restore_of_a_missing_version_names_the_range(tmp_path: Path, config_file: Path) -> None:
    data = tmp_path / "in"
    data.mkdir()
    _write(data / "a.jsonl", [("a", "some text")])
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([data], config=config_file).ok
    with pytest.raises(
        LakeError, match=r"version 7 does not exist: the lake has versions 0 \(.*\) to 0"
    ):
        lake.restore(7)
