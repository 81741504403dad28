"""The Bloom filter (tier 1 of the membership index): never a false "no", the sizing formula, the
measured false-positive rate, and a file format that refuses anything damaged or foreign."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import mmh3
import numpy as np
import pytest
from helpers import cli_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakecurate.errors import LakecurateError
from lakecurate.store import bloom
from lakecurate.store.bloom import (
    MAGIC,
    BloomFileError,
    BloomFilter,
    BloomParameterError,
    ScalableBloomFilter,
    hash_keys,
    load,
)

# Text including lone surrogates (hypothesis leaves category Cs out unless asked), the empty string
# and bytes, mixed in one batch.
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
KEY = st.one_of(ANY_TEXT, st.binary(max_size=12), st.sampled_from(["", b"", "é", "日本語", "😀"]))
KEYS = st.lists(KEY, max_size=300)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _set_bits(f: BloomFilter) -> list[int]:
    return np.flatnonzero(np.unpackbits(f._bits, bitorder="little")).tolist()


# -- never a false negative -------------------------------------------------------------------
@FAST
@given(keys=KEYS, p=st.floats(1e-6, 0.5))
def test_no_false_negative(keys: list[str | bytes], p: float) -> None:
    f = BloomFilter(max(1, len(keys)), p)
    f.add(keys)
    assert f.might_contain(keys).all()
    assert len(f) == len(keys)


@FAST
@given(
    keys=st.lists(KEY, min_size=1, max_size=600),
    initial_n=st.integers(1, 20),
    growth=st.sampled_from([1.0, 1.5, 2.0, 4.0]),
    batches=st.integers(1, 5),
)
def test_no_false_negative_across_growth(
    keys: list[str | bytes], initial_n: int, growth: float, batches: int
) -> None:
    f = ScalableBloomFilter(initial_n, 0.01, growth=growth)
    step = -(-len(keys) // batches)
    for start in range(0, len(keys), step):
        f.add(keys[start : start + step])
    assert f.might_contain(keys).all()
    assert len(f) == len(keys)
    if len(keys) > initial_n:
        assert len(f.filters) > 1
    for member in f.filters[:-1]:
        assert len(member) == member.capacity  # each filter filled to exactly its capacity


@FAST
@given(keys=KEYS, more=KEYS, scalable=st.booleans())
def test_no_false_negative_across_save_load_and_top_up(
    keys: list[str | bytes], more: list[str | bytes], scalable: bool
) -> None:
    f: BloomFilter | ScalableBloomFilter = (
        ScalableBloomFilter(8, 0.01) if scalable else BloomFilter(max(1, len(keys)), 0.01)
    )
    f.add(keys)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ids.bloom"
        f.save(path, watermark=len(keys))
        on_disk = path.read_bytes()
        loaded, watermark = load(path)
        assert type(loaded) is type(f)
        assert watermark == len(keys)
        assert len(loaded) == len(f)
        assert loaded.might_contain(keys).all()
        loaded.add(more)  # copy-on-write: the mapped file must not change
        assert loaded.might_contain(keys).all()
        assert loaded.might_contain(more).all()
        assert path.read_bytes() == on_disk
        loaded.save(path, watermark=len(keys) + len(more))
        again, watermark = load(path)
        assert watermark == len(keys) + len(more)
        assert again.might_contain(keys + more).all()
        assert sorted(os.listdir(tmp)) == ["ids.bloom"]


@FAST
@given(
    words=st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), max_size=300)
)
def test_precomputed_hashes(words: list[tuple[int, int]]) -> None:
    hashes = np.array(words, dtype=np.uint64).reshape(-1, 2)
    f = ScalableBloomFilter(16, 0.01)
    f.add_hashes(hashes)
    assert f.contains_hashes(hashes).all()
    assert f.contains_hashes(hashes.view(np.int64)).all()  # two DuckDB BIGINTs work as well


@FAST
@given(keys=st.lists(KEY, min_size=1, max_size=50))
def test_probes_follow_the_documented_double_hashing(keys: list[str | bytes]) -> None:
    """g_i = (h1 + i * (h2 | 1)) mod m in exact integers: the format depends on it."""
    f = BloomFilter(len(keys), 0.05)
    f.add(keys)
    expected: set[int] = set()
    for key in keys:
        raw = key.encode("utf-8", "surrogatepass") if isinstance(key, str) else key
        digest = mmh3.hash_bytes(raw)
        h1, h2 = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")
        expected |= {(h1 + i * (h2 | 1)) % f.m for i in range(f.k)}
    assert _set_bits(f) == sorted(expected)


def test_wide_probe_path_matches_the_narrow_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filters over 2**31 bits compute probes in uint64; force that path on a small filter."""
    keys = [f"doc-{i}" for i in range(5_000)]
    narrow = BloomFilter(len(keys), 0.01)
    narrow.add(keys)
    monkeypatch.setattr(bloom, "_NARROW_MAX_M", 0)
    wide = BloomFilter(len(keys), 0.01)
    wide.add(keys)
    assert (wide._bits == narrow._bits).all()
    absent = [f"other-{i}" for i in range(5_000)]
    assert (wide.might_contain(absent) == narrow.might_contain(absent)).all()


def test_golden_bits_are_stable() -> None:
    """Frozen values: a change here makes every saved filter wrong, so bump FORMAT_VERSION."""
    assert hash_keys(["lakecurate"]).tolist() == [[10097451923617942768, 10317121738717905376]]
    f = BloomFilter(100, 0.01)
    f.add(["lakecurate"])
    assert (f.m, f.k) == (960, 7)
    assert _set_bits(f) == [19, 242, 310, 465, 533, 688, 756]


def test_str_is_its_utf8_bytes_and_input_kinds_agree() -> None:
    keys = ["", "a", "é", "日本語", "😀", "\ud800", "x\udcff"]
    as_bytes = [k.encode("utf-8", "surrogatepass") for k in keys]
    assert (hash_keys(keys) == hash_keys(as_bytes)).all()
    assert (hash_keys(keys) == hash_keys(iter(keys))).all()
    assert (hash_keys(keys[:2] + as_bytes[2:]) == hash_keys(keys)).all()  # mixed batch
    assert (hash_keys([bytearray(b"ab"), memoryview(b"cd")]) == hash_keys(["ab", "cd"])).all()
    f, g = BloomFilter(10, 0.01), BloomFilter(10, 0.01)
    f.add(keys)
    g.add_hashes(hash_keys(as_bytes))
    assert (f._bits == g._bits).all()
    assert hash_keys([]).shape == (0, 2)
    assert f.might_contain([]).shape == (0,)


def test_seed_changes_the_hash_and_is_kept() -> None:
    assert (hash_keys(["a"], seed=1) != hash_keys(["a"])).any()
    f = BloomFilter(10, 0.01, seed=7)
    f.add(["a"])
    assert f.might_contain(["a"]).all()
    assert f.contains_hashes(hash_keys(["a"], seed=7)).all()


def test_concurrent_reads_never_miss_a_finished_add() -> None:
    f = ScalableBloomFilter(2_000, 0.01)
    batches = [[f"k{b}-{i}" for i in range(1_000)] for b in range(40)]
    done: list[list[str]] = []
    misses: list[int] = []

    def reader() -> None:
        while len(done) < len(batches):
            finished = [k for batch in list(done) for k in batch]
            misses.append(int((~f.might_contain(finished)).sum()))

    thread = threading.Thread(target=reader)
    thread.start()
    for batch in batches:
        f.add(batch)
        done.append(batch)
    thread.join()
    assert sum(misses) == 0


# -- sizing and measured rate -----------------------------------------------------------------
def test_sizing_formula_for_100m_keys_without_allocating() -> None:
    m, k = BloomFilter.size_for(100_000_000, 0.001)
    assert m % 64 == 0
    assert m >= -100_000_000 * math.log(0.001) / math.log(2) ** 2
    assert m / 8 / 2**20 == pytest.approx(171.4, abs=0.05)
    assert k == 10


def test_sizing_small_cases() -> None:
    assert BloomFilter.size_for(1, 0.5) == (64, 44)  # never less than one word
    f = BloomFilter(1_000, 0.01)
    assert (f.m, f.k) == BloomFilter.size_for(1_000, 0.01)
    assert f.memory_bytes == f.m // 8
    assert f.fill_ratio == 0.0
    assert f.estimated_fp_rate == 0.0


def test_measured_false_positive_rate_1m_keys() -> None:
    """n = 1,000,000 at p = 0.001, 1,000,000 keys never inserted: within 20% of p."""
    n, p = 1_000_000, 0.001
    f = BloomFilter(n, p)
    f.add([f"doc-{i}" for i in range(n)])
    absent = [f"other-{i}" for i in range(n)]
    measured = float(f.might_contain(absent).mean())
    assert abs(measured - p) <= 0.2 * p
    assert f.estimated_fp_rate == pytest.approx(p, rel=0.2)
    assert f.fill_ratio == pytest.approx(0.5, abs=0.01)


def test_scalable_rate_stays_below_p_after_growth() -> None:
    f = ScalableBloomFilter(1_000, 0.01)
    f.add([f"doc-{i}" for i in range(200_000)])  # 200x the first estimate
    assert len(f.filters) >= 8
    measured = float(f.might_contain([f"other-{i}" for i in range(200_000)]).mean())
    assert measured <= 0.01 * 1.1
    assert f.estimated_fp_rate <= 0.01 * 1.1


# -- parameter errors -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "p", "name"),
    [
        (0, 0.01, "n"),
        (-5, 0.01, "n"),
        (10.5, 0.01, "n"),
        (math.inf, 0.01, "n"),
        (True, 0.01, "n"),
        (10, 0.0, "p"),
        (10, 1.0, "p"),
        (10, -0.1, "p"),
        (10, 1.5, "p"),
        (10, math.nan, "p"),
        (10, math.inf, "p"),
        (10, "0.1", "p"),
    ],
)
def test_parameter_errors(n: object, p: object, name: str) -> None:
    for make in (BloomFilter, ScalableBloomFilter, BloomFilter.size_for):
        with pytest.raises(BloomParameterError) as info:
            make(n, p)  # type: ignore[operator]
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, LakecurateError)
        message = str(info.value)
        assert message.startswith(("n " if name == "n" else "p ", "initial_n "))
        assert ("(0, 1)" in message) if name == "p" else ("positive integer" in message)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"growth": 0.5}, "growth"),
        ({"growth": math.nan}, "growth"),
        ({"tightening": 0.0}, "tightening"),
        ({"tightening": 1.0}, "tightening"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
    ],
)
def test_scalable_parameter_errors(kwargs: dict[str, float], word: str) -> None:
    with pytest.raises(BloomParameterError, match=word):
        ScalableBloomFilter(10, 0.01, **kwargs)  # type: ignore[arg-type]


def test_argument_errors() -> None:
    f = BloomFilter(10, 0.01)
    with pytest.raises(BloomParameterError, match="single str"):
        f.add("abc")
    with pytest.raises(BloomParameterError, match="single bytes"):
        f.might_contain(b"abc")
    with pytest.raises(BloomParameterError, match="got int at position 1"):
        f.add(["a", 3])  # type: ignore[list-item]
    with pytest.raises(BloomParameterError, match=r"shape \(N, 2\)"):
        f.add_hashes(np.zeros(4, dtype=np.uint64))
    with pytest.raises(BloomParameterError, match="dtype uint64"):
        f.contains_hashes(np.zeros((4, 2), dtype=np.float64))
    with pytest.raises(BloomParameterError, match="watermark"):
        f.save(Path(tempfile.gettempdir()) / "never-written.bloom", 2**63)
    assert len(f) == 0


# -- the file format --------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path: Path) -> Path:
    f = ScalableBloomFilter(50, 0.01)
    f.add([f"doc-{i}" for i in range(200)])  # three filters in the chain: 50, 100, 200
    path = tmp_path / "ids.bloom"
    f.save(path, watermark=1234)
    return path


def _problem(path: Path) -> str:
    with pytest.raises(BloomFileError) as info:
        load(path)
    assert str(path) in str(info.value)
    return info.value.problem


def test_saved_file_round_trips_and_is_mapped(saved: Path) -> None:
    f, watermark = load(saved)
    assert watermark == 1234
    assert isinstance(f, ScalableBloomFilter)
    assert [g.is_mapped for g in f.filters] == [True, True, True]
    assert f.might_contain([f"doc-{i}" for i in range(200)]).all()
    assert saved.read_bytes().startswith(MAGIC)
    f.add(["new"])
    assert [g.is_mapped for g in f.filters] == [True, True, False]  # only the written one copied


def test_replacing_a_file_leaves_mapped_readers_intact(saved: Path) -> None:
    old, _ = load(saved)
    BloomFilter(10, 0.01).save(saved, watermark=0)
    assert old.might_contain([f"doc-{i}" for i in range(200)]).all()
    assert isinstance(load(saved)[0], BloomFilter)


def test_other_processes_read_the_same_file(saved: Path) -> None:
    """Two processes map one file read-only while this one replaces it: all answer exactly."""
    script = (
        "import sys; from lakecurate.store.bloom import load; f, w = load(sys.argv[1]); "
        "assert w == 1234; assert f.might_contain([f'doc-{i}' for i in range(200)]).all(); "
        "print(int(f.might_contain([f'x-{i}' for i in range(1000)]).sum()))"
    )
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(saved)],
            env=cli_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    mine, _ = load(saved)
    mine.save(saved, watermark=1234)  # atomic replace under the readers' feet
    outputs = [r.communicate(timeout=120)[0] for r in readers]
    assert [r.returncode for r in readers] == [0, 0]
    expected = int(mine.might_contain([f"x-{i}" for i in range(1000)]).sum())
    assert [int(out) for out in outputs] == [expected, expected]


def test_truncated_file(saved: Path) -> None:
    data = saved.read_bytes()
    for cut in sorted({1, 8, 11, 12, 59, 60, 150, len(data) // 2, len(data) - 8, len(data) - 1}):
        saved.write_bytes(data[:cut])
        assert _problem(saved) == "truncated", cut


def test_zero_byte_file(saved: Path) -> None:
    saved.write_bytes(b"")
    assert _problem(saved) == "truncated"


def test_flipped_bit_in_the_body(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    for pos in (len(data) // 2, len(data) - 1):
        damaged = bytearray(data)
        damaged[pos] ^= 0x10
        saved.write_bytes(damaged)
        assert _problem(saved) == "checksum"


def test_every_flipped_header_byte_is_caught(saved: Path) -> None:
    data = saved.read_bytes()
    header_and_checksum = 12 + 48 + 3 * 40 + 32
    for pos in range(header_and_checksum):
        damaged = bytearray(data)
        damaged[pos] ^= 0xFF
        saved.write_bytes(damaged)
        with pytest.raises(BloomFileError):
            load(saved)


def test_trailing_bytes(saved: Path) -> None:
    saved.write_bytes(saved.read_bytes() + b"\0")
    assert _problem(saved) == "corrupt"


def test_other_format_version(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    data[8:12] = (99).to_bytes(4, "little")
    saved.write_bytes(data)
    with pytest.raises(BloomFileError, match="version 99"):
        load(saved)


@settings(max_examples=40, deadline=None)
@given(junk=st.binary(max_size=4096))
def test_foreign_files(junk: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "foreign.bin"
        for data in (junk, MAGIC + junk):
            path.write_bytes(data)
            with pytest.raises(BloomFileError):
                load(path)


def test_foreign_file_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "x.bloom"
    path.write_bytes(os.urandom(4096))
    assert _problem(path) == "foreign"
    path.write_text('{"not": "a bloom filter"}\n' * 10, encoding="utf-8")
    assert _problem(path) == "foreign"


def test_missing_file(tmp_path: Path) -> None:
    assert _problem(tmp_path / "nope.bloom") == "missing"


def test_atomic_write_leaves_no_temp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ids.bloom"
    f = BloomFilter(1_000, 0.01)
    for i in range(3):
        f.add([f"doc-{i}"])
        f.save(path, watermark=i)
    assert os.listdir(tmp_path) == ["ids.bloom"]
    before = path.read_bytes()

    def fail(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    f.add(["doc-9"])
    with pytest.raises(BloomFileError, match="No space left") as info:
        f.save(path, watermark=9)
    assert info.value.problem == "write"
    assert os.listdir(tmp_path) == ["ids.bloom"]
    assert path.read_bytes() == before
    monkeypatch.undo()
    with pytest.raises(BloomFileError, match="cannot be written"):
        f.save(tmp_path / "no-such-folder" / "ids.bloom", watermark=9)
