"""The clustering rule ``link = "kept"`` of the LSH index (``[near_dedup].link = "kept"``).

A document joins a cluster only when it is itself near (verified on the signatures) that cluster's
kept document, never through a chain of dropped documents. What must hold, as for ``"any"``:
batch equals a plain Python implementation of the rule, incremental equals batch, row order and
threads change nothing, a retried chunk gives the same answer; and a lake's index keeps its rule.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import as_global, match_in_chunks, worker_files

from lakecurate import engine
from lakecurate.config import NearDedupConfig
from lakecurate.errors import ConfigError, LakeError
from lakecurate.steps.near import minhash as mh
from lakecurate.steps.near import signatures
from lakecurate.store import band_index
from lakecurate.store.signatures import SignatureFiles

# The signature test (verify_on = "signature"), whose estimates the constructed chains below are
# made of; the exact test on shingle sets is checked in test_lsh_exact.py.
CFG = NearDedupConfig(threshold=0.7, verify_on="signature")
NEED = band_index.NearDedupIndex(None, CFG).min_matches  # type: ignore[arg-type]
VOCAB = [f"w{i}" for i in range(5000)]

Row = tuple[int, int | None, str | None]


def chain_corpus(seed: int = 3) -> list[str]:
    """Unrelated documents, chains (each link an edit of the previous one: the ends are far apart),
    stars around an origin, a duplicated short text and an empty one, in shuffled order."""
    rng = random.Random(seed)

    def edit(words: list[str], n: int) -> list[str]:
        out = list(words)
        for pos in rng.sample(range(len(out)), n):
            out[pos] = rng.choice(VOCAB)
        return out

    docs: list[list[str]] = [[rng.choice(VOCAB) for _ in range(120)] for _ in range(50)]
    for _ in range(14):
        link = [rng.choice(VOCAB) for _ in range(120)]
        docs.append(link)
        for _ in range(rng.randint(2, 7)):
            link = edit(link, 4)
            docs.append(link)
    for _ in range(8):
        origin = [rng.choice(VOCAB) for _ in range(120)]
        docs.append(origin)
        docs.extend(edit(origin, rng.randint(1, 8)) for _ in range(3))
    docs.extend([[], ["just", "three", "words"], ["just", "three", "words"]])
    rng.shuffle(docs)
    return [" ".join(d) for d in docs]


def columns(texts: list[str], cfg: NearDedupConfig = CFG) -> tuple[list[str], pa.Array, pa.Array]:
    sig, bands = signatures.chunk_signatures(texts, cfg)
    return texts, sig, bands


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], pa.Array, pa.Array]:
    return columns(chain_corpus())


def new_index(
    link: band_index.Link, threads: int = 1, cfg: NearDedupConfig = CFG
) -> band_index.NearDedupIndex:
    idx = band_index.NearDedupIndex(engine.connect(threads=threads), replace(cfg, link=link))
    idx.create_schema()
    return idx


@pytest.fixture
def kept_index() -> Iterator[band_index.NearDedupIndex]:
    idx = new_index("kept")
    yield idx
    idx.con.close()


def run(
    idx: band_index.NearDedupIndex,
    corpus: tuple[list[str], pa.Array, pa.Array],
    sizes: list[int],
    shuffle: int | None = None,
) -> list[Row]:
    """Match and add the corpus chunk by chunk; rows as (position, cluster position, dup_of)."""
    return as_global(match_in_chunks(idx, corpus, sizes, shuffle), sizes)


def chunking(n: int, sizes: list[int]) -> list[int]:
    sizes = list(sizes)
    while sum(sizes) < n:
        sizes.append(sizes[-1])
    return sizes


def reference(texts: list[str], link: str, cfg: NearDedupConfig = CFG) -> list[Row]:
    """Both rules in plain Python, one document at a time in order. Neighbours: earlier documents
    sharing a band and agreeing on at least NEED positions. ``any``: the smallest cluster among
    the neighbours'; ``kept``: the smallest among those whose kept document is itself a
    neighbour-grade match (at least NEED equal positions) of the document."""
    sig, sets, offsets = mh.sketch_texts(texts, cfg, with_sets=True)
    bands = mh.band_hashes(sig, *mh.layout(cfg))
    empty = mh.is_empty(sig)
    need = band_index.NearDedupIndex(None, cfg).min_matches  # type: ignore[arg-type]

    def near(i: int, j: int) -> bool:
        if cfg.verify_on == "shingles":  # the exact Jaccard of the shingle sets
            a, b = sets[offsets[i] : offsets[i + 1]], sets[offsets[j] : offsets[j + 1]]
            return mh.exact_jaccard(a, b) >= cfg.threshold
        return int((sig[i] == sig[j]).sum()) >= need

    label: dict[int, int] = {}
    out: list[Row] = []
    for i in range(len(texts)):
        if empty[i]:
            out.append((i, None, None))
            continue
        clusters = {
            label[j]
            for j in range(i)
            if not empty[j] and (bands[i] == bands[j]).any() and near(i, j)
        }
        if link == "kept":
            clusters = {c for c in clusters if near(i, c)}
        label[i] = min(clusters | {i})
        out.append((i, label[i], None if label[i] == i else f"d{label[i]}"))
    return out


# -- the rule on a constructed chain -----------------------------------------------------------
def chain_of_three() -> tuple[list[str], mh.U32]:
    """A ~ B ~ C with A and C far apart, and D ~ A: B replaces A's last words, C replaces B's
    first words (so C keeps none of A's changes back), D replaces a few words in A's middle."""
    rng = random.Random(12)
    a = [rng.choice(VOCAB) for _ in range(300)]
    b = a[:-40] + [rng.choice(VOCAB) for _ in range(40)]
    c = [rng.choice(VOCAB) for _ in range(40)] + b[40:]
    d = a[:140] + [rng.choice(VOCAB) for _ in range(8)] + a[148:]
    texts = [" ".join(x) for x in (a, b, c, d)]
    return texts, mh.signatures_of_texts(texts, CFG)


def test_the_chain_is_what_it_claims() -> None:
    _, sig = chain_of_three()
    est = {
        (i, j): float(mh.estimate_jaccard(sig[i : i + 1], sig[j : j + 1])[0])
        for i in range(4)
        for j in range(i + 1, 4)
    }
    assert min(est[0, 1], est[1, 2]) >= CFG.threshold + 0.05  # A~B, B~C (0.79, 0.80)
    assert est[0, 2] < CFG.threshold - 0.05  # A and C far apart (0.64)
    assert est[0, 3] >= CFG.threshold + 0.05  # D~A (0.93)
    bands = mh.band_hashes(sig, *mh.layout(CFG))
    assert (bands[0] == bands[1]).any() and (bands[1] == bands[2]).any()
    assert (bands[0] == bands[3]).any()


@pytest.mark.parametrize("sizes", [[4], [1, 1, 1, 1], [2, 2], [1, 3]])
def test_kept_never_chains_to_a_far_document(sizes: list[int]) -> None:
    texts, _ = chain_of_three()
    any_rows = run(idx := new_index("any"), columns(texts), sizes)
    idx.con.close()
    kept_rows = run(idx := new_index("kept"), columns(texts), sizes)
    idx.con.close()
    # "any": C joins A's cluster through B, although C is far from A
    assert [c for _, c, _ in any_rows] == [0, 0, 0, 0]
    # "kept": C is not near A, so it starts a cluster of its own; B and D stay with A
    assert [c for _, c, _ in kept_rows] == [0, 0, 2, 0]
    assert [d for _, _, d in kept_rows] == [None, "d0", None, "d0"]
    assert kept_rows == reference(texts, "kept") and any_rows == reference(texts, "any")


def test_kept_only_drops_documents_near_their_kept_one(kept_index, corpus) -> None:  # type: ignore[no-untyped-def]
    texts = corpus[0]
    rows = run(kept_index, corpus, [len(texts)])
    sig = mh.signatures_of_texts(texts, CFG)
    dups = [(i, c) for i, c, d in rows if d is not None]
    assert len(dups) >= 20
    for i, c in dups:
        assert int((sig[i] == sig[c]).sum()) >= NEED, (i, c)
    # and the corpus has chains that "any" would have followed past the threshold
    chained = [
        (i, c)
        for i, c, d in reference(texts, "any")
        if d is not None and int((sig[i] == sig[c]).sum()) < NEED
    ]
    assert chained


# -- the rule on a corpus: reference, incremental, order, threads, retries ----------------------
def test_batch_matches_the_reference(kept_index, corpus) -> None:  # type: ignore[no-untyped-def]
    texts = corpus[0]
    got = run(kept_index, corpus, [len(texts)])
    assert got == reference(texts, "kept")
    assert got != reference(texts, "any")  # the rules really differ on this corpus
    assert kept_index.rounds >= 2  # chains longer than one hop inside the chunk


@pytest.mark.parametrize(  # the default run keeps small chunks as [7] and [1] * 30; [3] is slow
    "sizes",
    [
        pytest.param([3], marks=pytest.mark.slow),
        [7],
        [*[1] * 30, 50],
        [50, 1, 100, 200],
        [33, 120],
    ],
)
def test_incremental_equals_batch(corpus, sizes: list[int]) -> None:  # type: ignore[no-untyped-def]
    n = len(corpus[0])
    results = []
    for split in ([n], chunking(n, sizes)):
        idx = new_index("kept")
        results.append(run(idx, corpus, split))
        idx.con.close()
    assert results[0] == results[1] == reference(corpus[0], "kept")


def test_row_order_and_threads_do_not_matter(corpus) -> None:  # type: ignore[no-untyped-def]
    n = len(corpus[0])
    results = []
    for shuffle, threads in ((None, 1), (1, 2), (2, 2)):
        idx = new_index("kept", threads=threads)
        results.append(run(idx, corpus, [60, n], shuffle=shuffle))
        idx.con.close()
    assert results[0] == results[1] == results[2]


def test_a_retried_chunk_gets_the_same_answer(kept_index, corpus) -> None:  # type: ignore[no-untyped-def]
    """An interrupted commit: the chunk is already in the index (add_chunk ran, the state
    transaction did not finish) and is matched again, then added again."""
    texts, sig, bands = corpus
    tables = [
        band_index.chunk_table(
            band_index.make_doc_seq(k, np.arange(80)),
            [f"d{i}" for i in range(80 * k, 80 * k + 80)],
            sig.slice(80 * k, 80),
            bands.slice(80 * k, 80),
        )
        for k in range(2)
    ]
    kept_index.add_chunk(tables[0], kept_index.match_chunk(tables[0]))
    before = kept_index.match_chunk(tables[1])
    kept_index.add_chunk(tables[1], before)
    assert kept_index.match_chunk(tables[1]).equals(before)
    kept_index.add_chunk(tables[1], before)
    ((n_docs,),) = kept_index.con.execute("SELECT count(*) FROM minhash_docs").fetchall()
    assert n_docs == int(pa.compute.sum(pa.compute.is_valid(bands.slice(0, 160))).as_py())
    rows = run(new_index("kept"), (texts[:160], sig.slice(0, 160), bands.slice(0, 160)), [160])
    assert [c for _, c, _ in rows[80:]] == [
        None if c is None else band_index.split_doc_seq(c)[0] * 80 + band_index.split_doc_seq(c)[1]
        for c in before["cluster_id"].to_pylist()
    ]


# -- the rule is part of the index -------------------------------------------------------------
@pytest.mark.parametrize(("built", "now"), [("any", "kept"), ("kept", "any")])
def test_an_index_refuses_the_other_rule(built: band_index.Link, now: band_index.Link) -> None:
    idx = new_index(built)
    try:
        with pytest.raises(LakeError, match=f'link = "{built}", the config now gives "{now}"'):
            band_index.NearDedupIndex(idx.con, replace(CFG, link=now)).create_schema()
        # the same rule: fine
        band_index.NearDedupIndex(idx.con, replace(CFG, link=built)).create_schema()
    finally:
        idx.con.close()


def test_an_index_from_before_the_rule_was_recorded_is_any() -> None:
    idx = new_index("any")
    try:
        idx.con.execute("DELETE FROM minhash_meta WHERE key = 'link'")  # as older versions wrote
        with pytest.raises(LakeError, match=r'built with \[near_dedup\]\.link = "any"'):
            band_index.NearDedupIndex(idx.con, replace(CFG, link="kept")).create_schema()
        band_index.NearDedupIndex(idx.con, replace(CFG, link="any")).create_schema()
    finally:
        idx.con.close()


def test_kept_needs_verification_and_a_known_rule() -> None:
    """The config refuses both when it is made, before any index sees it."""
    with pytest.raises(ConfigError, match="needs verify = true"):
        replace(CFG, verify=False, link="kept")
    with pytest.raises(ConfigError, match=r'\[near_dedup\]\.link = .all.: must be "any" or "kept"'):
        replace(CFG, link="all")  # type: ignore[arg-type]
    assert band_index.NearDedupIndex(None, replace(CFG, link="kept")).link == "kept"  # type: ignore[arg-type]


# -- the exact test (verify_on = "shingles", today's default): the same machinery, exact Jaccard --
EXACT = replace(CFG, verify_on="shingles")


@pytest.mark.parametrize("deciders", [0, 2], ids=["driver", "2 deciders"])
@pytest.mark.parametrize("link", ["any", "kept"])
def test_exact_verification_matches_the_reference(
    link: band_index.Link, deciders: int, tmp_path: Path
) -> None:
    """The exact test on shingle sets decides as the reference does, in one chunk (every pair
    the chunk's own) and in many; with decider processes (rule ``kept``) they test every pair,
    the chunk's own and the label rounds' too, reading the workers' files themselves; and
    with runs of chunks matched as one (pairs across the run's files)."""
    texts = chain_corpus()
    data = columns(texts, EXACT)
    n = len(texts)
    expected = reference(texts, link, EXACT)
    assert expected != reference(texts, link, CFG)  # the estimate decides some pairs otherwise
    assert len({c for _, c, d in expected if d is not None}) >= 10
    runs = (([n], 1, None, 1), (chunking(n, [1, 7, 40]), 2, 3, 1), (chunking(n, [3, 7]), 1, 3, 4))
    for sizes, threads, shuffle, run in runs:
        folder = tmp_path / f"{len(sizes)}-{run}"
        files = SignatureFiles(folder / "signatures")
        idx = band_index.NearDedupIndex(
            engine.connect(threads=threads), replace(EXACT, link=link), files, deciders
        )
        idx.create_schema()
        try:
            got = as_global(match_in_chunks(idx, data, sizes, shuffle, folder, run), sizes)
        finally:
            idx.close()
            idx.con.close()
        assert got == expected


def _changed(base: np.ndarray, lo: int, hi: int, tag: int) -> np.ndarray:
    """A signature made by hand: ``base`` with positions ``lo:hi`` replaced (``tag`` apart)."""
    out = base.copy()
    out[lo:hi] = tag * 1000 + np.arange(lo, hi, dtype=np.uint32)
    return out


def _by_hand(
    folder: Path,
    deciders: int,
    sigs: dict[str, np.ndarray],
    bands: dict[str, list[int]],
    chunks: list[str],
) -> dict[str, str | None]:
    """Match and add documents made by hand (signatures and bands, not texts) chunk by chunk
    (``chunks``: the names of each chunk's documents) with rule ``kept``, as a worker's files
    hand them over; each document's ``dup_of``."""
    idx = band_index.NearDedupIndex(
        engine.connect(threads=1), CFG, SignatureFiles(folder / "signatures"), deciders
    )
    idx.create_schema()
    got = {}
    try:
        for ordinal, names in enumerate(chunks):
            doc_seq = band_index.make_doc_seq(ordinal, np.arange(len(names)))
            sig = pa.array([sigs[n].tolist() for n in names], pa.list_(pa.uint32()))
            band = pa.array([bands[n] for n in names], pa.list_(pa.uint64()))
            table = band_index.chunk_table(doc_seq, list(names), sig, band)
            files_of = worker_files(folder, ordinal, table)
            result = idx.match_chunk(table, *files_of)
            idx.add_chunk(table, result, *files_of)
            got.update(zip(names, result["dup_of"].to_pylist(), strict=True))
    finally:
        idx.close()
        idx.con.close()
    return got


def _hand_bands() -> Callable[[dict[int, int]], list[int]]:
    """Band lists made by hand: the bands named shared (band -> hash), every other unique."""
    unique = iter(range(10_000, 20_000))
    bands_n = mh.layout(CFG)[0]
    return lambda shared: [shared.get(i, next(unique)) for i in range(bands_n)]


DECIDERS = pytest.mark.parametrize("deciders", [0, 2], ids=["driver", "2 deciders"])


@DECIDERS
@pytest.mark.parametrize("chunks", [["AB", "CDE"], ["ABCDE"]], ids=["lake", "one chunk"])
def test_a_cluster_whose_kept_document_is_not_a_candidate(
    tmp_path: Path, deciders: int, chunks: list[str]
) -> None:
    """Rule ``kept`` settles a cluster by its kept document first; when that is not among a
    document's candidates, the candidates it has in the cluster must still give a verified edge.
    A is kept and B near it; C, D and E share a band with B only, each its own. C is near A and
    B: joins A. D is near B, not A: a cluster of its own. E is near A, not B: no verified edge,
    a cluster of its own. With A and B in the lake, or all five in one chunk (then every pair
    is the chunk's own: decider processes test them)."""
    a = np.arange(CFG.num_perm, dtype=np.uint32)
    b = _changed(a, 0, 10, 1)
    sigs = {
        "A": a,
        "B": b,
        "C": _changed(a, 10, 20, 2),  # 118 equal with A, 108 with B
        "D": _changed(b, 10, 40, 3),  # 88 with A (< NEED), 98 with B
        "E": _changed(a, 10, 46, 4),  # 92 with A, 82 with B
    }
    assert sum(sigs["D"] == a) < NEED <= sum(sigs["C"] == b) and sum(sigs["E"] == b) < NEED
    bands_of = _hand_bands()
    bands = {  # B shares one band with each of C, D and E, which share none with each other
        "A": bands_of({0: 1}),
        "B": bands_of({0: 1, 1: 2, 2: 3, 3: 4}),
        **{name: bands_of({i: i + 1}) for i, name in enumerate("CDE", start=1)},
    }
    got = _by_hand(tmp_path, deciders, sigs, bands, chunks)
    assert got == {"A": None, "B": "A", "C": "A", "D": None, "E": None}


@DECIDERS
def test_a_lake_label_flows_along_an_in_chunk_edge(tmp_path: Path, deciders: int) -> None:
    """A label from the lake reaches a document through an in-chunk edge, and the label rounds
    test it against that label's kept document, whose set must then be at hand (with decider
    processes the driver reads none: they read it from the lake's signature files). Made by
    hand: K is kept (chunk 0); A (chunk 1) shares a band with K and is near it: K's cluster. B
    (chunk 1) shares a band with A only, and is near A and K: it joins K through A. C (chunk 1)
    is an exact copy of K with no in-chunk edge: its label is never compared with in a round."""
    k = np.arange(CFG.num_perm, dtype=np.uint32)
    sigs = {"K": k, "A": _changed(k, 0, 10, 1), "C": k.copy()}
    sigs["B"] = _changed(sigs["A"], 10, 20, 2)  # 118 equal with A, 108 with K
    assert sum(sigs["B"] == k) >= NEED
    bands_of = _hand_bands()
    bands = {"K": bands_of({0: 1}), "A": bands_of({0: 1, 1: 2}), "B": bands_of({1: 2})}
    bands["C"] = list(bands["K"])
    got = _by_hand(tmp_path, deciders, sigs, bands, ["K", "ABC"])
    assert got == {"K": None, "A": "K", "B": "K", "C": "K"}


def test_a_decider_tests_a_runs_pairs_a_slice_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decider copies both sides' sets of the pairs it tests: it tests them a slice at a time
    (a run's pairs with many near copies are millions), and the flags are those of one pass,
    each pair's sets read from the right chunk of the run."""
    from lakecurate.store import band_shards

    texts, sig, bands = columns(chain_corpus(), EXACT)
    half = len(texts) // 2
    chunks = []
    for ordinal, rows in enumerate((np.arange(half), np.arange(half, len(texts)))):
        table = band_index.chunk_table(
            band_index.make_doc_seq(ordinal, np.arange(len(rows))),
            [f"d{i}" for i in rows],
            sig.take(rows),
            bands.take(rows),
        )
        (sets, _) = worker_files(tmp_path, ordinal, table)
        chunks.append((ordinal, sets.file.path.uri, table["doc_seq"].to_numpy()))
    later = chunks[1][2]
    every = np.concatenate([chunks[0][2], later])
    src = np.repeat(later, len(every))
    dst = np.tile(every, len(later))
    src, dst = src[dst < src], dst[dst < src]
    run = [(seq, uri) for seq, uri, _ in chunks]
    params = band_index.NearDedupIndex(None, EXACT).near_params  # type: ignore[arg-type]
    whole = band_shards._near(str(tmp_path / "lake"), run, src, dst, params)
    monkeypatch.setattr(band_shards, "NEAR_SLICE", 7)
    assert np.array_equal(band_shards._near(str(tmp_path / "lake"), run, src, dst, params), whole)
    assert 0 < whole.sum() < len(whole)
    a, b = (sig.take(pa.array((x & 0xFFFFFFFF) + half * (x >> 32))) for x in (src, dst))
    expected = signatures.near_flags(a, b, params["min_matches"], params["num"], params["den"])
    assert np.array_equal(whole, expected)
