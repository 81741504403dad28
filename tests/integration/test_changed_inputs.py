"""Re-runs after changed inputs (issue 12): every repro of the adversarial campaign's defects in
the ingest path, each checked against what a clean run of the final inputs holds."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from helpers import run_lakecurate

from lakecurate import Lake
from lakecurate.errors import InputError

SMALL = '[ingest]\nchunk_size = "4KiB"\n'
NEAR = '[ingest]\nchunk_size = "64KiB"\n[near_dedup]\nenabled = true\n'


def _write(path: Path, records: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _plain(n: int, start: int = 0, word: str = "document") -> list[dict[str, str]]:
    return [
        {"id": f"d{i}", "text": f"{word} {i} " + "plain words " * 20}
        for i in range(start, start + n)
    ]


def _random_texts(n: int, seed: int = 1) -> list[dict[str, str]]:
    r = random.Random(seed)
    words = [f"w{i}" for i in range(2000)]
    return [
        {"id": f"d{i}", "text": " ".join(r.choice(words) for _ in range(120))} for i in range(n)
    ]


def _config(tmp_path: Path, text: str) -> Path:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(text, encoding="utf-8")
    return cfg


def _one(lake: Lake, sql: str) -> object:
    return lake.sql(sql).rows[0][0]


def _clean(tmp_path: Path, inputs: list[Path], cfg: Path) -> Lake:
    lake = Lake.open(tmp_path / "clean")
    assert lake.ingest(inputs, config=cfg).ok
    return lake


def _one_file_lake(
    tmp_path: Path, config: str, records: list[dict[str, str]]
) -> tuple[Lake, Path, Path]:
    """A lake made by ingesting one JSONL file of ``records``: (lake, the file, the config)."""
    cfg = _config(tmp_path, config)
    data = tmp_path / "in.jsonl"
    _write(data, records)
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([data], config=cfg).ok
    return lake, data, cfg


def _decisions(lake: Lake) -> list[tuple[object, ...]]:
    return lake.sql(
        "SELECT source_path, source_line, id, kept, reason, content_hash "
        "FROM documents ORDER BY source_path, source_line"
    ).rows


def test_appended_record_then_rerun_keeps_every_unchanged_chunk(tmp_path: Path) -> None:
    """D1: the second re-run after an append removed the file's 90 unchanged rows."""
    lake, data, cfg = _one_file_lake(tmp_path, SMALL, _plain(100))
    _write(data, _plain(101))
    first = lake.ingest([data])
    assert first.ok and _one(lake, "SELECT count(*) FROM docs") == 101
    again = lake.ingest([data])
    assert again.outcome == "NOTHING_TO_DO" and again.rows_superseded == 0
    assert _one(lake, "SELECT count(*) FROM docs") == 101
    assert lake.verify().ok
    assert _decisions(lake) == _decisions(_clean(tmp_path, [data], cfg))


def test_edited_record_with_near_dedup_is_not_a_near_dup_of_itself(tmp_path: Path) -> None:
    """D2: the new version of a chunk matched its own old documents in the band index."""
    records = _random_texts(20)
    lake, data, _ = _one_file_lake(tmp_path, NEAR, records)
    records[5]["text"] = "edited text here " + records[5]["text"][:200]
    _write(data, records)
    assert lake.ingest([data]).ok
    assert _one(lake, "SELECT count(*) FROM docs") == 20
    assert _one(lake, "SELECT count(*) FROM documents WHERE dup_of = id") == 0


def test_identical_files_in_two_folders_each_keep_their_rows(tmp_path: Path) -> None:
    """D6: the shared chunk belonged to a/ only; replacing a/ took b/'s documents with it."""
    cfg = _config(tmp_path, SMALL)
    root = tmp_path / "in"
    _write(root / "a" / "data.jsonl", [{"text": r["text"]} for r in _plain(50)])
    (root / "b").mkdir()
    shutil.copy(root / "a" / "data.jsonl", root / "b" / "data.jsonl")
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([root], config=cfg).ok
    assert _one(lake, "SELECT count(*) FROM documents") == 100  # one copy is exact_dup
    # Chunk keys hash the path, so which folder commits first (and keeps) varies: replace
    # the one that kept, the case that once took the other folder's documents with it.
    keeper, other = (
        ("a", "b")
        if _one(lake, "SELECT count(*) FROM docs WHERE source_path LIKE '%/a/data.jsonl'")
        else ("b", "a")
    )
    _write(root / keeper / "data.jsonl", [{"text": r["text"]} for r in _plain(50, word="other")])
    report = lake.ingest([root])
    assert report.ok and report.chunks_redecided >= 1
    assert (
        lake.sql(
            "SELECT count(*) FROM docs WHERE source_path LIKE $p",
            params={"p": f"%/{other}/data.jsonl"},
        ).rows[0][0]
        == 50
    )
    assert lake.verify().ok
    assert _decisions(lake) == _decisions(_clean(tmp_path, [root], cfg))


def test_removed_file_leaves_the_lake_and_its_duplicates_are_kept(tmp_path: Path) -> None:
    """A folder input is mirrored: a file removed from it has no row left, and the copies
    that were its duplicates elsewhere are kept instead."""
    cfg = _config(tmp_path, SMALL)
    root = tmp_path / "in"
    _write(root / "a.jsonl", _plain(30))
    _write(root / "sub" / "b.jsonl", [{"text": r["text"]} for r in _plain(30)])
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([root], config=cfg).ok
    (root / "a.jsonl").unlink()
    report = lake.ingest([root])
    assert report.ok and report.rows_superseded == 30
    assert _one(lake, "SELECT count(*) FROM documents WHERE source_path LIKE '%a.jsonl'") == 0
    assert _one(lake, "SELECT count(*) FROM docs") == 30
    assert lake.ingest([root]).outcome == "NOTHING_TO_DO"
    assert _decisions(lake) == _decisions(_clean(tmp_path, [root], cfg))


@pytest.mark.parametrize(  # the default run keeps "old backup"
    "how", [pytest.param("deleted", marks=pytest.mark.slow), "old backup"]
)
def test_stale_state_is_rebuilt_from_the_log_not_committed_on_top(tmp_path: Path, how: str) -> None:
    """D3: a missing or older state.duckdb numbered new commits below the log's watermark and
    committed every chunk a second time."""
    cfg = _config(tmp_path, SMALL)
    root = tmp_path / "in"
    _write(root / "a.jsonl", _plain(40))
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([root], config=cfg).ok
    state = lake.root / "state.duckdb"
    backup = tmp_path / "state.backup"
    shutil.copy(state, backup)
    _write(root / "b.jsonl", _plain(40, start=100))
    assert lake.ingest([root]).ok
    if how == "deleted":
        state.unlink()
    else:
        shutil.copy(backup, state)
    report = lake.ingest([root])
    assert report.ok and any("re-derived it from the log" in n for n in report.notes)
    assert _one(lake, "SELECT count(*) FROM documents") == 80
    assert _one(lake, "SELECT count(DISTINCT id) FROM documents") == 80
    assert lake.verify().ok


def test_a_lake_whose_state_was_lost_says_how_to_get_it_back(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """A local lake whose state.duckdb is gone (deleted, a lost disk) still has its table:
    commands say so and name the repair (they said there was no lake and to run ingest
    first), and the repair gives back the same chunks; a folder without a table is still no
    lake."""
    cfg = _config(tmp_path, SMALL)
    root = tmp_path / "in"
    _write(root / "a.jsonl", _plain(40))
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([root], config=cfg).ok
    chunks = "SELECT chunk_key, status, rows_in, rows_kept FROM chunks ORDER BY ALL"
    before = lake.sql(chunks).rows
    (lake.root / "state.duckdb").unlink()
    for command in (["status"], ["sql", "SELECT 1"], ["compact"]):
        done = run_cli(command[0], "--lake", lake.root, *command[1:])
        error = done.stderr.strip().splitlines()[-1]
        assert done.returncode != 0 and "has its table but not its state" in error, error
        assert "verify --repair" in error and "no lake" not in error
    assert run_cli("verify", "--repair", "--lake", lake.root).returncode == 0
    assert Lake.open(tmp_path / "lake").sql(chunks).rows == before
    empty = run_cli("status", "--lake", tmp_path / "nothing")
    assert "no lake at" in empty.stderr


def test_chunk_without_records_and_near_dedup(tmp_path: Path) -> None:
    """D4: a blank-only JSONL with near dedup on crashed every ingest."""
    cfg = _config(tmp_path, NEAR)
    root = tmp_path / "in"
    _write(root / "a.jsonl", _random_texts(5))
    (root / "blank.jsonl").write_text("\n\n  \n", encoding="utf-8")
    lake = Lake.open(tmp_path / "lake")
    report = lake.ingest([root], config=cfg)
    assert report.ok and _one(lake, "SELECT count(*) FROM docs") == 5


def test_the_lake_is_never_read_as_input(tmp_path: Path) -> None:
    """D10: `ingest .` with the lake inside the input read its own data files every run."""
    cfg = _config(tmp_path, SMALL)
    root = tmp_path / "work"
    _write(root / "a.jsonl", _plain(10))
    lake = Lake.open(root / "lake")
    for _ in range(3):
        report = lake.ingest([root], config=cfg)
        assert report.ok
    assert _one(lake, "SELECT count(*) FROM documents") == 10
    other = Lake.open(tmp_path / "other")
    with pytest.raises(InputError, match="never read as input"):
        other.ingest([root / "lake" / "documents"], config=cfg)


def test_lost_config_comes_back_from_the_log(tmp_path: Path) -> None:
    """D15: a deleted LAKE/lakecurate.toml silently switched the lake to the default pipeline."""
    cfg = _config(
        tmp_path, SMALL + '[filters]\nsteps = ["length"]\n[filters.length]\nmin_chars = 50\n'
    )
    root = tmp_path / "in"
    _write(root / "a.jsonl", [*_plain(5), {"id": "short", "text": "too short"}])
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([root], config=cfg).ok
    wanted = lake.config().hash
    (lake.root / "lakecurate.toml").unlink()
    _write(root / "b.jsonl", [{"id": "short2", "text": "also short"}])
    assert lake.ingest([root]).ok
    assert lake.config().hash == wanted and (lake.root / "lakecurate.toml").exists()
    assert _one(lake, "SELECT count(*) FROM docs WHERE id LIKE 'short%'") == 0


def test_bloom_files_lost_after_a_run_are_written_by_the_next(tmp_path: Path) -> None:
    """D16: "nothing to do" returned before the Bloom cache was saved; verify failed forever."""
    lake, data, _ = _one_file_lake(tmp_path, SMALL, _plain(20))
    shutil.rmtree(lake.root / "index")
    assert lake.ingest([data]).outcome == "NOTHING_TO_DO"
    assert any((lake.root / "index").iterdir())
    assert lake.verify().ok


def test_band_index_survives_a_crash_finalised_by_compact(tmp_path: Path) -> None:
    """A kill right after the Delta commit, then `compact` (which finalises the commit without
    near dedup): a near copy of a document of that chunk must still be dropped."""
    cfg = _config(tmp_path, NEAR)
    root = tmp_path / "in"
    records = _random_texts(10, seed=7)
    _write(root / "a.jsonl", records)
    lake_dir = tmp_path / "lake"
    args = ("ingest", root, "--lake", lake_dir, "--config", cfg)
    killed = run_lakecurate(*args, env={"LAKECURATE_FAULT": "after_delta_commit:kill"})
    assert killed.returncode != 0
    Lake.open(lake_dir).compact()
    near_copy = dict(records[3], id="copy", text=records[3]["text"] + " extra")
    _write(root / "b.jsonl", [near_copy])
    env = {k: v for k, v in os.environ.items() if k != "LAKECURATE_FAULT"}
    done = run_lakecurate(*args, env=env, new_session=False)
    assert done.returncode == 0, done.stderr
    lake = Lake.open(lake_dir)
    assert lake.sql("SELECT reason, dup_of FROM documents WHERE id = 'copy'").rows == [
        ("near_dup", "d3")
    ]


def test_exact_copy_of_a_near_duplicate_points_at_a_kept_document(tmp_path: Path) -> None:
    """Found by the model campaign (clean runs too): `c` is an exact copy of `b`, and `b` became
    a near duplicate of `a` after exact dedup had pointed `c` at it; `c` must follow to `a`."""
    r = random.Random(3)
    words = [f"w{i}" for i in range(3000)]
    base = " ".join(r.choice(words) for _ in range(120))
    near = base.rsplit(" ", 1)[0] + " zzz"
    data = tmp_path / "in.jsonl"
    _write(data, [{"id": "a", "text": base}, {"id": "b", "text": near}, {"id": "c", "text": near}])
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([data], config=_config(tmp_path, NEAR)).ok
    assert lake.sql("SELECT id, kept, reason, dup_of FROM documents ORDER BY source_line").rows == [
        ("a", True, None, None),
        ("b", False, "near_dup", "a"),
        ("c", False, "exact_dup", "a"),
    ]
    assert lake.verify().ok


def test_filtered_reads_after_compact_and_a_changed_input(tmp_path: Path) -> None:
    """Found this session: a supersede after `compact` makes delta-rs rewrite the compacted
    file with string_view columns, and every filtered read (sql WHERE, explain, re-decisions,
    crash recovery) failed with "no kernel matching (string, string_view)"."""
    cfg = _config(tmp_path, '[ingest]\nchunk_size = "1KiB"\n')
    root = tmp_path / "in"
    _write(root / "a.jsonl", [{"text": f"doc {i} words words"} for i in range(60)])
    _write(root / "b.jsonl", [{"text": f"doc {i} words words"} for i in range(60)])
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([root], config=cfg).ok
    lake.compact()
    _write(root / "a.jsonl", [{"text": f"doc {i} other words"} for i in range(61)])
    report = lake.ingest([root])
    assert report.ok and report.chunks_redecided >= 1
    key = lake.sql("SELECT min(chunk_key) FROM documents WHERE source_path LIKE '%b.jsonl'").rows[
        0
    ][0]
    assert (
        lake.sql("SELECT count(*) FROM documents WHERE chunk_key = $k", params={"k": key}).rows[0][
            0
        ]
        > 0
    )
    assert lake.explain(f"{root / 'b.jsonl'}:3") is not None
    assert lake.verify().ok
    assert _decisions(lake) == _decisions(_clean(tmp_path, [root], cfg))


def test_a_kill_after_a_supersedes_delta_commit_leaves_no_band_rows_behind(
    tmp_path: Path,
) -> None:
    """A kill between a supersede's Delta commit and its state update: the next ingest's
    reconcile finalises the supersede, and must take the superseded chunk out of the band index
    as the uninterrupted path does. It did not (only the membership index), and the documents
    of the new version of the input came out near duplicates of their own old copies."""
    cfg = _config(tmp_path, NEAR)
    records = _random_texts(10, seed=7)
    copies = [dict(r, id="c" + r["id"], text=r["text"] + " extra") for r in records[:4]]
    edited = [*records[:2], {"id": "d2", "text": "changed " * 30}, *records[3:]]

    def history(name: str, fault: str) -> Lake:
        root = tmp_path / name / "in"
        _write(root / "a.jsonl", records)
        _write(root / "b.jsonl", copies)
        lake = Lake.open(tmp_path / name / "lake")
        assert lake.ingest([root], config=cfg).ok
        _write(root / "a.jsonl", edited)
        if fault:  # a real process, SIGKILLed with its group
            args = ("ingest", root, "--lake", lake.root, "--config", cfg)
            assert run_lakecurate(*args, env={"LAKECURATE_FAULT": fault}).returncode != 0
        assert lake.ingest([root], config=cfg).ok
        return lake

    killed = history("killed", "after_delta_commit:kill:supersede")
    straight = history("straight", "")
    q = "SELECT source_line, id, kept, reason, dup_of FROM documents ORDER BY source_path, 1"
    assert killed.sql(q).rows == straight.sql(q).rows
    assert _one(killed, "SELECT count(*) FROM documents WHERE dup_of = id") == 0
    n_bands = "SELECT count(*) FROM minhash_docs"
    assert _one(killed, n_bands) == _one(straight, n_bands)
    assert killed.verify().ok
