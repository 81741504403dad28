"""LSH near dedup in DuckDB: incremental equals batch, order independence, idempotence, the UDFs."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from helpers import as_global, match_in_chunks

from lakecurate import engine
from lakecurate.config import NearDedupConfig
from lakecurate.errors import LakeError
from lakecurate.steps.near import minhash as mh
from lakecurate.steps.near import signatures
from lakecurate.store import band_index
from lakecurate.store.signatures import SignatureFiles

# The signature test (verify_on = "signature"), the rule of lakes made before issue 17; the exact
# test on shingle sets (today's default) has the same machinery checked in test_lsh_exact.py.
CFG = NearDedupConfig(threshold=0.7, link="any", verify_on="signature")
VOCAB = [f"v{i}" for i in range(5000)]


def edit(rng: random.Random, words: list[str], n: int) -> list[str]:
    out = list(words)
    for pos in rng.sample(range(len(out)), n):
        out[pos] = rng.choice(VOCAB)
    return out


def chain_corpus(seed: int = 0) -> list[str]:
    """Unrelated documents, stars, and chains (each link an edit of the previous one, so the ends
    are far apart) in shuffled order: the case where transitivity matters."""
    rng = random.Random(seed)
    docs: list[list[str]] = []
    for _ in range(60):
        docs.append([rng.choice(VOCAB) for _ in range(120)])
    for _ in range(12):
        link = [rng.choice(VOCAB) for _ in range(120)]
        docs.append(link)
        for _ in range(rng.randint(2, 6)):
            link = edit(rng, link, 4)
            docs.append(link)
    for _ in range(8):
        origin = [rng.choice(VOCAB) for _ in range(120)]
        docs.append(origin)
        docs.extend(edit(rng, origin, rng.randint(1, 10)) for _ in range(3))
    docs.extend([[], ["only", "three", "words"], ["only", "three", "words"]])
    rng.shuffle(docs)
    return [" ".join(d) for d in docs]


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], pa.Array, pa.Array]:
    texts = chain_corpus()
    sig, bands = signatures.chunk_signatures(texts, CFG)
    return texts, sig, bands


@pytest.fixture
def index() -> Iterator[band_index.NearDedupIndex]:
    con = engine.connect(threads=1)
    idx = band_index.NearDedupIndex(con, CFG)
    idx.create_schema()
    yield idx
    con.close()


def reference(
    corpus: tuple[list[str], pa.Array, pa.Array],
) -> list[tuple[int, int | None, str | None]]:
    """The rule in plain Python: a document joins the smallest cluster among the earlier documents
    it shares a band with (and, verified, agrees with on enough positions), else starts one."""
    texts = corpus[0]
    sig = mh.signatures_of_texts(texts, CFG)
    bands = mh.band_hashes(sig, *mh.layout(CFG))
    empty = mh.is_empty(sig)
    need = band_index.NearDedupIndex(None, CFG).min_matches  # type: ignore[arg-type]
    label: dict[int, int] = {}
    out: list[tuple[int, int | None, str | None]] = []
    for i in range(len(texts)):
        if empty[i]:
            out.append((i, None, None))
            continue
        mine = i
        for j in range(i):
            if (
                not empty[j]
                and (bands[i] == bands[j]).any()
                and int((sig[i] == sig[j]).sum()) >= need
            ):
                mine = min(mine, label[j])
        label[i] = mine
        out.append((i, mine, None if mine == i else f"d{mine}"))
    return out


def test_batch_matches_the_reference(index: band_index.NearDedupIndex, corpus) -> None:  # type: ignore[no-untyped-def]
    n = len(corpus[0])
    got = as_global(match_in_chunks(index, corpus, [n]), [n])
    assert got == reference(corpus)
    clusters = {c for _, c, d in got if d is not None}
    assert len(clusters) >= 15  # the corpus really has near duplicates
    assert index.rounds >= 2  # and chains longer than one hop inside a chunk


@pytest.mark.parametrize("sizes", [[7], [*[1] * 25, 40], [50, 1, 100, 200], [33, 120, 200]])
def test_incremental_equals_batch(corpus, sizes: list[int]) -> None:  # type: ignore[no-untyped-def]
    n = len(corpus[0])
    sizes = list(sizes)
    while sum(sizes) < n:
        sizes.append(sizes[-1])
    results = []
    for chunking in ([n], sizes):
        con = engine.connect(threads=1)
        idx = band_index.NearDedupIndex(con, CFG)
        idx.create_schema()
        results.append(as_global(match_in_chunks(idx, corpus, chunking), chunking))
        con.close()
    assert results[0] == results[1]


def test_row_order_inside_a_chunk_does_not_matter(corpus) -> None:  # type: ignore[no-untyped-def]
    n = len(corpus[0])
    results = []
    for shuffle in (None, 1, 2):
        con = engine.connect(threads=2)
        idx = band_index.NearDedupIndex(con, CFG)
        idx.create_schema()
        results.append(match_in_chunks(idx, corpus, [60, n], shuffle=shuffle))
        con.close()
    assert results[0] == results[1] == results[2]


def test_match_and_add_are_idempotent(index: band_index.NearDedupIndex, corpus) -> None:  # type: ignore[no-untyped-def]
    texts, sig, bands = corpus
    assert len(texts) > 120
    first = band_index.chunk_table(
        band_index.make_doc_seq(0, np.arange(60)),
        [f"d{i}" for i in range(60)],
        sig.slice(0, 60),
        bands.slice(0, 60),
    )
    second = band_index.chunk_table(
        band_index.make_doc_seq(1, np.arange(60)),
        [f"d{i}" for i in range(60, 120)],
        sig.slice(60, 60),
        bands.slice(60, 60),
    )
    index.add_chunk(first, index.match_chunk(first))
    before = index.match_chunk(second)
    index.add_chunk(second, before)
    assert index.match_chunk(second).equals(before)  # the index already holding it changes nothing
    index.add_chunk(second, before)
    ((n_docs,),) = index.con.execute("SELECT count(*) FROM minhash_docs").fetchall()
    index.cache._loaded = False  # read the band files again
    index.cache.candidates(*band_index._band_rows(second)[0], below=0, ordered=True)
    with_tokens = int(pa.compute.sum(pa.compute.is_valid(bands.slice(0, 120))).as_py())
    assert n_docs == with_tokens
    assert index.cache.rows == with_tokens * mh.layout(CFG)[0]


def test_documents_without_tokens_are_left_out(index: band_index.NearDedupIndex) -> None:
    texts = ["", "...", "", "a real document with more than five words in it"]
    sig, bands = signatures.chunk_signatures(texts, CFG)
    table = band_index.chunk_table(
        band_index.make_doc_seq(0, np.arange(4)), ["a", "b", "c", "d"], sig, bands
    )
    result = index.match_chunk(table)
    assert result["cluster_id"].to_pylist() == [
        None,
        None,
        None,
        int(band_index.make_doc_seq(0, [3])[0]),
    ]
    assert result["dup_of"].to_pylist() == [None] * 4


def test_changed_settings_are_refused(index: band_index.NearDedupIndex) -> None:
    other = band_index.NearDedupIndex(index.con, NearDedupConfig(threshold=0.7, seed=9))
    with pytest.raises(LakeError, match="near-dedup index was built"):
        other.create_schema()
    band_index.NearDedupIndex(index.con, CFG).create_schema()  # same settings: fine


def test_stats(index: band_index.NearDedupIndex, corpus) -> None:  # type: ignore[no-untyped-def]
    match_in_chunks(index, corpus, [len(corpus[0])])
    sizes = index.con.execute(engine.q("dedup.cluster_sizes")).fetchall()
    assert sum(size * count for size, count in sizes) == int(
        pa.compute.sum(pa.compute.is_valid(corpus[2])).as_py()
    )
    top = index.largest_clusters(limit=3, samples=2)
    assert top.num_rows == 3
    assert all(len(s) == 2 for s in top["sample_ids"].to_pylist())


def test_an_index_of_the_old_layout_moves_its_bands_to_files(corpus, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A state made before the band files kept its band rows in ``minhash_bands``: the next
    index opened on it writes them to band files and drops the table, and goes on deciding as
    an index that always had the files."""
    texts, sig, bands = corpus
    sizes = [60, 60, len(texts) - 120]
    reference = band_index.NearDedupIndex(engine.connect(threads=1), CFG)
    reference.create_schema()
    expected = match_in_chunks(reference, corpus, sizes)

    def table(ordinal: int) -> pa.Table:
        rows = np.arange(sum(sizes[:ordinal]), sum(sizes[: ordinal + 1]))
        return band_index.chunk_table(
            band_index.make_doc_seq(ordinal, np.arange(len(rows))),
            [f"d{i}" for i in rows],
            sig.take(rows),
            bands.take(rows),
        )

    con = engine.connect(threads=1)
    files = SignatureFiles(tmp_path / "signatures")
    old = band_index.NearDedupIndex(con, CFG, files)
    old.create_schema()
    got = []
    for ordinal in (0, 1):
        result = old.match_chunk(table(ordinal))
        old.add_chunk(table(ordinal), result)
        got.append(result)
    # The old layout: the same rows in a table, no band files.
    con.execute("CREATE TABLE minhash_bands (band UTINYINT, band_hash UBIGINT, doc_seq BIGINT)")
    for ordinal in (0, 1):
        con.register("t", pa.table({"s": table(ordinal)["doc_seq"], "b": table(ordinal)["bands"]}))
        con.execute(
            "INSERT INTO minhash_bands SELECT (generate_subscripts(b, 1) - 1)::UTINYINT, "
            "unnest(b), s FROM t WHERE b IS NOT NULL"
        )
        con.unregister("t")
    files.bands().clear()
    new = band_index.NearDedupIndex(con, CFG, files)
    new.create_schema()
    assert con.execute(engine.q("dedup.has_bands_table")).fetchall() == [(0,)]
    assert sorted(p.name for p in (tmp_path / "bands").iterdir()) == ["0.arrow", "1.arrow"]
    got.append(new.match_chunk(table(2)))
    flat = [
        (s, c, d)
        for r in got
        for s, c, d in zip(
            r["doc_seq"].to_pylist(),
            r["cluster_id"].to_pylist(),
            r["dup_of"].to_pylist(),
            strict=True,
        )
    ]
    assert flat == expected
    assert any(
        d is not None and s >> 32 == 2 and c >> 32 < 2 for s, c, d in flat
    )  # it met old bands


@pytest.mark.parametrize(("need", "num", "den"), [(3, 0, 1), (0, 500_000, 1_000_000)])
def test_the_deciders_near_test_is_the_sqls(need: int, num: int, den: int) -> None:
    """``signatures.near_flags`` (decider processes) answers what the SQL's ``nd_near`` does:
    equal signature positions (num = 0), or the exact Jaccard of shingle sets in integers."""
    rng = np.random.default_rng(num)
    if num == 0:
        a = [rng.integers(0, 5, 8).tolist() for _ in range(300)]
        b = [rng.integers(0, 5, 8).tolist() for _ in range(300)]
    else:
        a = [
            sorted(set(rng.integers(0, 40, int(rng.integers(1, 30))).tolist())) for _ in range(300)
        ]
        b = [sorted(set(x[: len(x) // 2] + rng.integers(0, 40, 9).tolist())) for x in a]
    pairs = pa.table(
        {"a": pa.array(a, pa.list_(pa.uint32())), "b": pa.array(b, pa.list_(pa.uint32()))}
    )
    con = engine.connect(threads=1)
    band_index.NearDedupIndex(con, NearDedupConfig()).create_schema()  # nd_near and its UDF
    con.register("t", pairs)
    sql = [
        r[0] for r in con.execute(f"SELECT nd_near(a, b, {need}, {num}, {den}) FROM t").fetchall()
    ]
    flags = signatures.near_flags(pairs["a"], pairs["b"], need, num, den).tolist()
    assert flags == sql and 0 < sum(sql) < len(sql)
