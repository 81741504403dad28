"""Tier 2's key cache answers what a join over its keys answers, and never from stale rows,
through random histories of adds, rolled-back adds, forgotten commits and reopens: the model is
the key files read as tables, asked by the SQL the cache replaced."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers import held_in, key_tables, kill_decider

from lakecurate.store.band_shards import Shards
from lakecurate.store.index import MembershipIndex
from lakecurate.store.key_cache import _KeyRun
from lakecurate.store.state import StateStore

# The tier-2 lookups before the cache: a join that scans the whole table (issue 14).
CONTENT_JOIN = """
SELECT m.content_hash, arg_min(h.doc_id, h.seq) AS doc_id
FROM (SELECT DISTINCT unnest($hashes::VARCHAR[]) AS content_hash) m
JOIN content_hashes h ON h.hash = ('0x' || m.content_hash)::UHUGEINT
GROUP BY m.content_hash ORDER BY 1
"""
IDS_JOIN = """
SELECT DISTINCT m.id FROM (SELECT unnest($ids::VARCHAR[]) AS id) m
JOIN doc_ids h ON h.hash = md5_number(m.id) ORDER BY 1
"""


class BoomError(Exception):
    pass


def _hex(i: int) -> str:
    return f"{i * 2654435761 % 2**128:032x}"


def _chunk(rng: random.Random, size: int) -> tuple[pa.Table, pa.Table]:
    """Kept rows (content_hash, id) and given ids of a chunk, drawn from small pools so that
    keys repeat across chunks (and ids within one)."""
    contents = rng.sample(range(300), size)
    kept = pa.table(
        {
            "content_hash": [_hex(c) for c in contents],
            "id": [f"d{rng.randrange(400)}" for _ in contents],
        }
    )
    given = pa.table({"id": [f"d{rng.randrange(400)}" for _ in range(size + 2)]})
    return kept, given


def _check(index: MembershipIndex, rng: random.Random) -> None:
    hashes = sorted({_hex(rng.randrange(320)) for _ in range(60)})
    ids = sorted({f"d{rng.randrange(420)}" for _ in range(60)})
    con = index._con
    key_tables(con)
    want = con.execute(CONTENT_JOIN, {"hashes": hashes}).fetchall()
    got = index.content_seen(pa.array(hashes)).sort_by("content_hash")
    assert list(zip(*got.to_pydict().values(), strict=True)) == want
    want_ids = [r[0] for r in con.execute(IDS_JOIN, {"ids": ids}).fetchall()]
    assert sorted(index.ids_seen(pa.array(ids))["id"].to_pylist()) == want_ids


@pytest.fixture(params=["driver", "2 deciders"])
def holder(request: pytest.FixtureRequest) -> Iterator[Shards | None]:
    """Where the caches' keys live: in the test's process, or in 2 real decider processes."""
    yield from held_in(request)


def _index(state: StateStore, holder: Shards | None) -> MembershipIndex:
    index = MembershipIndex(state.con)
    if holder is not None:
        index.hold_keys_in(holder)
    return index


@pytest.mark.parametrize(  # the default run keeps seed 0 (for each holder); `-m slow` runs seed 1
    "seed", [0, pytest.param(1, marks=pytest.mark.slow)]
)
def test_the_cache_answers_what_the_join_answers_through_a_history(
    tmp_path: Path, seed: int, holder: Shards | None
) -> None:
    rng = random.Random(seed)
    state = StateStore.open(tmp_path / "state.duckdb")
    index = _index(state, holder)
    seq, changes = 0, 1  # reads of the table the history may cause: the first, one per change
    for _ in range(30):
        op = rng.choice(["add", "add", "add", "rollback", "forget", "reopen", "check"])
        if op in ("add", "rollback"):
            seq += 1
            kept, given = _chunk(rng, rng.choice([1, 5, 40]))
            try:
                with state.transaction():
                    index.add(kept, given, seq)
                    if op == "rollback":
                        raise BoomError
            except BoomError:
                changes += 1
        elif op == "forget" and seq:
            index.remove_commits(rng.sample(range(1, seq + 1), min(seq, 2)))
            changes += 1
        elif op == "reopen":
            state.close()
            state = StateStore.open(tmp_path / "state.duckdb")
            index = _index(state, holder)
            changes += 1
        _check(index, rng)
    # Adds were held, not read again: a read only after a change the cache did not make.
    assert index.tier2["content"].loads <= changes
    key_tables(state.con)
    assert (
        index.tier2["content"].rows
        == state.con.execute("SELECT count(*) FROM content_hashes").fetchall()[0][0]
    )
    state.close()


def test_a_rolled_back_add_is_not_an_answer(tmp_path: Path, holder: Shards | None) -> None:
    state = StateStore.open(tmp_path / "state.duckdb")
    index = _index(state, holder)
    first = pa.table({"content_hash": [_hex(1)], "id": ["a"]})
    with state.transaction():
        index.add(first, first.select(["id"]), 1)
    assert index.content_seen(pa.array([_hex(1)]))["doc_id"].to_pylist() == ["a"]
    assert index.tier2["content"].loads == 1
    second = pa.table({"content_hash": [_hex(2)], "id": ["b"]})
    with state.transaction():
        index.add(second, second.select(["id"]), 2)
    assert index.content_seen(pa.array([_hex(2)]))["doc_id"].to_pylist() == ["b"]
    assert index.tier2["content"].loads == 1  # held on add, not read again
    third = pa.table({"content_hash": [_hex(3)], "id": ["c"]})
    with pytest.raises(BoomError), state.transaction():
        index.add(third, third.select(["id"]), 3)
        raise BoomError
    assert index.content_seen(pa.array([_hex(3)])).num_rows == 0
    assert index.ids_seen(pa.array(["c", "b"]))["id"].to_pylist() == ["b"]
    state.close()


def test_the_first_entry_of_a_key_wins_and_a_half_collision_is_no_match() -> None:
    """Equal keys: the smallest seq's entry (then the earliest added), as the join's
    ``arg_min``; equal high halves with another low half are not the key (several rows of one
    high half: the slow path). A merged run answers as its parts did."""
    u64, i64 = np.uint64, np.int64
    run = _KeyRun(
        [
            np.array([5, 5, 5, 9], dtype=u64),
            np.array([1, 1, 2, 1], dtype=u64),
            np.array([7, 3, 1, 2], dtype=i64),
            np.array([0, 1, 2, 3], dtype=i64),
        ]
    )
    later = _KeyRun(
        [np.array([5], dtype=u64), np.array([5], dtype=u64), *([np.array([k]) for k in (2, 4)])]
    )
    merged = run.merged(later)
    assert merged.hi.tolist() == sorted(merged.hi.tolist())
    seq, ref = merged.first(
        np.array([5, 5, 5, 9, 4, 5], dtype=u64), np.array([1, 2, 3, 1, 1, 5], dtype=u64)
    )
    absent = np.iinfo(np.int64).max
    assert seq.tolist() == [3, 1, absent, 2, absent, 2]
    assert ref.tolist() == [1, 2, absent, 3, absent, 4]
    # The ids space holds keys only: found or not, as one run or merged.
    keys = _KeyRun([np.array([5, 5, 9], dtype=u64), np.array([1, 2, 1], dtype=u64)])
    keys = keys.merged(_KeyRun([np.array([5], dtype=u64), np.array([7], dtype=u64)]))
    seq, _ = keys.first(np.array([5, 5, 5, 9, 9], dtype=u64), np.array([7, 2, 3, 1, 2], dtype=u64))
    assert (seq != absent).tolist() == [True, True, False, True, False]


def test_a_killed_decider_loses_no_key(tmp_path: Path) -> None:
    """SIGKILL a decider process holding keys, between lookups and between an add and the
    next lookup: the shards start again and read their part of the key files again; the
    other space's cache, which did not see the death, reloads too (the shards' generation)."""
    rng = random.Random(3)
    state = StateStore.open(tmp_path / "state.duckdb")
    shards = Shards(2)
    try:
        index = _index(state, shards)
        for seq in range(1, 6):
            with state.transaction():
                index.add(*_chunk(rng, 40), seq)
        _check(index, rng)
        kill_decider(shards, 1)
        _check(index, rng)  # the content lookup restarts them; the ids cache reloads too
        assert shards.starts == 2 and index.tier2["ids"].loads == 2
        kill_decider(shards, 0)
        with state.transaction():
            index.add(*_chunk(rng, 40), 6)  # the add finds them dead: read again next
        _check(index, rng)
        assert shards.starts == 3
        assert index.tier2["content"].rows == index.files.fingerprint("content")[0]
    finally:
        shards.close()
        state.close()


def test_an_id_repeated_in_a_chunk_is_one_key() -> None:
    """``index._distinct`` (the ids' keys of a chunk, once each) is ``np.unique(axis=0)``:
    the same rows in the same order, high halves tied across different low halves too."""
    from lakecurate.store.index import _distinct

    rng = np.random.default_rng(9)
    for n in (0, 1, 40, 5_000):
        halves = rng.integers(0, 2**64 - 1, (n, 2), dtype=np.uint64, endpoint=True)
        halves = np.concatenate([halves, halves[: n // 3]])  # repeated ids
        halves[: n // 4, 0] = halves[n // 4 : 2 * (n // 4), 0]  # same high half, other low
        assert np.array_equal(_distinct(halves), np.unique(halves, axis=0))
