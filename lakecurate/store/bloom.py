"""Tier 1 of the membership index: a Bloom filter that answers "certainly new" or "maybe seen".

Pure by design (numpy, mmh3, the standard library and ``lakecurate.errors`` only), so it can be
tested, benchmarked and memory-mapped by any process without a database. The DuckDB tables behind
it stay authoritative: a "no" from here is final, a "maybe" must be checked there (design.md §8).

Hashing. A key is hashed once, to 128 bits with MurmurHash3 x64_128 (``mmh3``), split into two
little-endian uint64 words ``h1, h2``. The k probe positions are ``g_i = (h1 + i * h2') mod m`` for
``i = 0..k-1`` with ``h2' = h2 | 1`` (exact integer arithmetic, computed incrementally so nothing
overflows). ``m`` is a multiple of 64 and ``h2'`` odd, so the k probes of a key are distinct for
any k < 64. Everything after the one ``mmh3`` call per key is numpy over the whole batch.

Keys are ``str`` or ``bytes``; a ``str`` is hashed as its UTF-8 bytes, so ``"id"`` and ``b"id"``
are the same key. A ``str`` holding lone surrogates (not valid Unicode, e.g. from
``os.fsdecode``) is encoded with ``surrogatepass`` so it still has one stable hash. Callers that
already hold a 128-bit hash per key (an md5 content hash split into two uint64, say) pass it as an
``(N, 2)`` uint64 array to ``add_hashes`` / ``contains_hashes`` and skip re-hashing; such a filter
only answers for keys hashed the same way.

Concurrency. Reads never lock: they take one reference to the bit array and only read it; bits
only ever go from 0 to 1, so a read sees every key whose ``add`` returned before the read began
(keys being added concurrently may or may not be seen, never a false "no" for finished ones).
Writes take a per-filter ``threading.Lock``. Across processes, share a filter through the file
written by ``save`` and opened with ``load``: the bits are memory-mapped read-only, and ``save``
always writes a new file and renames it over the old one, so a mapped reader keeps a consistent
(old) view. Never modify a saved file in place. Adding to a loaded filter first copies its bits
into memory (copy-on-write); the file on disk is untouched until the next ``save``.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import numbers
import operator
import os
import struct
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, Literal

import mmh3
import numpy as np
import numpy.typing as npt

from lakecurate.errors import LakecurateError
from lakecurate.lake import atomic

__all__ = [
    "DEFAULT_SEED",
    "FORMAT_VERSION",
    "MAGIC",
    "BloomFileError",
    "BloomFilter",
    "BloomParameterError",
    "ScalableBloomFilter",
    "hash_keys",
    "load",
]

HashArray = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]
Key = str | bytes

MAGIC: Final = b"LCBLOOM\0"
FORMAT_VERSION: Final = 1
DEFAULT_SEED: Final = 0
"""mmh3 seed for ``str``/``bytes`` keys; 0 is mmh3's own default, so ``mmh3.hash_bytes(key)``
gives the same 128 bits a caller could precompute."""

_CHUNK: Final = 1 << 16
"""Keys per vectorised step: large enough to amortise numpy call overhead, small enough that the
k probe arrays stay in cache (64 Ki uint32 = 256 KiB each)."""

_HASH_CHUNK: Final = 1 << 12
"""Keys per mmh3 pass: the surrogate check and the hashing read the same strings, and at 4 Ki
keys the second read still finds them in cache (measured on 10 M keys: 67 ns/key against 101 ns
at 64 Ki)."""

_NARROW_MAX_M: Final = 1 << 31
"""Up to this many bits, probe positions fit uint32 with room for one addition before the
reduction (g + step < 2m <= 2**32): half the memory traffic of uint64."""

_BIT: Final = np.array([1 << i for i in range(8)], dtype=np.uint8)
_ONE: Final = np.uint8(1)
_ALIGN: Final = 64
_MAX_CHAIN: Final = 4096  # sanity bounds a loader checks before trusting a header
_MAX_K: Final = 1 << 16
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

# File layout, all little-endian. The checksum (blake2b-256) covers every byte of the file except
# the checksum field itself: header, padding and bits alike.
_PREAMBLE: Final = struct.Struct("<8sI")  # magic, format version
_GLOBAL: Final = struct.Struct("<IIqQddd")  # kind, chain length, watermark, initial_n, p, growth,
#                                             tightening
_FILTER: Final = struct.Struct("<QIIQQd")  # m, k, seed, n inserted, capacity, p
_CHECKSUM_SIZE: Final = 32
_KIND_SINGLE: Final = 0
_KIND_SCALABLE: Final = 1

FileProblem = Literal[
    "missing", "unreadable", "truncated", "foreign", "version", "corrupt", "checksum", "write"
]


class BloomParameterError(LakecurateError, ValueError):
    """A Bloom filter parameter or argument is out of range; the message names it and the range."""


class BloomFileError(LakecurateError):
    """A Bloom filter file cannot be used (missing, truncated, foreign, other version, damaged).

    The file is a cache of the DuckDB tables, so every problem has the same remedy: rebuild it.
    ``problem`` says which check failed, for callers that log or count them.
    """

    def __init__(self, path: str | os.PathLike[str], problem: FileProblem, detail: str) -> None:
        self.path = Path(path)
        self.problem: FileProblem = problem
        self.detail = detail
        # A failed save loses nothing (the next open rebuilds the cache from the state);
        # "delete it" would be the wrong advice for a file that was never written.
        remedy = (
            "nothing is lost: the file is a cache of the state database, rebuilt on the next open"
            if problem == "write"
            else "the file is a cache of the state database: delete it and let the index rebuild it"
        )
        super().__init__(f"Bloom filter file {self.path}: {detail}; {remedy}")


def _check_n(name: str, n: object) -> int:
    try:
        value = operator.index(n)  # type: ignore[arg-type]
    except TypeError:
        raise BloomParameterError(f"{name} must be a positive integer, got {n!r}") from None
    if isinstance(n, bool) or value <= 0:
        raise BloomParameterError(f"{name} must be a positive integer ({name} >= 1), got {n!r}")
    return value


def _check_p(name: str, p: object, *, low: float = 0.0, high: float = 1.0) -> float:
    value = float(p) if isinstance(p, numbers.Real) else math.nan
    if not (math.isfinite(value) and low < value < high):
        raise BloomParameterError(
            f"{name} must be a finite number in the open interval ({low:g}, {high:g}), got {p!r}"
        )
    return value


def _check_seed(seed: object) -> int:
    try:
        value = operator.index(seed)  # type: ignore[arg-type]
    except TypeError:
        raise BloomParameterError(f"seed must be an integer in [0, 2**32), got {seed!r}") from None
    if not 0 <= value < 1 << 32:
        raise BloomParameterError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    return value


def _bad_key(keys: Sequence[object]) -> BloomParameterError:
    for pos, key in enumerate(keys):
        if not isinstance(key, str | bytes | bytearray | memoryview):
            return BloomParameterError(
                f"keys must be str or bytes, got {type(key).__name__} at position {pos}; pass "
                "precomputed 128-bit hashes to add_hashes / contains_hashes instead"
            )
    return BloomParameterError("keys must be str or bytes")


def _hash_safe_as_str(keys: Sequence[Key]) -> bool | None:
    """True if every key is a ``str`` mmh3 can hash directly, False if they are all bytes-like,
    None if the batch needs per-key encoding (mixed types or lone surrogates).

    mmh3 5.3 crashes the interpreter (SIGSEGV) on a ``str`` with a lone surrogate, so a ``str``
    batch is proven valid first: one join (and, unless it is ASCII, one encode) of the batch in C.
    """
    try:
        joined = "".join(keys)  # type: ignore[arg-type]
    except TypeError:
        try:
            b"".join(keys)  # type: ignore[arg-type]
        except TypeError:
            return None
        return False
    if joined.isascii():
        return True
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return True


def _encode(key: object) -> object:
    return key.encode("utf-8", "surrogatepass") if isinstance(key, str) else key


def _batch(keys: Iterable[Key]) -> Sequence[Key]:
    if isinstance(keys, str | bytes):
        raise BloomParameterError(
            "keys must be a sequence of keys, got a single "
            f"{type(keys).__name__}; wrap one key in a list"
        )
    return keys if isinstance(keys, list | tuple) else list(keys)


def hash_keys(keys: Iterable[Key], *, seed: int = DEFAULT_SEED) -> HashArray:
    """The ``(N, 2)`` uint64 array of 128-bit mmh3 hashes of ``keys`` (see the module doc).

    Hash once and reuse the array when one batch is tested against several filters.
    """
    seed = _check_seed(seed)
    batch = _batch(keys)
    out = np.empty((len(batch), 2), dtype=np.uint64)
    for start in range(0, len(batch), _HASH_CHUNK):
        part = batch[start : start + _HASH_CHUNK]
        out[start : start + len(part)] = np.frombuffer(_digests(part, seed), dtype="<u8").reshape(
            -1, 2
        )
    return out


def _digests(keys: Sequence[Key], seed: int) -> bytes:
    """The 16-byte mmh3 digests of ``keys``, concatenated: the one per-key Python step."""
    mode = _hash_safe_as_str(keys)
    try:
        if mode is True:
            hash_str = mmh3.hash_bytes
            return b"".join([hash_str(k, seed) for k in keys])
        hash_buf = mmh3.mmh3_x64_128_digest
        if mode is False:
            return b"".join([hash_buf(k, seed) for k in keys])
        return b"".join([hash_buf(_encode(k), seed) for k in keys])  # type: ignore[arg-type]
    except TypeError:
        raise _bad_key(keys) from None


def _as_hashes(hashes: object) -> HashArray:
    if not isinstance(hashes, np.ndarray) or hashes.ndim != 2 or hashes.shape[1] != 2:
        shape = getattr(hashes, "shape", None)
        raise BloomParameterError(
            "hashes must be a numpy array of shape (N, 2) holding two "
            f"uint64 words per key, got {type(hashes).__name__} of shape "
            f"{shape}"
        )
    if hashes.dtype == np.int64:
        hashes = hashes.view(np.uint64)
    if hashes.dtype != np.uint64:
        raise BloomParameterError(f"hashes must have dtype uint64 (or int64), got {hashes.dtype}")
    return hashes


class BloomFilter:
    """A fixed-size Bloom filter for about ``n`` keys at false-positive rate ``p``.

    Sized with the classic optimum: ``m = ceil(-n ln p / (ln 2)**2)`` bits rounded up to a multiple
    of 64, ``k = max(1, round(m / n * ln 2))`` probes. Rounding k to an integer puts the rate at n
    keys a little off p (``(1 - e**(-k n / m))**k`` = 1.023 p at p = 0.001). Past ``n`` keys the
    rate climbs above ``p``; use ``ScalableBloomFilter`` when n is only an estimate.
    """

    def __init__(self, n: int, p: float, *, seed: int = DEFAULT_SEED) -> None:
        self._capacity = _check_n("n", n)
        self._p = _check_p("p", p)
        self._seed = _check_seed(seed)
        self._m, self._k = self.size_for(self._capacity, self._p)
        self._bits: npt.NDArray[np.uint8] = np.zeros(self._m // 8, dtype=np.uint8)
        self._count = 0
        self._lock = threading.Lock()

    @staticmethod
    def size_for(n: int, p: float) -> tuple[int, int]:
        """``(m, k)``: bits and probes for ``n`` keys at rate ``p``, without allocating anything."""
        n = _check_n("n", n)
        p = _check_p("p", p)
        m = math.ceil(-n * math.log(p) / math.log(2) ** 2)
        m = max(64, -(-m // 64) * 64)
        k = max(1, round(m / n * math.log(2)))
        return m, k

    @classmethod
    def _from_parts(
        cls,
        *,
        m: int,
        k: int,
        seed: int,
        capacity: int,
        p: float,
        count: int,
        bits: npt.NDArray[np.uint8],
    ) -> BloomFilter:
        self = cls.__new__(cls)
        self._capacity, self._p, self._seed = capacity, p, seed
        self._m, self._k, self._bits, self._count = m, k, bits, count
        self._lock = threading.Lock()
        return self

    # -- facts --------------------------------------------------------------------------------
    @property
    def m(self) -> int:
        """Number of bits."""
        return self._m

    @property
    def k(self) -> int:
        """Number of probes per key."""
        return self._k

    @property
    def seed(self) -> int:
        """mmh3 seed used for ``str``/``bytes`` keys."""
        return self._seed

    @property
    def capacity(self) -> int:
        """The ``n`` this filter was sized for."""
        return self._capacity

    @property
    def target_p(self) -> float:
        """The false-positive rate the filter was sized for (holds up to ``capacity`` keys)."""
        return self._p

    @property
    def memory_bytes(self) -> int:
        """Bytes of the bit array (memory-mapped pages for a loaded, not yet modified filter)."""
        return int(self._bits.nbytes)

    @property
    def is_mapped(self) -> bool:
        """True while the bits are the read-only memory map of a loaded file."""
        return not self._bits.flags.writeable

    def __len__(self) -> int:
        """Keys added so far, counting every key of every ``add`` call: an upper bound on the
        distinct keys when duplicates were added (a Bloom filter cannot tell them apart)."""
        return self._count

    @property
    def fill_ratio(self) -> float:
        """Fraction of bits set; about 0.5 at capacity when sized optimally."""
        words = self._bits.view(np.uint64)  # m is a multiple of 64
        step = 1 << 20  # bounded temporaries, even for a filter of hundreds of MiB
        ones = sum(
            int(np.bitwise_count(words[i : i + step]).sum(dtype=np.uint64))
            for i in range(0, len(words), step)
        )
        return ones / self._m

    @property
    def estimated_fp_rate(self) -> float:
        """False-positive rate implied by the bits actually set: ``fill_ratio ** k``."""
        return self.fill_ratio**self._k

    def __repr__(self) -> str:
        return (
            f"BloomFilter(n={self._capacity}, p={self._p:g}, m={self._m}, k={self._k}, "
            f"inserted={self._count})"
        )

    # -- writes -------------------------------------------------------------------------------
    def add(self, keys: Iterable[Key]) -> None:
        """Add ``str``/``bytes`` keys. Writers are serialised by a per-filter lock, taken per
        64 Ki-key chunk; readers take none (see the module doc)."""
        batch = _batch(keys)
        for start in range(0, len(batch), _CHUNK):
            self.add_hashes(hash_keys(batch[start : start + _CHUNK], seed=self._seed))

    def add_hashes(self, hashes: HashArray) -> None:
        """Add keys given as precomputed 128-bit hashes, an ``(N, 2)`` uint64 array."""
        h = _as_hashes(hashes)
        with self._lock:
            if self.is_mapped:
                self._bits = self._bits.copy()  # copy-on-write: never write through the map
            self._set(h)
            self._count += len(h)

    def _probe_start(
        self, h: HashArray
    ) -> tuple[npt.NDArray[np.unsignedinteger], npt.NDArray[np.unsignedinteger]]:
        m = np.uint64(self._m)
        g = h[:, 0] % m
        step = (h[:, 1] | np.uint64(1)) % m
        if self._m <= _NARROW_MAX_M:
            return g.astype(np.uint32), step.astype(np.uint32)
        return g, step

    def _set(self, h: HashArray) -> None:
        bits = self._bits
        for start in range(0, len(h), _CHUNK):
            g, step = self._probe_start(h[start : start + _CHUNK])
            m = g.dtype.type(self._m)
            probes = np.empty((self._k, len(g)), dtype=g.dtype)
            probes[0] = g
            for i in range(1, self._k):
                g += step
                np.minimum(g, g - m, out=g)  # g - m wraps above g unless g >= m: a branchless mod
                probes[i] = g
            # Unsorted: sorting the positions first cost more than it saved at every filter
            # size (numpy 2.4, 110,000 keys of 11 probes into 1 / 7 / 17 / 71 MiB of bits:
            # sort + bitwise_or.at 652 / 592 / 782 / 1,726 ns a key, bitwise_or.at alone
            # 204 / 438 / 454 / 954; it was a fifth of the driver's decisions at 256 MiB
            # chunks). bitwise_or.at is exact with repeated positions: no retry.
            flat = probes.ravel()
            np.bitwise_or.at(bits, flat >> 3, np.left_shift(_ONE, (flat & 7).astype(np.uint8)))

    # -- reads --------------------------------------------------------------------------------
    def might_contain(self, keys: Iterable[Key]) -> BoolArray:
        """For each key: False = certainly never added, True = probably added (rate ~target_p)."""
        batch = _batch(keys)
        out = np.empty(len(batch), dtype=np.bool_)
        for start in range(0, len(batch), _CHUNK):
            part = hash_keys(batch[start : start + _CHUNK], seed=self._seed)
            out[start : start + len(part)] = self._test(part)
        return out

    def contains_hashes(self, hashes: HashArray) -> BoolArray:
        """``might_contain`` for keys given as precomputed ``(N, 2)`` uint64 hashes."""
        h = _as_hashes(hashes)
        out = np.empty(len(h), dtype=np.bool_)
        for start in range(0, len(h), _CHUNK):
            out[start : start + _CHUNK] = self._test(h[start : start + _CHUNK])
        return out

    def _test(self, h: HashArray) -> BoolArray:
        """All-k-probes-set test of one chunk. After the first probe only the survivors are
        carried on: an absent key is usually rejected by its first or second probe."""
        bits = self._bits  # one reference: a concurrent copy-on-write cannot tear this read
        g, step = self._probe_start(h)
        m = g.dtype.type(self._m)
        alive = np.flatnonzero((np.take(bits, g >> 3) & np.take(_BIT, g & 7)) != 0)
        g, step = g[alive], step[alive]
        res = np.ones(len(g), dtype=np.bool_)
        for _ in range(1, self._k):
            g += step
            np.minimum(g, g - m, out=g)
            res &= (np.take(bits, g >> 3) & np.take(_BIT, g & 7)) != 0
        out = np.zeros(len(h), dtype=np.bool_)
        out[alive[res]] = True
        return out

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str], watermark: int) -> None:
        """Write the filter atomically to ``path``, recording the DuckDB ``watermark`` it covers.

        Holds the write lock while writing (readers go on), so the bits, the count and the
        checksum in the file agree."""
        with self._lock:
            _write(Path(path), _KIND_SINGLE, watermark, self._capacity, self._p, 0.0, 0.0, [self])


class ScalableBloomFilter:
    """A chain of Bloom filters that keeps the false-positive rate at most ``p`` as n grows.

    Filter ``i`` holds ``ceil(initial_n * growth**i)`` keys at rate ``p_i = p (1 - r) r**i`` with
    ``r = tightening``; a new filter is started when the newest reaches its capacity. A key is
    "maybe" if any filter says so, so the compound rate is
    ``1 - prod(1 - p_i) <= sum(p_i) < p (1 - r) / (1 - r) = p`` however many filters are chained
    (Almeida et al., "Scalable Bloom Filters", 2007), up to the few percent by which the integer k
    of each filter misses its ``p_i``. The price is a first filter sized for ``p (1 - r)`` (p/2 by
    default), about 10% more bits than a plain filter at p = 0.001.
    """

    def __init__(
        self,
        initial_n: int,
        p: float,
        growth: float = 2.0,
        tightening: float = 0.5,
        *,
        seed: int = DEFAULT_SEED,
    ) -> None:
        self._initial_n = _check_n("initial_n", initial_n)
        self._p = _check_p("p", p)
        value = float(growth) if isinstance(growth, numbers.Real) else math.nan
        if not (math.isfinite(value) and value >= 1.0):
            raise BloomParameterError(f"growth must be a finite number >= 1, got {growth!r}")
        self._growth = value
        self._tightening = _check_p("tightening", tightening)
        self._seed = _check_seed(seed)
        self._filters: tuple[BloomFilter, ...] = ()
        self._lock = threading.Lock()
        self._grow()

    def _grow(self) -> None:
        i = len(self._filters)
        capacity = math.ceil(self._initial_n * self._growth**i)
        p_i = self._p * (1.0 - self._tightening) * self._tightening**i
        if i >= _MAX_CHAIN or p_i <= 0.0:
            raise BloomParameterError(
                f"the filter chain cannot grow past {i} filters (rate of the next one: {p_i:g}); "
                "choose a larger initial_n, a growth above 1 or a tightening closer to 1"
            )
        # Publish a new tuple: a reader iterating the old one is unaffected.
        self._filters = (*self._filters, BloomFilter(capacity, p_i, seed=self._seed))

    @classmethod
    def _from_parts(
        cls,
        *,
        initial_n: int,
        p: float,
        growth: float,
        tightening: float,
        seed: int,
        filters: Sequence[BloomFilter],
    ) -> ScalableBloomFilter:
        self = cls.__new__(cls)
        self._initial_n, self._p, self._growth, self._tightening = initial_n, p, growth, tightening
        self._seed, self._filters, self._lock = seed, tuple(filters), threading.Lock()
        return self

    @property
    def filters(self) -> tuple[BloomFilter, ...]:
        """The chain, oldest first."""
        return self._filters

    @property
    def target_p(self) -> float:
        """The bound on the compound false-positive rate."""
        return self._p

    @property
    def initial_n(self) -> int:
        """Capacity of the first filter."""
        return self._initial_n

    @property
    def growth(self) -> float:
        """Capacity ratio between consecutive filters."""
        return self._growth

    @property
    def tightening(self) -> float:
        """Rate ratio between consecutive filters."""
        return self._tightening

    @property
    def seed(self) -> int:
        """mmh3 seed used for ``str``/``bytes`` keys (shared by the chain: one hash per key)."""
        return self._seed

    @property
    def capacity(self) -> int:
        """Keys the current chain holds before it grows again."""
        return sum(f.capacity for f in self._filters)

    @property
    def m(self) -> int:
        """Total bits over the chain."""
        return sum(f.m for f in self._filters)

    @property
    def memory_bytes(self) -> int:
        """Bytes of all bit arrays."""
        return sum(f.memory_bytes for f in self._filters)

    def __len__(self) -> int:
        """Keys added, an upper bound on distinct keys (see ``BloomFilter.__len__``)."""
        return sum(len(f) for f in self._filters)

    @property
    def fill_ratio(self) -> float:
        """Fraction of all bits set over the chain."""
        filters = self._filters
        return sum(f.fill_ratio * f.m for f in filters) / sum(f.m for f in filters)

    @property
    def estimated_fp_rate(self) -> float:
        """``1 - prod(1 - fill_i ** k_i)``: the rate implied by the bits actually set."""
        return 1.0 - math.prod(1.0 - f.estimated_fp_rate for f in self._filters)

    def __repr__(self) -> str:
        return (
            f"ScalableBloomFilter(initial_n={self._initial_n}, p={self._p:g}, "
            f"growth={self._growth:g}, tightening={self._tightening:g}, "
            f"filters={len(self._filters)}, inserted={len(self)})"
        )

    def add(self, keys: Iterable[Key]) -> None:
        """Add ``str``/``bytes`` keys, growing the chain as filters fill up."""
        batch = _batch(keys)
        for start in range(0, len(batch), _CHUNK):
            self.add_hashes(hash_keys(batch[start : start + _CHUNK], seed=self._seed))

    def add_hashes(self, hashes: HashArray) -> None:
        """Add keys given as precomputed ``(N, 2)`` uint64 hashes."""
        h = _as_hashes(hashes)
        with self._lock:
            pos = 0
            while pos < len(h):
                newest = self._filters[-1]
                room = newest.capacity - len(newest)
                if room <= 0:
                    self._grow()
                    continue
                newest.add_hashes(h[pos : pos + room])
                pos += room

    def might_contain(self, keys: Iterable[Key]) -> BoolArray:
        """False = certainly never added; True = probably added (compound rate <= target_p)."""
        batch = _batch(keys)
        out = np.empty(len(batch), dtype=np.bool_)
        for start in range(0, len(batch), _CHUNK):
            part = hash_keys(batch[start : start + _CHUNK], seed=self._seed)
            out[start : start + len(part)] = self.contains_hashes(part)
        return out

    def contains_hashes(self, hashes: HashArray) -> BoolArray:
        """``might_contain`` for precomputed hashes: OR over the chain, newest (largest) first,
        testing each filter only with the keys no filter has claimed yet."""
        h = _as_hashes(hashes)
        out = np.zeros(len(h), dtype=np.bool_)
        pending = np.arange(len(h))
        for f in reversed(self._filters):
            if not len(pending):
                break
            hit = f.contains_hashes(h[pending])
            out[pending[hit]] = True
            pending = pending[~hit]
        return out

    def save(self, path: str | os.PathLike[str], watermark: int) -> None:
        """Write the chain atomically to ``path``, recording the DuckDB ``watermark`` it covers.

        Holds the chain's write lock while writing; readers go on."""
        with self._lock:
            _write(
                Path(path),
                _KIND_SCALABLE,
                watermark,
                self._initial_n,
                self._p,
                self._growth,
                self._tightening,
                list(self._filters),
            )


# -- file format ------------------------------------------------------------------------------
def _header_size(chain: int) -> int:
    return _PREAMBLE.size + _GLOBAL.size + _FILTER.size * chain


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def _layout(chain_m: Sequence[int]) -> tuple[list[int], int]:
    """Byte offset of each filter's bits and the total file size: every bit array starts on a
    64-byte boundary after the header and its checksum."""
    offset = _aligned(_header_size(len(chain_m)) + _CHECKSUM_SIZE)
    offsets = []
    for m in chain_m:
        offsets.append(offset)
        offset = _aligned(offset + m // 8)
    return offsets, offset


def _write(
    path: Path,
    kind: int,
    watermark: int,
    initial_n: int,
    p: float,
    growth: float,
    tightening: float,
    filters: Sequence[BloomFilter],
) -> None:
    try:
        watermark = operator.index(watermark)
    except TypeError:
        raise BloomParameterError(f"watermark must be an int64, got {watermark!r}") from None
    if not _INT64_MIN <= watermark <= _INT64_MAX:
        raise BloomParameterError(f"watermark must fit int64, got {watermark}")
    bit_arrays = [f._bits for f in filters]  # one reference each: consistent with the counts
    header = b"".join(
        [
            _PREAMBLE.pack(MAGIC, FORMAT_VERSION),
            _GLOBAL.pack(kind, len(filters), watermark, initial_n, p, growth, tightening),
            *(_FILTER.pack(f.m, f.k, f.seed, len(f), f.capacity, f.target_p) for f in filters),
        ]
    )
    offsets, total = _layout([f.m for f in filters])
    body: list[bytes | memoryview] = [bytes(offsets[0] - len(header) - _CHECKSUM_SIZE)]
    for i, bits in enumerate(bit_arrays):
        body.append(bits.data)
        end = offsets[i] + bits.nbytes
        body.append(bytes((offsets[i + 1] if i + 1 < len(offsets) else total) - end))
    digest = hashlib.blake2b(header, digest_size=_CHECKSUM_SIZE)
    for part in body:
        digest.update(part)
    try:
        with atomic.replacing(path) as tmp, open(tmp, "xb") as f:
            f.write(header)
            f.write(digest.digest())
            for part in body:
                f.write(part)
    except OSError as e:
        raise BloomFileError(
            path,
            "write",
            f"cannot be written ({e.strerror or e}); check that "
            "the folder exists, is writable and has free space",
        ) from e


def load(path: str | os.PathLike[str]) -> tuple[BloomFilter | ScalableBloomFilter, int]:
    """Open a file written by ``save``: ``(filter, watermark)``, bits memory-mapped read-only.

    Verifies the magic, the format version, the header's sizes against the file length and the
    checksum of every byte before returning, so a filter it returns never gives a false "no"
    because of a damaged file. Any failure raises ``BloomFileError``.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _PREAMBLE.size + _GLOBAL.size:
                head = f.read()
                if not MAGIC.startswith(head[: len(MAGIC)]) and not head.startswith(MAGIC):
                    raise BloomFileError(
                        path, "foreign", "is not a lakecurate Bloom filter file (no LCBLOOM magic)"
                    )
                raise BloomFileError(
                    path,
                    "truncated",
                    "is empty"
                    if size == 0
                    else f"is truncated ({size} bytes, shorter than the header)",
                )
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise BloomFileError(path, "missing", "does not exist") from None
    except OSError as e:
        raise BloomFileError(path, "unreadable", f"cannot be read ({e.strerror or e})") from e
    try:
        return _parse(path, mapped)
    except BaseException:
        mapped.close()  # no array views exist yet: only a verified file gets mapped into filters
        raise


def _parse(path: Path, mapped: mmap.mmap) -> tuple[BloomFilter | ScalableBloomFilter, int]:
    size = len(mapped)
    magic, version = _PREAMBLE.unpack_from(mapped, 0)
    if magic != MAGIC:
        raise BloomFileError(
            path, "foreign", "is not a lakecurate Bloom filter file (no LCBLOOM magic)"
        )
    if version != FORMAT_VERSION:
        raise BloomFileError(
            path,
            "version",
            f"has format version {version}; this lakecurate reads version {FORMAT_VERSION}",
        )
    kind, chain, watermark, initial_n, p, growth, tightening = _GLOBAL.unpack_from(
        mapped, _PREAMBLE.size
    )
    if (
        kind not in (_KIND_SINGLE, _KIND_SCALABLE)
        or not 1 <= chain <= _MAX_CHAIN
        or (kind == _KIND_SINGLE and chain != 1)
    ):
        raise BloomFileError(
            path, "corrupt", f"has a damaged header (kind {kind}, {chain} filters)"
        )
    if kind == _KIND_SCALABLE and not (
        initial_n > 0 and 0.0 < p < 1.0 and growth >= 1.0 and 0.0 < tightening < 1.0
    ):
        raise BloomFileError(
            path, "corrupt", "has a damaged header (chain parameters out of range)"
        )
    header_end = _header_size(chain)
    if size < header_end + _CHECKSUM_SIZE:
        raise BloomFileError(
            path,
            "truncated",
            f"is truncated ({size} bytes, header needs {header_end + _CHECKSUM_SIZE})",
        )
    records = [
        _FILTER.unpack_from(mapped, _PREAMBLE.size + _GLOBAL.size + i * _FILTER.size)
        for i in range(chain)
    ]
    for m, k, seed, count, capacity, p_i in records:
        if (
            m <= 0
            or m % 64
            or not 1 <= k <= _MAX_K
            or capacity <= 0
            or count < 0
            or not 0.0 < p_i < 1.0
            or seed != records[0][2]
        ):
            raise BloomFileError(
                path, "corrupt", "has a damaged header (a filter record is out of range)"
            )
    offsets, expected = _layout([r[0] for r in records])
    if size != expected:
        problem: FileProblem = "truncated" if size < expected else "corrupt"
        raise BloomFileError(
            path,
            problem,
            f"has {size} bytes but its header describes {expected}: truncated or damaged",
        )
    with memoryview(mapped) as view:
        digest = hashlib.blake2b(view[:header_end], digest_size=_CHECKSUM_SIZE)
        digest.update(view[header_end + _CHECKSUM_SIZE :])
        stored = bytes(view[header_end : header_end + _CHECKSUM_SIZE])
    if digest.digest() != stored:
        raise BloomFileError(path, "checksum", "fails its checksum: the file is damaged")
    filters = [
        BloomFilter._from_parts(
            m=m,
            k=k,
            seed=seed,
            capacity=capacity,
            p=p_i,
            count=count,
            bits=np.frombuffer(mapped, dtype=np.uint8, count=m // 8, offset=offset),
        )
        for (m, k, seed, count, capacity, p_i), offset in zip(records, offsets, strict=True)
    ]
    if kind == _KIND_SINGLE:
        return filters[0], watermark
    return ScalableBloomFilter._from_parts(
        initial_n=initial_n,
        p=p,
        growth=growth,
        tightening=tightening,
        seed=records[0][2],
        filters=filters,
    ), watermark
