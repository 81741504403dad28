"""Writing the within-chunk exact-dup decision (sql/worker/decide.sql ``exact_dups``) into the
decided rows, whatever order they come in."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from lakecurate import engine
from lakecurate.ingest.worker import chunk_funnel, mark_exact_dups, repeats_content


def _decided(lines: list[int], hashes: list[str | None]) -> pa.Table:
    return pa.table(
        {
            "id": [f"d{n}" for n in lines],
            "kept": [h is not None for h in hashes],
            "reason": [None if h is not None else "filter:x" for h in hashes],
            "dup_of": pa.array([None] * len(lines), pa.string()),
            "content_hash": hashes,
            "source_line": pa.array(lines, pa.int64()),
        }
    )


def _dups(decided: pa.Table) -> pa.Table:
    con = duckdb.connect()
    con.register("decided", decided)
    return con.sql(engine.q("worker.exact_dups")).to_arrow_table()


def test_the_first_copy_in_line_order_stays_whatever_the_row_order() -> None:
    lines = [1, 2, 3, 4, 5, 6]
    hashes = ["a", "b", "a", None, "a", "b"]
    want = {
        1: (True, None, None),
        2: (True, None, None),
        3: (False, "exact_dup", "d1"),
        4: (False, "filter:x", None),
        5: (False, "exact_dup", "d1"),
        6: (False, "exact_dup", "d2"),
    }
    for order in (np.arange(6), np.random.default_rng(3).permutation(6)):
        decided = _decided([lines[i] for i in order], [hashes[i] for i in order])
        marked = mark_exact_dups(decided, _dups(decided))
        got = {r["source_line"]: (r["kept"], r["reason"], r["dup_of"]) for r in marked.to_pylist()}
        assert got == want


def test_no_duplicates_leave_the_rows_as_they_are() -> None:
    decided = _decided([1, 2], ["a", "b"])
    assert mark_exact_dups(decided, _dups(decided)) is decided


def test_only_a_chunk_whose_kept_rows_repeat_a_content_asks_duckdb() -> None:
    assert repeats_content(_decided([1, 2, 3], ["a", "b", "a"]))
    assert not repeats_content(_decided([1, 2, 3], ["a", "b", "c"]))
    filtered_copy = _decided([1, 2], ["a", "a"]).set_column(1, "kept", pa.array([True, False]))
    assert not repeats_content(filtered_copy)  # a copy the filters dropped is no duplicate


def test_the_worker_funnel_counts_what_the_rows_say() -> None:
    decided = pa.table(
        {
            "reason": [None, "malformed:json", "filter:empty", "exact_dup", None, "filter:x"],
        }
    )
    assert chunk_funnel(decided) == [
        ("parse", 6, 1),
        ("filter:empty", 5, 1),
        ("exact_dup:chunk", 4, 1),
    ]
