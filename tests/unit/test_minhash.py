"""MinHash signatures: tokens, shingles, permutations, the Jaccard estimate and the S-curve."""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pytest
from helpers import PINNED_NEAR_SETTINGS

from lakecurate import config
from lakecurate.config import NearDedupConfig
from lakecurate.errors import ConfigError
from lakecurate.steps.near import minhash as mh

CFG = NearDedupConfig()
VOCAB = [f"w{i}" for i in range(3000)]


def words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(VOCAB) for _ in range(n)]


def shingle_set(text: str, cfg: NearDedupConfig = CFG) -> set[int]:
    values, offsets = mh.token_hashes([text], cfg.unit)
    shingles, _ = mh.shingle_hashes(values, offsets, cfg.ngram)
    return set(shingles.tolist())


def true_jaccard(a: str, b: str) -> float:
    sa, sb = shingle_set(a), shingle_set(b)
    return len(sa & sb) / len(sa | sb)


def test_identical_and_normalised_texts_give_identical_signatures() -> None:
    base = "The quick brown fox, jumps over the lazy dog; again and again."
    variants = [
        base,
        base.upper(),
        "  the QUICK brown\n\nfox jumps -- over the lazy dog again and again!!",
        "The quick brown fox jumps over the lazy dog again and again",
    ]
    sig = mh.signatures_of_texts(variants, CFG)
    assert (sig == sig[0]).all()
    assert mh.normalize(variants[2]) == mh.normalize(base)


def test_nfc_folds_decomposed_accents() -> None:
    composed, decomposed = "café crème brûlée à la carte", "cafe\u0301 cre\u0300me"
    sig = mh.signatures_of_texts([composed[:10], decomposed], CFG)
    assert (sig[0] == sig[1]).all()
    assert mh.tokens(decomposed) == ["café", "crème"]


def test_vectorised_tokens_equal_the_reference() -> None:
    rng = random.Random(3)
    texts = [
        "",
        "!!! ...",
        "Hello, World",
        "日本語のテキストです。東京",
        "Ünïcödé_snake 42 x²",
        "mixed 中文 text",
        *(" ".join(words(rng, rng.randint(0, 50))) for _ in range(30)),
    ]
    values, offsets = mh.token_hashes(texts)
    assert len(offsets) == len(texts) + 1
    for i, text in enumerate(texts):
        expected = [mh.token_hash(t) for t in mh.tokens(text)]
        assert values[offsets[i] : offsets[i + 1]].tolist() == expected, text


def test_signature_of_a_document_does_not_depend_on_its_batch() -> None:
    rng = random.Random(5)
    texts = [" ".join(words(rng, rng.randint(0, 80))) for _ in range(40)]
    together = mh.signatures_of_texts(texts, CFG)
    alone = np.vstack([mh.signatures_of_texts([t], CFG) for t in texts])
    assert (together == alone).all()


@pytest.mark.parametrize("edits", [5, 20, 40, 80])
def test_estimated_jaccard_within_expected_error(edits: int) -> None:
    rng = random.Random(edits)
    worst = 0.0
    for _ in range(8):
        base = words(rng, 400)
        other = list(base)
        for pos in rng.sample(range(400), edits):
            other[pos] = rng.choice(VOCAB)
        a, b = " ".join(base), " ".join(other)
        j = true_jaccard(a, b)
        sig = mh.signatures_of_texts([a, b], CFG)
        est = float(mh.estimate_jaccard(sig[0], sig[1]))
        worst = max(worst, abs(est - j) / max(mh.expected_error(j, CFG.num_perm), 1e-3))
    assert worst < 3.5


def test_estimate_is_unbiased_over_many_pairs() -> None:
    rng = random.Random(11)
    diffs = []
    for _ in range(60):
        base = words(rng, 200)
        other = base[:150] + words(rng, 50)
        a, b = " ".join(base), " ".join(other)
        sig = mh.signatures_of_texts([a, b], CFG)
        diffs.append(float(mh.estimate_jaccard(sig[0], sig[1])) - true_jaccard(a, b))
    assert abs(float(np.mean(diffs))) < 0.015


def test_s_curve_is_the_formula() -> None:
    s = np.linspace(0, 1, 11)
    assert np.allclose(mh.s_curve(s, 9, 13), 1 - (1 - s**13) ** 9)
    assert mh.s_curve(0.0, 4, 4) == 0.0
    assert mh.s_curve(1.0, 4, 4) == 1.0


def test_choose_bands_minimises_the_error_area() -> None:
    for threshold, num_perm in ((0.8, 128), (0.5, 64), (0.9, 256)):
        bands, rows = mh.choose_bands(threshold, num_perm)
        assert bands * rows <= num_perm
        fp, fn = mh._areas(threshold, bands, rows, steps=201)
        best = 0.5 * fp + 0.5 * fn
        for b in range(1, num_perm + 1):
            for r in range(1, num_perm // b + 1):
                fp2, fn2 = mh._areas(threshold, b, r, steps=201)
                assert best <= 0.5 * fp2 + 0.5 * fn2 + 1e-12
    # Weighting misses more moves the curve left: more bands per row.
    b_rec, r_rec = mh.choose_bands(0.8, 128, fn_weight=0.8)
    assert mh.s_curve(0.8, b_rec, r_rec) > mh.s_curve(0.8, *mh.choose_bands(0.8, 128))


def test_cjk_text_uses_character_shingles() -> None:
    poem = "白日依山尽黄河入海流欲穷千里目更上一层楼床前明月光疑是地上霜举头望明月低头思故乡"
    edited = poem[:20] + "江" + poem[21:]
    assert mh.document_unit(poem) == "char"
    assert mh.document_unit("plain english words") == "word"
    sig = mh.signatures_of_texts([poem, edited], CFG)
    assert 0.6 < float(mh.estimate_jaccard(sig[0], sig[1])) < 1.0
    word_cfg = NearDedupConfig(unit="word")
    wsig = mh.signatures_of_texts([poem, edited], word_cfg)
    assert float(mh.estimate_jaccard(wsig[0], wsig[1])) < 0.1  # one token each: all or nothing


def test_empty_and_short_documents_follow_the_rule() -> None:
    texts = ["", "   ", "?!", "one two", "One, two!", "one three", "a b c d e"]
    sig = mh.signatures_of_texts(texts, CFG)
    assert mh.is_empty(sig).tolist() == [True, True, True, False, False, False, False]
    assert (sig[3] == sig[4]).all()  # same short token sequence: same single shingle
    assert float(mh.estimate_jaccard(sig[3], sig[5])) < 0.1
    values, offsets = mh.token_hashes(texts)
    _, soff = mh.shingle_hashes(values, offsets, 5)
    assert np.diff(soff).tolist() == [0, 0, 0, 1, 1, 1, 1]


def test_shingles_from_foreign_token_hashes() -> None:
    values = np.arange(1, 11, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    offsets = np.array([0, 7, 7, 10], dtype=np.int64)
    shingles, soff = mh.shingle_hashes(values, offsets, 5)
    assert np.diff(soff).tolist() == [3, 0, 1]
    again, _ = mh.shingle_hashes(values[7:], np.array([0, 3]), 5)
    assert shingles[3] == again[0]


def test_band_hashes_agree_exactly_when_rows_agree() -> None:
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**32, size=(3, 128), dtype=np.uint32)
    sig[1] = sig[0]
    sig[1, 20] ^= 1  # band 2 of 8 rows differs
    bands = mh.band_hashes(sig, 16, 8)
    assert bands.shape == (3, 16)
    assert (bands[0] == bands[1]).tolist() == [i != 2 for i in range(16)]
    assert not (bands[0] == bands[2]).any()


def test_config_validation_and_fingerprint() -> None:
    with pytest.raises(ConfigError, match="both bands and rows"):
        NearDedupConfig(bands=4)
    with pytest.raises(ConfigError, match="fit in num_perm"):
        NearDedupConfig(bands=20, rows=10)
    assert mh.fingerprint(NearDedupConfig()) == mh.fingerprint(NearDedupConfig())
    assert mh.fingerprint(NearDedupConfig(seed=2)) != mh.fingerprint(NearDedupConfig())
    assert mh.describe(NearDedupConfig())["bands"] == mh.layout(NearDedupConfig())[0]


def test_fingerprint_ignores_what_does_not_change_signatures() -> None:
    """``enabled`` and ``link`` never change signatures; threshold and verify only through the
    band layout."""
    base = mh.fingerprint(CFG)
    assert mh.fingerprint(NearDedupConfig(enabled=True, link="kept")) == base
    explicit = NearDedupConfig(bands=16, rows=8, threshold=0.6, verify=False, link="any")
    assert mh.layout(explicit) == mh.layout(CFG) and mh.fingerprint(explicit) == base
    assert mh.fingerprint(NearDedupConfig(threshold=0.6)) != base  # another layout


def test_describe_keeps_its_keys() -> None:
    """The keys and values ``describe`` had before the config classes were merged, plus
    ``enabled`` and ``link``."""
    old = NearDedupConfig(enabled=True, link="kept", unit="auto", verify_on="signature")
    assert mh.describe(old) == {
        "num_perm": 128,
        "ngram": 5,
        "seed": 1,
        "unit": "auto",
        "threshold": 0.8,
        "bands": 16,
        "rows": 8,
        "verify": True,
        "verify_on": "signature",
        "enabled": True,
        "link": "kept",
        "fingerprint": "b901ddf28126623b",
        "s_curve_at_threshold": 0.947,
    }


# Fingerprints pinned from the code before MinHashConfig was folded into NearDedupConfig: a lake
# stores its fingerprint with its band index, so a change here makes every existing lake refuse
# its index. Only ALGORITHM_VERSION or the Unicode version may change them, on purpose.
PINNED_FINGERPRINTS = [
    ({"unit": "auto", "verify_on": "signature"}, "b901ddf28126623b", (16, 8)),
    (
        {**PINNED_NEAR_SETTINGS, "verify_on": "signature"},
        "a4b4ec757e6f902e",
        (25, 10),
    ),
    (
        {"num_perm": 64, "bands": 8, "rows": 8, "unit": "char", "verify_on": "signature"},
        "bb4a0d4c99c5ae38",
        (8, 8),
    ),
]
"""(The near-dedup defaults of before issue 17 written out: ``unit = "auto"``, ``verify_on =
"signature"``; today's defaults are another fingerprint, :func:`test_new_defaults_fingerprint`.)"""


def test_new_defaults_fingerprint() -> None:
    """Shingle sets in the index and per-script tokens: a fingerprint no old index has."""
    fingerprints = {fp for _, fp, _ in PINNED_FINGERPRINTS}
    assert mh.fingerprint(NearDedupConfig()) not in fingerprints
    assert mh.fingerprint(NearDedupConfig(verify_on="signature")) not in fingerprints
    assert mh.fingerprint(NearDedupConfig(unit="auto")) not in fingerprints


@pytest.mark.parametrize(("settings", "fingerprint", "layout"), PINNED_FINGERPRINTS)
def test_fingerprint_is_pinned(
    settings: dict[str, object], fingerprint: str, layout: tuple[int, int]
) -> None:
    assert mh.ALGORITHM_VERSION == 1 and unicodedata.unidata_version == "14.0.0"
    cfg = NearDedupConfig(**settings)  # type: ignore[arg-type]
    assert mh.layout(cfg) == layout
    assert mh.fingerprint(cfg) == fingerprint
    assert mh.fingerprint(config.from_dict({"near_dedup": settings}).near_dedup) == fingerprint


@pytest.mark.parametrize("batch_bytes", [1, 200, 5000])
def test_signing_in_batches_gives_the_signatures_of_one_pass(
    batch_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk's candidates are signed in runs of text (bounded memory): the columns are those
    of signing all at once, NULL for rows that take no part."""
    import pyarrow as pa

    from lakecurate.steps.near import signatures

    rng = random.Random(3)
    words = ["lake", "duck", "river", "stone", "light", "reed", "heron", "mist"]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 60))) for _ in range(300)]
    reasons = [rng.choice([None, None, "exact_dup", "filter:gopher"]) for _ in texts]
    rows = pa.table({"text": texts, "reason": reasons})
    cfg = NearDedupConfig(enabled=True)
    whole = signatures.add_signatures(rows, cfg)
    monkeypatch.setattr(signatures, "_BATCH_TEXT_BYTES", batch_bytes)
    batched = signatures.add_signatures(rows, cfg)
    assert batched.equals(whole)
    assert whole["reason"].null_count > 0 and whole.column(2).null_count > 0


# -- unit "script": each script its own way inside one document ----------------------------------
def test_mixed_script_text_shingles_each_script_its_own_way() -> None:
    """Latin words stay words, every Han, kana or Thai character is a token of its own, even
    inside one run of word characters ("Debian这种" is two scripts, three tokens)."""
    text = "在 Debian这种规模的项目中, Hello World! สวัสดีครับ カタカナ"
    expected = ["在", "debian", "这", "种", "规", "模", "的", "项", "目", "中", "hello", "world"]
    expected += list("สวัสดีครับ") + list("カタカナ")
    assert mh.tokens(text, "script") == expected
    # the rule of lakes made before: the whole document one way (here: characters throughout)
    assert mh.tokens(text, "auto")[:3] == ["在", "d", "e"]
    assert mh.tokens("plain english words", "script") == ["plain", "english", "words"]
    values, offsets = mh.token_hashes([text, "x", text], "script")
    assert values[offsets[2] : offsets[3]].tolist() == [mh.token_hash(t) for t in expected]


def test_script_tokens_vectorised_equal_the_reference() -> None:
    rng = random.Random(11)
    pieces = ["中文", "Debian", "ไทย", "ひらがな", "한국어", "x²", "_", "42", " ", ", ", "é"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(60)]
    for unit in ("script", "auto", "word", "char"):
        values, offsets = mh.token_hashes(texts, unit)  # type: ignore[arg-type]
        for i, text in enumerate(texts):
            expected = [mh.token_hash(t) for t in mh.tokens(text, unit)]  # type: ignore[arg-type]
            assert values[offsets[i] : offsets[i + 1]].tolist() == expected, (unit, text)


def test_a_latin_edit_in_a_chinese_document_costs_words_not_characters() -> None:
    """Replacing one English word in a mostly Chinese text: with characters throughout (auto) it
    breaks every 5-gram over its letters; per script only the 5-grams over that one word."""
    before = "这是一个关于近似重复文档检测的测试句子我们需要足够长的文本"
    after = "春眠不觉晓处处闻啼鸟夜来风雨声花落知多少床前明月光疑是地上霜"
    a = f"{before} Debian {after}"
    b = f"{before} Ubuntu {after}"

    def jaccard(unit: str) -> float:
        cfg = NearDedupConfig(unit=unit)  # type: ignore[arg-type]
        _, sets, off = mh.sketch_texts([a, b], cfg, with_sets=True)
        return mh.exact_jaccard(sets[off[0] : off[1]], sets[off[1] : off[2]])

    assert jaccard("script") > 0.8 > jaccard("auto")


# -- exact verification: shingle sets ------------------------------------------------------------
def test_shingle_sets_are_the_distinct_shingles_of_each_document() -> None:
    rng = random.Random(13)
    texts = ["", "one two", *(" ".join(words(rng, rng.randint(1, 120))) for _ in range(20))]
    texts.append("a b c d e a b c d e a b c d e")  # repeated shingles count once
    _, sets, offsets = mh.sketch_texts(texts, CFG, with_sets=True)
    for i, text in enumerate(texts):
        expected = sorted({h >> 32 for h in shingle_set(text)})
        assert sets[offsets[i] : offsets[i + 1]].tolist() == expected
    assert offsets[1] - offsets[0] == 0 and offsets[-1] - offsets[-2] == 5


def test_exact_test_is_the_jaccard_in_integers() -> None:
    """``is_near`` (and the SQL ``nd_near``, same formula) at and around the threshold."""
    for common, a, b in [(8, 9, 9), (80, 100, 100), (4, 5, 4), (0, 3, 3), (7, 9, 8)]:
        exact = common / (a + b - common)
        assert mh.is_near(common, a, b, 0.8) == (exact >= 0.8), (common, a, b)
    assert mh.is_near(4, 5, 4, 0.8)  # 4 / 5 = 0.8 exactly: near (>=), no float rounding
    rng = random.Random(17)
    base = words(rng, 200)
    for edits in (5, 10, 20, 40):
        other = list(base)
        for i in rng.sample(range(200), edits):
            other[i] = rng.choice(VOCAB)
        _, sets, off = mh.sketch_texts([" ".join(base), " ".join(other)], CFG, with_sets=True)
        sa, sb = sets[off[0] : off[1]], sets[off[1] : off[2]]
        assert mh.exact_jaccard(sa, sb) == pytest.approx(
            true_jaccard(" ".join(base), " ".join(other))
        )


@pytest.mark.parametrize("budget", [1 << 21, 1000, 1], ids=["whole", "rows", "under a row"])
def test_common_shingles_udf_counts_the_intersection_row_by_row(
    budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nd_common`` (the Arrow UDF of the SQL test): sets of every size, empty and NULL rows,
    and a sliced column (DuckDB hands UDFs slices of its vectors); all at once, a few rows at
    a time, and one row at a time when a row's sets alone are past the budget
    (``minhash.COMMON_VALUES``)."""
    import pyarrow as pa

    from lakecurate.steps.near.signatures import common_shingles

    monkeypatch.setattr(mh, "COMMON_VALUES", budget)

    rng = random.Random(19)
    left: list[list[int] | None] = []
    right: list[list[int] | None] = []
    for _ in range(300):
        universe = rng.sample(range(1 << 32), rng.randint(0, 400))
        left.append(sorted(rng.sample(universe, rng.randint(0, len(universe)))))
        right.append(sorted(rng.sample(universe, rng.randint(0, len(universe)))))
    left[5], right[7] = None, None
    a = pa.array(left, pa.list_(pa.uint32())).slice(3)
    b = pa.array(right, pa.list_(pa.uint32())).slice(3)
    got = common_shingles(a, b).to_pylist()
    for i, (x, y) in enumerate(zip(left[3:], right[3:], strict=True)):
        expected = None if x is None or y is None else len(set(x) & set(y))
        assert got[i] == expected, i
