"""The driver's state stays small per document (issue 14): near-dedup signatures and band hashes
live in ``index/signatures`` and ``index/bands`` files, not in ``state.duckdb``; a lake whose
state still holds them (the layouts before) is converted on open and goes on deciding exactly as
a lake that never had them."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import duckdb
import pytest
from helpers import NEAR_CONFIG, lake_rows, near_decisions

from lakecurate import Lake
from lakecurate.errors import LakeError
from lakecurate.lake.paths import LakePaths
from lakecurate.store.signatures import SignatureFiles


@pytest.fixture()
def near_cfg(tmp_path: Path) -> Path:
    path = tmp_path / "lakecurate.toml"
    path.write_text(NEAR_CONFIG)
    return path


def _to_old_layout(root: Path) -> None:
    """Put the signatures back into ``minhash_docs`` and the band hashes into a table
    ``minhash_bands``, and delete the files, as the state of a lake made before they moved out
    looked."""
    paths = LakePaths(root)
    files = SignatureFiles(paths.signatures)
    stored = files.read(files.doc_seqs())
    band_files = files.bands()
    bands = band_files.read(band_files.doc_seqs())
    con = duckdb.connect(str(paths.state))
    try:
        con.register("bands", bands)
        con.execute(
            "CREATE TABLE minhash_bands AS SELECT (generate_subscripts(bands, 1) - 1)::UTINYINT "
            "AS band, unnest(bands) AS band_hash, doc_seq FROM bands"
        )
        con.register("sigs", stored)
        con.execute("ALTER TABLE minhash_docs ADD COLUMN signature UINTEGER[]")
        con.execute(
            "UPDATE minhash_docs SET signature = s.signature FROM sigs s "
            "WHERE s.doc_seq = minhash_docs.doc_seq"
        )
        ((missing,),) = con.execute(
            "SELECT count(*) FROM minhash_docs WHERE signature IS NULL"
        ).fetchall()
        assert missing == 0
    finally:
        con.close()
    shutil.rmtree(paths.signatures)
    shutil.rmtree(paths.index / "bands")


def _in_state(root: Path) -> int:
    """How many of the old layout's signature column and band table the state has."""
    con = duckdb.connect(str(LakePaths(root).state), read_only=True)
    try:
        ((n,),) = con.execute(
            "SELECT count(*) FROM information_schema.columns WHERE (table_name, column_name) "
            "IN (('minhash_docs', 'signature'), ('minhash_bands', 'band_hash'))"
        ).fetchall()
        return int(n)
    finally:
        con.close()


def test_a_lake_of_the_old_layout_keeps_deciding_the_same(
    corpus: Path, near_cfg: Path, tmp_path: Path
) -> None:
    files = sorted(corpus.iterdir())
    old, new = tmp_path / "old", tmp_path / "new"
    assert Lake.open(old).ingest(files[:2], config=near_cfg).ok
    shutil.copytree(old, new)  # the same first ingest: its files, copied
    _to_old_layout(old)
    assert _in_state(old) == 2
    for root in (old, new):
        assert Lake.open(root).ingest(files[2:]).ok
    assert _in_state(old) == 0
    assert near_decisions(old) == near_decisions(new)
    assert lake_rows(old) == lake_rows(new)
    assert Lake.open(old).verify().ok
    # Lost signature files are found by verify and rebuilt from the table by --repair.
    shutil.rmtree(LakePaths(old).signatures)
    problems = Lake.open(old).verify().problems
    assert any("signature files lack" in p for p in problems), problems
    assert Lake.open(old).verify(repair=True).repaired
    assert Lake.open(old).verify().ok
    shutil.rmtree(LakePaths(old).index / "bands")  # and lost band files
    problems = Lake.open(old).verify().problems
    assert any("band files lack" in p for p in problems), problems
    assert Lake.open(old).verify(repair=True).repaired
    assert Lake.open(old).verify().ok
    extra = tmp_path / "extra.jsonl"  # and the repaired lake goes on deciding the same
    extra.write_text(
        "".join(json.dumps({"id": f"x{i}", "text": t}) + "\n" for i, t in enumerate(_texts(50)))
    )
    for root in (old, new):
        assert Lake.open(root).ingest([extra]).ok
    assert near_decisions(old) == near_decisions(new)


def _texts(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of 60 random words, every fifth a near copy (one word changed) of an
    earlier one."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)]
    out: list[str] = []
    for i in range(n):
        if i % 5 == 4:
            words = out[rng.randrange(i)].split()
            words[rng.randrange(len(words))] = rng.choice(vocab)
        else:
            words = rng.choices(vocab, k=60)
        out.append(" ".join(words))
    return out


def test_state_bytes_per_document_stay_small(near_cfg: Path, tmp_path: Path) -> None:
    """The state file's bytes per document with near dedup on and every document a candidate
    (16 bands each), in all and in what a second ingest adds (which leaves out the fixed cost of
    the small tables). Measured when written: about 520 and 490; with the signatures in the
    state (the layout before) 1,285 and 1,520."""
    n = 15_000
    texts = _texts(2 * n)
    parts = []
    for k in range(2):
        path = tmp_path / f"part{k}.jsonl"
        with path.open("w") as f:
            for i in range(k * n, (k + 1) * n):
                f.write(json.dumps({"id": f"d{i}", "text": texts[i]}) + "\n")
        parts.append(path)
    cfg = tmp_path / "big.toml"
    cfg.write_text(NEAR_CONFIG.replace('"64KiB"', '"4MiB"'))
    lake = Lake.open(tmp_path / "lake")
    state = LakePaths(tmp_path / "lake").state
    assert lake.ingest([parts[0]], config=cfg).ok
    first = state.stat().st_size
    assert lake.ingest([parts[1]]).ok
    size = state.stat().st_size
    (signed,) = lake.sql("SELECT count(*) FROM minhash_docs").rows[0]
    assert int(signed) > 1.5 * n  # near dedup looked at (nearly) every document
    assert size / (2 * n) < 700, f"state holds {size / (2 * n):.0f} bytes per document"
    assert (size - first) / n < 700, f"state grew by {(size - first) / n:.0f} bytes per document"
    assert len(SignatureFiles(LakePaths(tmp_path / "lake").signatures).doc_seqs()) == signed


def test_a_torn_band_file_stops_the_ingest_with_the_repair_to_run(
    near_cfg: Path, tmp_path: Path
) -> None:
    """A band file cut short (a disk error, a hand edit) is never read as "no candidates": the
    next ingest stops naming ``verify --repair``, commits nothing, and after the repair the
    lake decides as one that was never damaged."""
    docs = tmp_path / "a.jsonl"
    docs.write_text(
        "".join(json.dumps({"id": f"a{i}", "text": t}) + "\n" for i, t in enumerate(_texts(60)))
    )
    more = tmp_path / "b.jsonl"
    more.write_text(
        "".join(
            json.dumps({"id": f"b{i}", "text": t}) + "\n" for i, t in enumerate(_texts(60, seed=0))
        )
    )
    damaged, clean = tmp_path / "damaged", tmp_path / "clean"
    assert Lake.open(damaged).ingest([docs], config=near_cfg).ok
    shutil.copytree(damaged, clean)  # the same first ingest: its files, copied
    (band_file,) = (LakePaths(damaged).index / "bands").iterdir()
    band_file.write_bytes(band_file.read_bytes()[:100])
    before = lake_rows(damaged)
    with pytest.raises(LakeError, match="verify --repair"):
        Lake.open(damaged).ingest([more])
    assert lake_rows(damaged) == before
    assert Lake.open(damaged).verify(repair=True).repaired
    for root in (damaged, clean):
        assert Lake.open(root).ingest([more]).ok
    assert lake_rows(damaged) == lake_rows(clean)
    assert near_decisions(damaged) == near_decisions(clean)
    assert any(r[5] == "near_dup" for r in lake_rows(clean))  # the second file met the first
