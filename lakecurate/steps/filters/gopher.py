"""Gopher repetition n-gram statistics as a vectorised Arrow UDF (design section 9).

``lc_ngram_chars(tokens VARCHAR[]) -> BIGINT[9]``: for each document (its tokens from SQL's
``lc_tokens``), the characters of the most frequent 2-, 3- and 4-gram, then the characters of the
duplicated 5- .. 10-grams, exactly as datatrove's ``GopherRepetitionFilter`` counts them:

- top n-gram: ``count x len(" ".join(ngram))`` of the most frequent n-gram; ties go to the n-gram
  seen first (``Counter.most_common``);
- duplicated n-grams: a left-to-right scan that, at an n-gram already seen, adds
  ``len("".join(ngram))`` and jumps n words ahead, and otherwise remembers the n-gram and moves
  one word (``find_all_duplicate``): an n-gram inside a jump is never remembered.

SQL cannot do this efficiently: a lambda over a token list copies it per element (quadratic) and
a set-based plan (one row per n-gram, window functions, joins) costs ~30x this. Here a whole
DuckDB vector (2,048 documents) is one set of numpy operations: tokens and n-grams become 64-bit
hashes (salted with the document, so equal n-grams of two documents never meet), and sorts find
the repeated ones (an n-gram can repeat only where both its (n-1)-grams do, so the
sorts shrink with n). Only the duplicated-n-gram scan needs a loop, and it visits only the
occurrences of n-grams that occur at least twice (nothing at all for most prose).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

N_TOP = (2, 3, 4)
N_DUP = (5, 6, 7, 8, 9, 10)
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)
_B = np.uint64(0x100000001B3)  # odd, so invertible modulo 2**64
_B_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
# B**(k+1) and B**-(k+1) as uint64 (numpy types cumprod of uint64 as signed: declared loosely).
_POW: np.ndarray = np.zeros(0, dtype=np.uint64)
_INV: np.ndarray = np.zeros(0, dtype=np.uint64)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads token ids over 64 bits."""
    x = (x ^ (x >> np.uint64(30))) * _M2
    x = (x ^ (x >> np.uint64(27))) * _M3
    x = x ^ (x >> np.uint64(31))
    return x


def _bytes(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Byte offsets (from 0) and the bytes of a string array, without copying the strings."""
    if not pa.types.is_string(strings.type) and not pa.types.is_large_string(strings.type):
        strings = strings.cast(pa.large_string())
    width = 8 if pa.types.is_large_string(strings.type) else 4
    _, off_buf, data_buf = strings.buffers()
    off = np.frombuffer(
        off_buf,
        dtype=np.int64 if width == 8 else np.int32,
        count=len(strings) + 1,
        offset=strings.offset * width,
    ).astype(np.int64)
    data = (
        np.frombuffer(data_buf, dtype=np.uint8, count=int(off[-1] - off[0]), offset=int(off[0]))
        if data_buf is not None and off[-1] > off[0]
        else np.zeros(0, dtype=np.uint8)
    )
    return off - off[0], data.astype(np.uint64)


def _repeated(keys: np.ndarray) -> np.ndarray:
    """Which keys occur more than once. A plain sort is ~5 ns a key (an argsort or a hash table
    is 4-10x that), so the index rides in the low bits of the key being sorted; the few
    candidates this finds (a shortened key can only add some) are then checked on full keys."""
    n = len(keys)
    if n < 2:
        return np.zeros(n, dtype=bool)
    bits = np.uint64(max(1, int(n - 1).bit_length()))
    s = np.sort((keys >> bits << bits) | np.arange(n, dtype=np.uint64))
    top = s >> bits
    same = top[1:] == top[:-1]
    m = np.zeros(n, dtype=bool)
    m[1:] |= same
    m[:-1] |= same
    cand = (s[m] & ((np.uint64(1) << bits) - np.uint64(1))).astype(np.int64)
    out = np.zeros(n, dtype=bool)
    if len(cand):
        _, inv, count = np.unique(keys[cand], return_inverse=True, return_counts=True)
        out[cand[count[inv] >= 2]] = True
    return out


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B**(k+1) and B**-(k+1) for k < n (mod 2**64), kept between calls."""
    global _POW, _INV  # noqa: PLW0603
    if len(_POW) < n:
        size = max(n, 2 * len(_POW), 1 << 20)
        _POW = np.cumprod(np.full(size, _B, dtype=np.uint64))
        _INV = np.cumprod(np.full(size, _B_INV, dtype=np.uint64))
    return _POW, _INV


def _greedy(
    pos: np.ndarray, gid: np.ndarray, nchars: np.ndarray, n: int, n_groups: int
) -> np.ndarray:
    """datatrove's find_all_duplicate over the occurrences of repeated n-grams, in text order.

    Returns the characters counted at each hit position (0 elsewhere). Positions are global
    token indices; n-grams never cross documents, so a jump never reaches into the next one.
    """
    hits = np.zeros(len(pos), dtype=np.int64)
    seen = bytearray(n_groups)
    free = -1
    for k, (p, g) in enumerate(zip(pos.tolist(), gid.tolist(), strict=True)):
        if p < free:
            continue
        if seen[g]:
            hits[k] = nchars[k]
            free = p + n
        else:
            seen[g] = 1
    return hits


def ngram_chars(tokens: pa.Array) -> pa.Array:
    """The Arrow UDF: list<varchar> per document -> list<int64> of 9 character counts."""
    if isinstance(tokens, pa.ChunkedArray):
        tokens = tokens.combine_chunks()
    n_docs = len(tokens)
    out = np.zeros((n_docs, len(N_TOP) + len(N_DUP)), dtype=np.int64)
    offsets = np.asarray(tokens.offsets, dtype=np.int64)
    flat = tokens.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets -= offsets[0]
    n_tok = len(flat)
    if not n_tok:
        return _as_lists(out, tokens)
    starts, ends = offsets[:-1], offsets[1:]
    sizes = ends - starts
    doc = np.repeat(np.arange(n_docs, dtype=np.int64), sizes)
    doc_end = np.repeat(ends, sizes)
    lens = np.asarray(pc.utf8_length(flat).fill_null(0), dtype=np.int64)
    cs = np.concatenate(([0], np.cumsum(lens)))
    # A polynomial hash of any byte range of the concatenated tokens (mod 2**64), from prefix
    # sums with powers of the inverse base: it gives each token its id, and duplicated n-grams
    # their key, which is their words joined without a space as in datatrove ("ab c" = "a bc").
    boff, raw = _bytes(flat)
    powers, inverse = _powers(len(raw) + 1)
    prefix = np.concatenate(([np.uint64(0)], np.cumsum(raw * inverse[: len(raw)], dtype=np.uint64)))

    def substring(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return _mix(
            (prefix[hi] - prefix[lo]) * powers[np.maximum(hi - 1, 0)] ^ (hi - lo).astype(np.uint64)
        )

    salt = _mix(doc.astype(np.uint64) * _M1 + np.uint64(7))
    h1 = substring(boff[:-1], boff[1:])  # token ids
    h = h1
    idx = np.arange(n_tok, dtype=np.int64)
    rep_prev = np.ones(n_tok, dtype=bool)  # is the (n-1)-gram at i repeated (n = 2: any token)
    for n in range(2, 11):
        m = n_tok - n + 1
        if m <= 0:
            break
        h = h[:m] * _M1 + h1[n - 1 :]  # rolling hash of the tokens i .. i+n-1 (uint64 wraps)
        valid = idx[:m] + n <= doc_end[:m]
        col = n - 2
        if n in N_TOP:
            # An n-gram can repeat only where both of its (n-1)-grams do: sort only those.
            cand = np.flatnonzero(valid & rep_prev[:m] & rep_prev[1 : m + 1])
            rep = np.zeros(m + 1, dtype=bool)
            rep[cand[_repeated(h[cand] ^ salt[cand])]] = True
            rep_prev = rep
            _top(out[:, col], n, np.flatnonzero(rep[:m]), h, salt, doc, starts, ends, cs)
        else:
            pos = np.flatnonzero(valid)
            if not len(pos):
                break
            lo, hi = boff[pos], boff[pos + n]
            key = substring(lo, hi) ^ salt[pos]
            r = _repeated(key)
            if not r.any():
                continue
            rpos = pos[r]
            _, gid = np.unique(key[r], return_inverse=True)
            hits = _greedy(rpos, gid, cs[rpos + n] - cs[rpos], n, int(gid.max()) + 1)
            out[:, col] = np.bincount(doc[rpos], weights=hits, minlength=n_docs)
    return _as_lists(out, tokens)


def _top(
    col: np.ndarray,
    n: int,
    rpos: np.ndarray,
    h: np.ndarray,
    salt: np.ndarray,
    doc: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    cs: np.ndarray,
) -> None:
    """Characters of each document's most frequent n-gram (ties: the one seen first)."""
    # Without a repeated n-gram, the top one is the document's first n-gram, once.
    has = ends - starts >= n
    f = starts[has]
    col[has] = cs[f + n] - cs[f] + n - 1
    if not len(rpos):
        return
    _, gid, count = np.unique(h[rpos] ^ salt[rpos], return_inverse=True, return_counts=True)
    first = np.empty(len(count), dtype=np.int64)
    first[gid[::-1]] = rpos[::-1]  # rpos ascends: the earliest occurrence of each group
    gdoc = doc[first]
    order = np.lexsort((first, -count, gdoc))  # per document: most frequent, then earliest
    lead = order[np.flatnonzero(np.diff(gdoc[order], prepend=-1))]
    f = first[lead]
    col[gdoc[lead]] = count[lead] * (cs[f + n] - cs[f] + n - 1)


def _as_lists(out: np.ndarray, tokens: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(
        pa.array(np.arange(0, out.size + 1, out.shape[1], dtype=np.int32)),
        pa.array(out.reshape(-1)),
        mask=tokens.is_null(),
    )
