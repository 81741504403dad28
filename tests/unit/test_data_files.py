"""``lake.files``: rows as data files with Delta statistics, and the commit naming them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakecurate.errors import CommitError
from lakecurate.lake.delta import DeltaStore
from lakecurate.lake.files import STATS_CHARS, Statistics, write_data_files
from lakecurate.lake.storage import Location
from lakecurate.schema import DOCUMENT_SCHEMA


def statistics(rows: pa.Table) -> dict[str, Any]:
    """The Delta statistics of ``rows`` taken whole (one piece)."""
    stats = Statistics()
    stats.add(rows)
    return stats.delta()


def docs(n: int, start: int = 0, chunk: str = "chunk_a") -> pa.Table:
    cols = {f.name: pa.nulls(n, f.type) for f in DOCUMENT_SCHEMA}
    cols |= {
        "id": pa.array([f"doc-{start + i:04d}" for i in range(n)]),
        "id_given": pa.array([True] * n),
        "text": pa.array([f"text number {i} " * 10 for i in range(n)]),
        "kept": pa.array([i % 3 != 0 for i in range(n)]),
        "reason": pa.array([None if i % 3 else "exact_dup" for i in range(n)]),
        "chunk_key": pa.array([chunk] * n),
        "source_path": pa.array(["/in.jsonl"] * n),
        "source_line": pa.array(list(range(start + 1, start + n + 1)), pa.int64()),
        "lang_score": pa.array([0.5 + i / 100 for i in range(n)]),
        "input_sha256": pa.array(["0" * 64] * n),
        "run_id": pa.array(["r"] * n),
        "config_hash": pa.array(["h"] * n),
    }
    return pa.table(cols).cast(DOCUMENT_SCHEMA)


def test_one_whole_file_per_partition_without_the_partition_column(tmp_path: Path) -> None:
    rows = docs(9)
    files = write_data_files(Location.of(tmp_path), rows, "kept", "part-00000001")
    assert sorted(f.partition_values["kept"] for f in files) == ["false", "true"]
    assert sum(f.rows for f in files) == 9
    for f in files:
        assert f.path.startswith(f"kept={f.partition_values['kept']}/part-00000001-")
        table = pq.read_table(tmp_path / f.path)
        assert "kept" not in table.column_names
        assert table.num_rows == f.rows
        assert (tmp_path / f.path).stat().st_size == f.size
    assert sorted(
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet")
    ) == sorted(f.path for f in files)


def test_an_empty_partition_writes_no_file(tmp_path: Path) -> None:
    rows = docs(6).filter(pa.array([True, False, False, False, False, False]))
    files = write_data_files(Location.of(tmp_path), rows, "kept", "p")
    assert [f.partition_values["kept"] for f in files] == ["false"]
    assert write_data_files(Location.of(tmp_path), DOCUMENT_SCHEMA.empty_table(), "kept", "p") == []


def test_statistics_bound_the_short_columns_and_leave_out_the_long_ones() -> None:
    rows = docs(5).drop_columns(["kept"])
    stats = statistics(rows)
    assert stats["numRecords"] == 5
    assert stats["minValues"]["id"] == "doc-0000"
    assert stats["maxValues"]["id"] == "doc-0004"
    assert stats["minValues"]["source_line"] == 1
    assert stats["maxValues"]["lang_score"] == 0.54
    assert "text" not in stats["minValues"] and "raw" not in stats["maxValues"]
    assert stats["nullCount"]["lang"] == 5 and "lang" not in stats["minValues"]
    long_ids = rows.set_column(0, "id", pa.array(["x" * (STATS_CHARS + 1)] * 5))
    assert "id" not in statistics(long_ids)["minValues"]
    json.dumps(stats)  # the Delta statistics are JSON


def test_append_commits_files_readers_see_with_their_statistics(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "documents")
    first = store.append(docs(9), 1, {"lakecurate.chunk_key": "chunk_a"})
    second = store.append(docs(6, 100, "chunk_b"), 2, {"lakecurate.chunk_key": "chunk_b"})
    assert (first, second) == (0, 1)
    dt = DeltaTable(str(tmp_path / "documents"))
    assert dt.transaction_version("lakecurate") == 2
    table = pa.table(dt.to_pyarrow_dataset().to_table())
    assert table.num_rows == 15
    assert sorted(table["id"].to_pylist()) == sorted(
        docs(9)["id"].to_pylist() + docs(6, 100)["id"].to_pylist()
    )
    kept = dict(zip(table["id"].to_pylist(), table["kept"].to_pylist(), strict=True))
    assert kept["doc-0000"] is False and kept["doc-0001"] is True
    actions = pa.table(dt.get_add_actions(flatten=True))
    assert set(actions["min.chunk_key"].to_pylist()) == {"chunk_a", "chunk_b"}
    assert sum(actions["num_records"].to_pylist()) == 15
    assert store.rows_of_chunks(["chunk_b"]).num_rows == 6


def test_an_empty_append_still_records_its_seq(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "documents")
    store.append(docs(3), 1, {})
    store.append(DOCUMENT_SCHEMA.empty_table(), 2, {})
    assert store.watermark() == 2
    assert DeltaStore(tmp_path / "documents").watermark() == 2


def test_appends_written_to_the_log_read_as_delta_rs_commits(tmp_path: Path) -> None:
    """After the first commit (delta-rs creates the table) appends are commit files this
    store writes (``_append_log``): delta-rs reads them as its own, history included, and the
    store's version, watermark and kept handle agree with a fresh open."""
    store = DeltaStore(tmp_path / "documents")
    for seq in range(1, 5):
        store.append(docs(4, 10 * seq, f"chunk_{seq}"), seq, {"lakecurate.chunk_key": str(seq)})
    assert (store.version(), store.watermark()) == (3, 4)
    fresh = DeltaTable(str(tmp_path / "documents"))
    assert (fresh.version(), fresh.transaction_version("lakecurate")) == (3, 4)
    assert pa.table(fresh.to_pyarrow_dataset().to_table()).num_rows == 16
    last = fresh.history(1)[0]
    assert last["operation"] == "WRITE" and last["lakecurate.seq"] == "4"
    assert last["operationMetrics"]["num_added_rows"] == 4
    assert store.rows_of_chunks(["chunk_4"]).num_rows == 4  # the kept handle caught up
    log = tmp_path / "documents" / "_delta_log"
    assert not [p for p in log.iterdir() if p.name.startswith(".")]  # no temp file left


def test_a_version_another_writer_took_fails_the_append_and_commits_nothing(
    tmp_path: Path,
) -> None:
    store = DeltaStore(tmp_path / "documents")
    store.append(docs(3), 1, {})
    store.append(docs(3, 10, "chunk_b"), 2, {})
    (tmp_path / "documents" / "_delta_log" / f"{2:020d}.json").write_text(
        (tmp_path / "documents" / "_delta_log" / f"{1:020d}.json").read_text()
    )
    with pytest.raises(CommitError, match="version 2 exists already"):
        store.append(docs(3, 20, "chunk_c"), 3, {})
    assert DeltaStore(tmp_path / "documents").watermark() == 2
    assert DeltaStore(tmp_path / "documents").untracked_files() == []  # chunk_c's files gone


def test_a_checkpoint_every_interval_and_at_settle(tmp_path: Path) -> None:
    """No post-commit hook writes checkpoints: the store writes one every
    ``delta.checkpointInterval`` versions, and ``settle`` (the end of an ingest) when enough
    versions follow the last one."""
    where = tmp_path / "documents"
    store = DeltaStore(where)
    store.append(docs(2), 1, {})
    DeltaTable(str(where)).alter.set_table_properties({"delta.checkpointInterval": "4"})
    store = DeltaStore(where)  # version 1 is the property change
    for seq in range(2, 8):
        store.append(docs(2, 10 * seq, f"chunk_{seq}"), seq, {})
    checkpoints = sorted(p.name for p in (where / "_delta_log").glob("*.checkpoint.parquet"))
    assert checkpoints == [f"{v:020d}.checkpoint.parquet" for v in (3, 7)]  # 4 versions each
    store.append(docs(2, 100, "chunk_8"), 8, {})
    store.append(docs(2, 110, "chunk_9"), 9, {})
    assert store.settle(at_least=3) is None  # versions 8 and 9 follow it: fewer than 3
    assert store.settle(at_least=2) == 9
    assert DeltaStore(where).settle(at_least=1) is None  # nothing since
    assert DeltaTable(str(where)).version() == 9


def test_statistics_of_pieces_are_those_of_the_whole() -> None:
    """A file written piece by piece (a finalise streams its staged file) carries the
    statistics of its rows taken whole: bounds of bounds, null counts summed, a long string
    or a non-finite float in any piece leaving its column unbounded."""
    rows = docs(30).drop_columns(["kept"])
    i = rows.schema.get_field_index("lang_score")
    scores = [0.5 + k / 100 for k in range(30)]
    scores[17] = float("inf")
    with_inf = rows.set_column(i, "lang_score", pa.array(scores))
    ids = rows["id"].to_pylist()
    ids[25] = "y" * (STATS_CHARS + 1)
    long_id = rows.set_column(0, "id", pa.array(ids))
    for whole in (rows, with_inf, long_id):
        stats = Statistics()
        for start in range(0, 30, 7):
            stats.add(whole.slice(start, 7))
        assert stats.delta() == statistics(whole)
    assert "lang_score" not in statistics(with_inf)["minValues"]
    assert "id" not in statistics(long_id)["minValues"]


def test_a_finalise_streams_a_staged_file_of_many_row_groups(tmp_path: Path) -> None:
    """The driver's patch lands on its rows in every row group of the staged file, and the
    data files hold what applying it to the whole file gives."""
    from lakecurate.ingest import staging
    from lakecurate.ingest.worker import finalise_chunk
    from lakecurate.types import FinaliseOrder

    n = 2 * staging.STAGED_GROUP_ROWS + 123
    rows = docs(n).replace_schema_metadata({staging.RESULT_KEY: b"{}"})
    staged = Location.of(tmp_path / "c.parquet")
    staging.write_atomic_parquet(rows, staged)
    keys, _ = staging.read_keys(staged.uri)
    changed = [0, 5, staging.STAGED_GROUP_ROWS, staging.STAGED_GROUP_ROWS + 1, n - 1]
    decided = keys.filter(pc.is_in(keys[staging.ROW], pa.array(changed)))
    flip = {
        "kept": pa.array([False] * len(changed)),
        "reason": pa.array(["exact_dup"] * len(changed)),
        "dup_of": pa.array(["doc-0001"] * len(changed)),
    }
    for name, column in flip.items():
        i = decided.schema.get_field_index(name)
        field = decided.schema.field(name)
        decided = decided.set_column(i, field, column.cast(field.type))
    others = keys.filter(pc.invert(pc.is_in(keys[staging.ROW], pa.array(changed))))
    patch = staging.patch_of(keys, pa.concat_tables([decided, others]))
    table = tmp_path / "table"
    files = finalise_chunk(
        FinaliseOrder("c", 1, staged.uri, Location.of(table).uri, patch, "part-1", "keep")
    )
    got = pa.concat_tables(
        pq.read_table(table / f.path).append_column(
            "kept", pa.array([f.partition_values["kept"] == "true"] * f.rows)
        )
        for f in files
    ).sort_by("source_line")
    want = staging.apply_patch(rows, staging.read_patch(patch)).sort_by("source_line")
    assert got.num_rows == n
    for name in ("id", "kept", "reason", "dup_of", "text"):
        assert got[name].to_pylist() == want[name].to_pylist(), name
    assert sum(not k for k in got["kept"].to_pylist()) == sum(
        not k for k in rows["kept"].to_pylist()
    ) + len([r for r in changed if rows["kept"][r].as_py()])
    for f in files:
        assert json.loads(f.stats)["numRecords"] == f.rows
