"""MinHash signatures and LSH band hashes, vectorised in numpy: no DuckDB, no loop per token.

The whole path is ours, from code points to band hashes: tokens are hashed with a polynomial over
code points plus a splitmix64 finaliser, shingles with a polynomial over token hashes, and the
``num_perm`` permutations are multiply-add-shift hashes ``(a*x + b) >> 32`` on 64-bit words.
Nothing depends on DuckDB's ``hash()`` (undocumented, free to change between releases) or on
Python's ``hash()`` (salted per process), so a band index written years ago still matches new
documents as long as :func:`fingerprint` is unchanged. The one outside input is
Python's Unicode database (which characters are letters, their lower case), so its version is
part of the fingerprint.

Normalisation (the same as :func:`normalize`): NFC, lower case, and everything that is not a letter,
digit, mark or ``_`` (punctuation, symbols, whitespace) folded into a token boundary. Unit ``word``
takes runs of such characters as tokens; unit ``char`` takes each such character as a token (for
text without spaces: Chinese, Japanese); ``script`` (the default) shingles each script its own
way inside one document: every character of a script written without spaces (Han, kana, Thai,
Lao, Khmer, Myanmar) is a token, runs of the other word characters are words, so "Debian 这种规模"
gives ``debian 这 种 规 模``; ``auto`` (the rule of lakes made before ``script``) picks ``char`` for
a whole document whose letters are more than 30 % Han or kana, ``word`` otherwise. Shingles
are ``ngram`` consecutive tokens. A document with fewer tokens than ``ngram`` (but at least one)
has exactly one shingle, all its tokens, so two short documents only match when their token
sequences are identical. A document with no token at all (empty, only punctuation) has no
signature: it never takes part in near dedup.

Why it is fast: a batch is joined into one UTF-32 buffer, lower-cased and classified by table
lookups, token boundaries come from ``flatnonzero``, token hashes from prefix sums, and each
permutation is three in-place ufuncs plus one ``minimum.reduceat`` over all shingles of the batch.
Work is cut into slices of about ``_SLICE_CHARS`` code points so the temporaries stay in cache.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Sequence
from functools import cache
from typing import Literal

import numpy as np
import numpy.typing as npt

from lakecurate.config import NearDedupConfig, NearUnit

ALGORITHM_VERSION = 1
"""Bump whenever tokens, shingles, permutations or band hashes change: old band indexes must not be
mixed with new signatures, and the fingerprint is how a lake notices."""

Unit = NearUnit
"""Shingle unit (``[near_dedup].unit``): ``word``, ``char`` or ``auto``."""
U64 = npt.NDArray[np.uint64]
U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]

EMPTY = np.uint32(0xFFFFFFFF)
"""Every position of a signature that saw no shingle (only documents without tokens)."""

VERIFIED_FN_WEIGHT = 0.95
"""With verification, a candidate below the threshold costs one comparison and is then dropped,
while a pair LSH misses is lost for good: weight misses 0.95 (0.8, 128 -> 16 bands x 8 rows, which
catches 95 % of pairs at J = 0.8, against 74 % for 12 x 10 at weight 0.8; measured on the
benchmark: recall 0.91 -> see docs/near-dedup.md)."""

CJK_RATIO = 0.3
"""``auto`` uses character shingles when more than this share of a document's letters are CJK."""

UNSEGMENTED_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9D),  # half-width Katakana
    (0x20000, 0x323AF),  # CJK extensions B-H
)
"""Scripts written without spaces between words: unit ``script`` makes each of their word
characters a token (a run of them would be one "word" of a whole clause). Korean writes spaces:
words."""

_SLICE_CHARS = 1 << 18
_MAX_CP = 0x110000
_POLY_CHAR = np.uint64(0x100000001B3)  # FNV prime: odd, so invertible modulo 2**64
_POLY_TOKEN = np.uint64(0x9E3779B97F4A7C15)
_POLY_BAND = np.uint64(0xC2B2AE3D27D4EB4F)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
_CJK_RANGES = (
    (0x3040, 0x30FF),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9D),
    (0x20000, 0x323AF),
)


# -- the settings: band layout, fingerprint --------------------------------------------------------
def layout(cfg: NearDedupConfig) -> tuple[int, int]:
    """(bands, rows) of the LSH index: the configured ones, or the best for the threshold.

    Without ``bands`` and ``rows``, :func:`choose_bands` picks them, weighting misses
    :data:`VERIFIED_FN_WEIGHT` when candidates are verified and 0.5 when they are not.
    """
    if cfg.bands is not None and cfg.rows is not None:
        return cfg.bands, cfg.rows
    return choose_bands(
        cfg.threshold, cfg.num_perm, fn_weight=VERIFIED_FN_WEIGHT if cfg.verify else 0.5
    )


def fingerprint(cfg: NearDedupConfig) -> str:
    """A short hash of everything that makes two signatures comparable.

    A lake stores it with its band index and refuses signatures with another fingerprint: mixing
    them would silently miss every duplicate. ``threshold`` and ``verify`` only matter through
    the band layout, so they are left out when bands and rows are the same; ``enabled`` and
    ``link`` do not change signatures at all. ``verify_on`` is in it unless it is
    ``"signature"`` (the index then stores shingle sets, not signatures), which keeps the
    fingerprint of every index made before it existed. The canonical form must never change
    (existing lakes would refuse their index): bump :data:`ALGORITHM_VERSION` instead when the
    math does.
    """
    bands, rows = layout(cfg)
    canon_dict: dict[str, object] = {
        "algorithm": ALGORITHM_VERSION,
        "unicode": unicodedata.unidata_version,
        "num_perm": cfg.num_perm,
        "ngram": cfg.ngram,
        "seed": cfg.seed,
        "unit": cfg.unit,
        "bands": bands,
        "rows": rows,
    }
    if cfg.verify_on != "signature":  # the index stores shingle sets: not comparable with before
        canon_dict["verify_on"] = cfg.verify_on
    canon = json.dumps(canon_dict, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def describe(cfg: NearDedupConfig) -> dict[str, object]:
    """The config with its resolved band layout, for logs, reports and ``dedup-stats``."""
    bands, rows = layout(cfg)
    return {
        "num_perm": cfg.num_perm,
        "ngram": cfg.ngram,
        "seed": cfg.seed,
        "unit": cfg.unit,
        "threshold": cfg.threshold,
        "bands": bands,
        "rows": rows,
        "verify": cfg.verify,
        "verify_on": cfg.verify_on,
        "enabled": cfg.enabled,
        "link": cfg.link,
        "fingerprint": fingerprint(cfg),
        "s_curve_at_threshold": round(float(s_curve(cfg.threshold, bands, rows)), 4),
    }


# -- the S-curve ----------------------------------------------------------------------------------
def s_curve(s: float | npt.ArrayLike, bands: int, rows: int) -> npt.NDArray[np.float64]:
    """Probability that two documents of Jaccard ``s`` share at least one band: 1-(1-s^r)^b."""
    s_arr = np.asarray(s, dtype=np.float64)
    return 1.0 - (1.0 - s_arr**rows) ** bands


def _areas(threshold: float, bands: int, rows: int, steps: int = 2001) -> tuple[float, float]:
    """(false-positive area below the threshold, false-negative area above it)."""
    lo = np.linspace(0.0, threshold, steps)
    hi = np.linspace(threshold, 1.0, steps)
    fp = float(np.trapezoid(s_curve(lo, bands, rows), lo))
    fn = float(np.trapezoid(1.0 - s_curve(hi, bands, rows), hi))
    return fp, fn


@cache
def choose_bands(
    threshold: float, num_perm: int, fp_weight: float | None = None, fn_weight: float = 0.5
) -> tuple[int, int]:
    """The (bands, rows) with bands * rows <= num_perm that minimise the weighted error areas.

    The error of an LSH layout is the area under the S-curve left of the threshold (pairs below it
    that become candidates) plus the area above the curve right of it (pairs above it that are
    missed), weighted ``fp_weight`` and ``fn_weight`` (``fp_weight`` defaults to
    ``1 - fn_weight``). With verification a false positive only costs a comparison while a false
    negative is a lost duplicate, so :func:`layout` weights misses 0.95 then. Ties go to fewer
    bands (a smaller index).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold = {threshold}: must be between 0 and 1")
    wfp = 1.0 - fn_weight if fp_weight is None else fp_weight
    best: tuple[float, int, int] | None = None
    for bands in range(1, min(num_perm, 255) + 1):
        for rows in range(1, num_perm // bands + 1):
            fp, fn = _areas(threshold, bands, rows, steps=201)
            err = wfp * fp + fn_weight * fn
            if best is None or err < best[0] - 1e-12:
                best = (err, bands, rows)
    assert best is not None
    return best[1], best[2]


# -- normalisation and tokens (the reference, one string at a time) -------------------------------
_WORD_BIT = np.uint32(1 << 21)
_CJK_BIT = np.uint32(1 << 22)
_UNSEG_BIT = np.uint32(1 << 23)
_CP_MASK = np.uint32((1 << 21) - 1)


@cache
def _table() -> U32:
    """One lookup per code point: its lower case in the low 21 bits, word, CJK and unsegmented
    flags above.

    Built once per process. Only the ranges that hold letters are walked (planes 0-3 and the
    plane-14 variation selectors); the rest (unassigned, private use, surrogates) maps to itself
    and is no letter. One combined table means one gather per character instead of three.
    """
    table = np.arange(_MAX_CP, dtype=np.uint32)
    for lo, hi in ((0, 0xD800), (0xE000, 0x323B0), (0xE0100, 0xE01F0)):
        for cp in range(lo, hi):
            ch = chr(cp)
            low = ch.lower()
            entry = ord(low) if len(low) == 1 else cp
            if ch.isalnum() or ch == "_" or unicodedata.category(ch)[0] == "M":
                entry |= int(_WORD_BIT)
            table[cp] = entry
    for ranges, bit in ((_CJK_RANGES, _CJK_BIT), (UNSEGMENTED_RANGES, _UNSEG_BIT)):
        for lo, hi in ranges:
            block = table[lo : hi + 1]
            block[(block & _WORD_BIT) != 0] |= bit
    return table


def _fold(text: str) -> str:
    table = _table()
    out = []
    for ch in unicodedata.normalize("NFC", text):
        entry = int(table[ord(ch)])
        out.append(chr(entry & int(_CP_MASK)) if entry & int(_WORD_BIT) else " ")
    return "".join(out)


def normalize(text: str) -> str:
    """NFC, lower case, punctuation and whitespace folded into single spaces, trimmed."""
    return " ".join(_fold(text).split())


def document_unit(text: str, unit: Unit = "auto") -> Literal["word", "char", "script"]:
    """The unit of a document: ``auto`` means ``char`` when over 30 % of its letters are CJK."""
    if unit != "auto":
        return unit
    table = _table()
    letters = [ch for ch in normalize(text) if ch != " "]
    n_cjk = sum(1 for ch in letters if table[ord(ch)] & _CJK_BIT)
    return "char" if letters and n_cjk > CJK_RATIO * len(letters) else "word"


def tokens(text: str, unit: Unit = "auto") -> list[str]:
    """The tokens of one document (the reference the vectorised path is tested against)."""
    norm = normalize(text)
    doc_unit = document_unit(text, unit)
    if doc_unit == "char":
        return [ch for ch in norm if ch != " "]
    if doc_unit == "script":
        return [t for word in norm.split() for t in _script_split(word)]
    return norm.split()


def _script_split(word: str) -> list[str]:
    """A run of word characters cut so that every unsegmented character is a token of its own."""
    table = _table()
    out: list[str] = []
    run = ""
    for ch in word:
        if int(table[ord(ch)]) & int(_UNSEG_BIT):
            out += [run, ch] if run else [ch]
            run = ""
        else:
            run += ch
    return [*out, run] if run else out


def _mix_int(x: int) -> int:
    m = (1 << 64) - 1
    x ^= x >> 30
    x = (x * int(_MIX1)) & m
    x ^= x >> 27
    x = (x * int(_MIX2)) & m
    return x ^ (x >> 31)


def token_hash(token: str) -> int:
    """The 64-bit hash of one token: splitmix64 of the polynomial of its code points."""
    acc = 0
    for j, ch in enumerate(token):
        acc = (acc + ord(ch) * pow(int(_POLY_CHAR), j, 1 << 64)) & ((1 << 64) - 1)
    return _mix_int(acc)


# -- the vectorised path --------------------------------------------------------------------------
def _mix(x: U64) -> U64:
    """splitmix64's finaliser, in place on a fresh array: turns polynomials into uniform bits."""
    x ^= x >> _S30
    x *= _MIX1
    x ^= x >> _S27
    x *= _MIX2
    x ^= x >> _S31
    return x


class _Powers:
    """Cached powers of the character polynomial and of its inverse modulo 2**64."""

    def __init__(self) -> None:
        self.fwd: U64 = np.ones(1, dtype=np.uint64)
        self.inv: U64 = np.ones(1, dtype=np.uint64)

    def upto(self, n: int) -> tuple[U64, U64]:
        if len(self.fwd) < n:
            size = max(n, 2 * len(self.fwd), _SLICE_CHARS + 1)
            fwd = np.full(size, _POLY_CHAR, dtype=np.uint64)
            fwd[0] = 1
            inv = np.full(size, np.uint64(pow(int(_POLY_CHAR), -1, 1 << 64)), dtype=np.uint64)
            inv[0] = 1
            self.fwd, self.inv = np.cumprod(fwd), np.cumprod(inv)
        return self.fwd[:n], self.inv[:n]


_POWERS = _Powers()


def _slice_token_hashes(texts: Sequence[str], unit: Unit) -> tuple[U64, I64]:
    """Token hashes of a few texts, with per-document token offsets."""
    n_docs = len(texts)
    texts = [
        t if unicodedata.is_normalized("NFC", t) else unicodedata.normalize("NFC", t) for t in texts
    ]
    lens = np.fromiter(map(len, texts), dtype=np.int64, count=n_docs)
    # One NUL between documents: a non-word character, so no token crosses a boundary.
    entries = _table()[np.frombuffer("\x00".join(texts).encode("utf-32-le"), dtype=np.uint32)]
    is_word = (entries & _WORD_BIT) != 0
    cps = entries & _CP_MASK
    n = len(cps)
    doc_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lens + 1, out=doc_start[1:])
    if unit == "word":
        char_mode = np.zeros(n, dtype=np.bool_)
    elif unit == "char":
        char_mode = np.ones(n, dtype=np.bool_)
    elif unit == "script":
        char_mode = (entries & _UNSEG_BIT) != 0
    else:
        char_mode = np.repeat(_char_docs(entries, is_word, doc_start), lens + 1)[:n]
    # A token starts at a word character after a non-word one, or at or after a character token
    # (the same for a whole document under word, char and auto; per character under script).
    cut = np.empty(n, dtype=np.bool_)  # a token boundary lies before position i
    cut[:1] = True
    cut[1:] = ~is_word[:-1] | char_mode[:-1] | char_mode[1:]
    starts = np.flatnonzero(is_word & cut)
    ends_at = np.empty(n, dtype=np.bool_)  # a token boundary lies after position i
    ends_at[-1:] = True
    ends_at[:-1] = cut[1:] | ~is_word[1:]
    ends = np.flatnonzero(is_word & ends_at) + 1
    fwd, inv = _POWERS.upto(n + 1)
    prefix = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(cps.astype(np.uint64) * fwd[:n], out=prefix[1:])
    hashes = _mix((prefix[ends] - prefix[starts]) * inv[starts])
    # Tokens before each document's first character: a search over sorted starts.
    offsets = np.searchsorted(starts, doc_start[: n_docs + 1]).astype(np.int64)
    return hashes, offsets


def _char_docs(
    entries: U32, is_word: npt.NDArray[np.bool_], doc_start: I64
) -> npt.NDArray[np.bool_]:
    """Which documents ``auto`` shingles by character: counted by binary search, no loop."""
    ends = doc_start[1:] - 1
    letters = np.flatnonzero(is_word)
    n_letters = np.searchsorted(letters, ends) - np.searchsorted(letters, doc_start[:-1])
    cjk = np.flatnonzero(entries & _CJK_BIT)
    n_cjk = np.searchsorted(cjk, ends) - np.searchsorted(cjk, doc_start[:-1])
    return np.asarray(n_cjk > CJK_RATIO * n_letters)


def _slices(texts: Sequence[str]) -> list[tuple[int, int]]:
    """Cut a batch into runs of documents of about ``_SLICE_CHARS`` code points each."""
    out = []
    start, size = 0, 0
    for i, t in enumerate(texts):
        size += len(t) + 1
        if size >= _SLICE_CHARS:
            out.append((start, i + 1))
            start, size = i + 1, 0
    if start < len(texts):
        out.append((start, len(texts)))
    return out


def token_hashes(texts: Sequence[str], unit: Unit = "auto") -> tuple[U64, I64]:
    """64-bit hashes of the tokens of every text, flat, and offsets (len(texts) + 1) into them.

    ``hashes[offsets[i]:offsets[i+1]]`` are the tokens of ``texts[i]`` in order, equal to
    ``[token_hash(t) for t in tokens(texts[i], unit)]``.
    """
    parts = [_slice_token_hashes(texts[a:b], unit) for a, b in _slices(texts)]
    return _concat(parts, len(texts))


def _concat(parts: list[tuple[U64, I64]], n_docs: int) -> tuple[U64, I64]:
    if not parts:
        return np.empty(0, dtype=np.uint64), np.zeros(n_docs + 1, dtype=np.int64)
    if len(parts) == 1:
        return parts[0]
    values = np.concatenate([p[0] for p in parts])
    counts = np.concatenate([np.diff(p[1]) for p in parts])
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return values, offsets


def shingle_hashes(values: U64, offsets: I64, ngram: int) -> tuple[U64, I64]:
    """Hashes of the ``ngram``-token shingles of every document, flat, with offsets.

    Input: token hashes (ours, DuckDB's ``hash()``, anything 64-bit) and per-document offsets. A
    document of ``1 <= m < ngram`` tokens gets one shingle of all its tokens; one of no tokens gets
    none. Shingle order within a document is kept (it does not matter to MinHash).
    """
    values = np.ascontiguousarray(values, dtype=np.uint64)
    offsets = np.asarray(offsets, dtype=np.int64)
    counts = np.diff(offsets)
    total = len(values)
    long_docs = counts >= ngram
    n_windows = np.where(long_docs, counts - ngram + 1, np.minimum(counts, 1))
    out_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(n_windows, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint64)
    # Horner over the window: acc[i] = hash of tokens i .. i+k-1 after step k.
    acc = values.copy()
    for k in range(1, ngram + 1):
        if k > 1:
            width = total - k + 1
            acc = acc[:0] if width <= 0 else acc[:width] * _POLY_TOKEN + values[k - 1 :]
        short = np.flatnonzero(counts == k) if k < ngram else None
        if short is not None and len(short):
            out[out_offsets[short]] = acc[offsets[short]]
    docs = np.flatnonzero(long_docs)
    if len(docs):
        per = n_windows[docs]
        j = np.arange(int(per.sum()), dtype=np.int64) - np.repeat(np.cumsum(per) - per, per)
        out[np.repeat(out_offsets[docs], per) + j] = acc[np.repeat(offsets[docs], per) + j]
    return _mix(out), out_offsets


@cache
def permutations(num_perm: int, seed: int) -> tuple[U64, U64]:
    """The ``num_perm`` multiply-add-shift parameters (odd multipliers ``a``, offsets ``b``)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    a = rng.integers(0, 2**64 - 1, size=num_perm, dtype=np.uint64, endpoint=True) | np.uint64(1)
    b = rng.integers(0, 2**64 - 1, size=num_perm, dtype=np.uint64, endpoint=True)
    return a, b


def signatures(shingles: U64, offsets: I64, num_perm: int, seed: int) -> U32:
    """MinHash signatures (N, num_perm) uint32 of documents given by their shingle hashes.

    Permutation ``p`` maps a shingle ``x`` to the high 32 bits of ``a[p]*x + b[p] mod 2**64``
    (Dietzfelbinger's multiply-add-shift, 2-independent); the signature keeps the minimum per
    document. Rows of documents without shingles are all ``EMPTY``.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n_docs = len(offsets) - 1
    sig = np.full((n_docs, num_perm), EMPTY, dtype=np.uint32)
    present = np.flatnonzero(offsets[1:] > offsets[:-1])
    if len(present) == 0:
        return sig
    starts = offsets[present]
    a, b = permutations(num_perm, seed)
    tmp = np.empty(len(shingles), dtype=np.uint64)
    high = tmp.view(np.uint32)[1::2] if np.little_endian else tmp.view(np.uint32)[0::2]
    out = np.empty((num_perm, len(present)), dtype=np.uint32)
    for p in range(num_perm):
        np.multiply(shingles, a[p], out=tmp)
        tmp += b[p]
        np.minimum.reduceat(high, starts, out=out[p])
    sig[present] = out.T
    return sig


def signatures_of_texts(texts: Sequence[str], cfg: NearDedupConfig) -> U32:
    """Signatures (len(texts), num_perm) of raw texts: normalise, tokenise, shingle, permute."""
    return sketch_texts(texts, cfg, with_sets=False)[0]


def sketch_texts(
    texts: Sequence[str], cfg: NearDedupConfig, *, with_sets: bool
) -> tuple[U32, U32, I64]:
    """Signatures of raw texts and, ``with_sets``, their shingle sets (:func:`shingle_sets`,
    else empty): one pass over the tokens for both."""
    sig = np.empty((len(texts), cfg.num_perm), dtype=np.uint32)
    set_parts: list[tuple[U64, I64]] = []
    for a, b in _slices(texts):
        values, offsets = _slice_token_hashes(texts[a:b], cfg.unit)
        shingles, soffsets = shingle_hashes(values, offsets, cfg.ngram)
        sig[a:b] = signatures(shingles, soffsets, cfg.num_perm, cfg.seed)
        if with_sets:
            sets, set_offsets = shingle_sets(shingles, soffsets)
            set_parts.append((sets.astype(np.uint64), set_offsets))
    if not with_sets:
        return sig, np.empty(0, dtype=np.uint32), np.zeros(0, dtype=np.int64)
    values, offsets = _concat(set_parts, len(texts))
    return sig, values.astype(np.uint32), offsets


def shingle_sets(shingles: U64, offsets: I64) -> tuple[U32, I64]:
    """Each document's shingles as a sorted set of 32-bit hashes, flat, with offsets.

    What verification ``verify_on = "shingles"`` compares: the exact Jaccard of two documents is
    ``|A & B| / |A | B|`` of these sets, so no estimation error decides a drop. 32 bits: a
    document of 10,000 shingles has a chance of about 10,000² / 2³³ ≈ 1 % that two of its
    shingles share a hash, which changes its Jaccard by 1 / 10,000 at most.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n_docs = len(offsets) - 1
    doc = np.repeat(np.arange(n_docs, dtype=np.uint64), np.diff(offsets))
    keys = np.sort((doc << _S32) | (np.asarray(shingles, dtype=np.uint64) >> _S32))
    if len(keys) > 1:  # distinct: np.sort and a mask, ~100x faster than np.unique (numpy 2.4)
        keep = np.empty(len(keys), dtype=np.bool_)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
    out_offsets = np.searchsorted(keys >> _S32, np.arange(n_docs + 1, dtype=np.uint64))
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32), out_offsets.astype(np.int64)


def exact_jaccard(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """The Jaccard similarity of two shingle sets (:func:`shingle_sets` rows)."""
    sa, sb = np.asarray(a), np.asarray(b)
    if len(sa) == 0 and len(sb) == 0:
        return 1.0
    common = len(np.intersect1d(sa, sb, assume_unique=True))
    return common / (len(sa) + len(sb) - common)


COMMON_VALUES = 1 << 21
"""Set elements (both sides) :func:`common_counts` sorts at once: 16 MiB of keys, a few times
that at its peak, however many pairs it is given and however long their sets."""


def common_counts(values_a: U32, offsets_a: I64, values_b: U32, offsets_b: I64) -> I64:
    """``|A_i & B_i|`` for every row ``i`` of two flat lists of shingle sets (each set distinct,
    offsets from 0), ``COMMON_VALUES`` elements at a time (a row's whole set pair at least)."""
    n = len(offsets_a) - 1
    ends = np.cumsum(np.diff(offsets_a) + np.diff(offsets_b))
    out = np.zeros(n, dtype=np.int64)
    lo = 0
    while lo < n:
        done = int(ends[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, done + COMMON_VALUES, side="right")))
        a, b = offsets_a[lo : hi + 1], offsets_b[lo : hi + 1]
        out[lo:hi] = _common(values_a[a[0] : a[-1]], a - a[0], values_b[b[0] : b[-1]], b - b[0])
        lo = hi
    return out


def _common(values_a: U32, offsets_a: I64, values_b: U32, offsets_b: I64) -> I64:
    """:func:`common_counts` of rows held at once: one sort of ``row << 32 | hash`` over both,
    so an element both sets hold is a pair of equal neighbours. Vectorised over all rows:
    DuckDB's ``list_intersect`` took ~60 us a pair."""
    n = len(offsets_a) - 1
    rows = np.arange(n, dtype=np.uint64)
    keys = np.concatenate(
        [
            (np.repeat(rows, np.diff(offsets_a)) << _S32) | np.asarray(values_a, dtype=np.uint64),
            (np.repeat(rows, np.diff(offsets_b)) << _S32) | np.asarray(values_b, dtype=np.uint64),
        ]
    )
    keys.sort()
    both = keys[1:][keys[1:] == keys[:-1]] >> _S32
    return np.bincount(both.astype(np.int64), minlength=n).astype(np.int64)


def is_near(common: int, size_a: int, size_b: int, threshold: float) -> bool:
    """The exact test of ``verify_on = "shingles"`` in integers (the same as the SQL's):
    ``common / (a + b - common) >= threshold`` with the threshold in millionths."""
    num, den = threshold_fraction(threshold)
    return common * (den + num) >= num * (size_a + size_b)


def threshold_fraction(threshold: float) -> tuple[int, int]:
    """``threshold`` as millionths (numerator, 1,000,000): an integer test, no float rounding."""
    return round(threshold * 1_000_000), 1_000_000


def is_empty(sig: U32) -> npt.NDArray[np.bool_]:
    """Which signature rows belong to documents without a single token."""
    return np.asarray((sig == EMPTY).all(axis=-1))


def band_hashes(sig: U32, bands: int, rows: int) -> U64:
    """(N, bands) 64-bit hashes of each band of ``rows`` consecutive signature values.

    Two documents share bucket ``(band, hash)`` iff (up to 2**-64) their signatures agree on all
    ``rows`` values of that band; the probability of that is J**rows, hence the S-curve.
    """
    sig = np.asarray(sig, dtype=np.uint32)
    if bands * rows > sig.shape[-1]:
        raise ValueError(
            f"{bands} bands × {rows} rows need {bands * rows} permutations, "
            f"signatures have {sig.shape[-1]}"
        )
    cube = sig[:, : bands * rows].reshape(len(sig), bands, rows).astype(np.uint64)
    acc = np.full((len(sig), bands), np.uint64(rows), dtype=np.uint64)
    for r in range(rows):
        acc *= _POLY_BAND
        acc += cube[:, :, r]
    return _mix(acc)


def estimate_jaccard(sig_a: npt.ArrayLike, sig_b: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The share of equal signature positions: an unbiased estimate of the Jaccard similarity.

    Works on single signatures or on row-aligned matrices (then one value per row). Its standard
    error is sqrt(J(1-J)/num_perm).
    """
    a = np.asarray(sig_a)
    b = np.asarray(sig_b)
    return np.asarray((a == b).mean(axis=-1), dtype=np.float64)


def expected_error(jaccard: float, num_perm: int) -> float:
    """Standard error of :func:`estimate_jaccard` at a true Jaccard ``jaccard``."""
    return math.sqrt(max(jaccard * (1.0 - jaccard), 0.0) / num_perm)
