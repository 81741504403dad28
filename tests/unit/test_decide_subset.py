"""The driver's lake-wide decisions asked only for the rows that can change (ids and contents
repeated in the batch or seen in the lake) equal the query over every row: random batches of
chunks with repeated ids and contents, filtered and malformed rows, workers' exact duplicates,
ids and contents already in the lake, exact dedup on and off."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakecurate import engine
from lakecurate.ingest.commit import _BATCH, _POSITION, _involved, _merged

REASONS = [None] * 8 + ["filter:short", "malformed:json", "exact_dup"]


def _batch(rng: random.Random) -> tuple[pa.Table, pa.Table, pa.Table]:
    ids, hashes = [f"d{i}" for i in range(40)], [f"{i:032x}" for i in range(30)]
    rows = []
    for b in range(rng.choice([1, 2, 3])):
        for line in sorted(rng.sample(range(200), rng.randrange(1, 30))):
            reason = rng.choice(REASONS)
            alive = reason is None or reason == "exact_dup"
            rows.append(
                {
                    "id": rng.choice(ids),
                    "id_given": rng.random() < 0.8,
                    "kept": reason is None,
                    "reason": reason,
                    "dup_of": rng.choice(ids) if reason == "exact_dup" else None,
                    "content_hash": rng.choice(hashes) if alive else None,
                    "source_line": line,
                    _BATCH: b,
                }
            )
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("id_given", pa.bool_()),
            ("kept", pa.bool_()),
            ("reason", pa.string()),
            ("dup_of", pa.string()),
            ("content_hash", pa.string()),
            ("source_line", pa.int64()),
            (_BATCH, pa.int64()),
        ]
    )
    narrow = pa.Table.from_pylist(rows, schema=schema).append_column(
        _POSITION, pa.array(np.arange(len(rows), dtype=np.int64))
    )
    seen_ids = pa.table({"id": pa.array(rng.sample(ids, rng.randrange(0, 6)), pa.string())})
    seen = rng.sample(hashes, rng.randrange(0, 6))
    seen_content = pa.table(
        {
            "content_hash": pa.array(seen, pa.string()),
            "doc_id": pa.array([rng.choice(ids) for _ in seen], pa.string()),
        }
    )
    return narrow, seen_ids, seen_content


def _decide(
    con: object, staged: pa.Table, seen_ids: pa.Table, seen: pa.Table, exact: bool
) -> pa.Table:
    con.register("staged", staged)  # type: ignore[attr-defined]
    con.register("seen_ids", seen_ids)  # type: ignore[attr-defined]
    con.register("seen_content", seen)  # type: ignore[attr-defined]
    q = engine.q("commit.apply_lake_decisions")
    return con.sql(q, params={"exact": exact}).to_arrow_table()  # type: ignore[attr-defined]


@pytest.mark.parametrize(  # the default run keeps seed 0; `-m slow` runs two more
    "seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_deciding_the_involved_rows_equals_deciding_all(seed: int) -> None:
    rng = random.Random(seed)
    con = engine.connect(threads=1)
    partial = 0
    for _ in range(150):
        narrow, seen_ids, seen = _batch(rng)
        exact = rng.random() < 0.8
        whole = _decide(con, narrow, seen_ids, seen, exact)
        involved = _involved(narrow, seen_ids, seen)
        assert involved is not None  # ordered, no null ids: the fast path applies
        partial += not pc.all(involved).as_py()
        fast = _merged(
            narrow, involved, _decide(con, narrow.filter(involved), seen_ids, seen, exact)
        )
        for name in ("kept", "reason", "dup_of"):
            assert fast[name].to_pylist() == whole[name].to_pylist(), name
    assert partial > 50  # most batches decided only some of their rows
    con.close()


def test_rows_out_of_line_order_are_all_decided_by_the_query() -> None:
    narrow, seen_ids, seen = _batch(random.Random(9))
    shuffled = narrow.take(pa.array(np.random.default_rng(1).permutation(narrow.num_rows)))
    shuffled = shuffled.set_column(
        shuffled.schema.get_field_index(_POSITION),
        _POSITION,
        pa.array(np.arange(narrow.num_rows, dtype=np.int64)),
    )
    assert _involved(shuffled, seen_ids, seen) is None
