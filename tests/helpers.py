"""Helpers shared by the tests (importable as ``helpers``: pytest puts tests/ on the path)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakecurate import Lake
from lakecurate.config import PRESET_ENV
from lakecurate.lake.record import SUPERSEDE, CommitRecord

if TYPE_CHECKING:
    import pyarrow as pa
    import pytest
    from deltalake import DeltaTable

    from lakecurate.store.band_index import NearDedupIndex
    from lakecurate.store.band_shards import Shards
    from lakecurate.store.signatures import ChunkSets
    from lakecurate.types import ChunkResult

ROOT = Path(__file__).resolve().parents[1]

# The preset a new lake gets without a config or a preset, for the whole suite: "minimal" (the
# empty-text filter and exact dedup), which the counts of the tests that ingest without a
# config were written for. conftest.py sets it in this process (so worker and helper
# processes inherit it) and cli_env passes it on; a test of the real default unsets it
# (``cli_env({PRESET_ENV: ""})`` or monkeypatch.delenv).
TEST_DEFAULT_PRESET = "minimal"

SMALL_CONFIG = """\
[ingest]
chunk_size = "64KiB"
max_attempts = 3
retry_backoff = 0.05

[dedup]
exact = true
"""

NEAR_CONFIG = SMALL_CONFIG + "\n[near_dedup]\nenabled = true\nthreshold = 0.8\n"

# Near-dedup settings whose index fingerprint (tests/unit/test_minhash.py) and config hash
# (tests/unit/test_config.py) are pinned: every key but the defaults, without verification.
PINNED_NEAR_SETTINGS: dict[str, object] = {
    "threshold": 0.7,
    "num_perm": 256,
    "ngram": 3,
    "unit": "word",
    "seed": 7,
    "verify": False,
    "link": "any",  # the only rule without verification
}

# Six plain English sentences that pass every quality filter, for tests that need good text.
PROSE = [
    "The river rose quickly after three days of rain, and the farmers moved their animals uphill.",
    "By the second morning the old bridge was under water and the school had closed its doors.",
    "Volunteers from the next town arrived with boats, blankets and bread for the families.",
    "Nobody could remember a flood like it since the winter their grandparents had married.",
    "When the water finally went down, the fields were covered with a thick layer of mud.",
    "It took most of that summer to repair the roads, the fences and the little church roof.",
]


def load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "generate_corpus", ROOT / "examples" / "generate_corpus.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def lakecurate_cmd(*args: object) -> list[str]:
    """The command line of ``python -m lakecurate ARGS`` (paths and numbers as text)."""
    return [sys.executable, "-m", "lakecurate", *map(str, args)]


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKECURATE_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env[PRESET_ENV] = TEST_DEFAULT_PRESET
    env.update(extra or {})
    return env


def run_lakecurate(
    *args: object,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    cwd: Path = ROOT,
    new_session: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m lakecurate ARGS`` as a real process with ``cli_env(env)`` and wait for it;
    its output captured as text. In a session of its own unless ``new_session=False``: a ``kill``
    fault SIGKILLs its whole process group, which must not be pytest's. (The ``run_cli``
    fixture.)"""
    return subprocess.run(
        lakecurate_cmd(*args),
        check=False,
        capture_output=True,
        text=True,
        env=cli_env(env),
        timeout=timeout,
        start_new_session=new_session,
        cwd=cwd,
    )


def start_lakecurate(*args: object, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``run_lakecurate`` without waiting: stdout and stderr are pipes (text) to read with
    ``communicate``."""
    return subprocess.Popen(
        lakecurate_cmd(*args),
        cwd=ROOT,
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def lake_rows(lake: Path | str) -> list[tuple[object, ...]]:
    """The lake's latest version as a sorted list of (chunk_key, source_line, id, content_hash,
    kept, reason, dup_of): the identity of a lake's contents."""
    res = Lake.open(lake).sql(
        "SELECT chunk_key, source_line, id, content_hash, kept, reason, dup_of FROM documents "
        "ORDER BY chunk_key, source_line"
    )
    return res.rows


def lake_problems(lake: Path | str, reference: list[tuple[object, ...]] | None = None) -> list[str]:
    """Every broken invariant of a lake after crashes and a completed re-run, as messages (an
    empty list when the lake is sound). The checks of ``test_crash.assert_consistent``, shared
    with the fault tests and ``benchmarks/chaos.py``, which reports rather than asserts.

    With ``reference`` (``lake_rows`` of an uninterrupted run) the contents must equal it.
    ``lake`` is a folder or an object-store URI (its state folder is then checked for temps).
    """
    import collections

    import pyarrow.parquet as pq

    from lakecurate.lake.delta import DeltaStore, open_table
    from lakecurate.lake.paths import LakePaths
    from lakecurate.lake.storage import Location

    problems: list[str] = []
    rows = lake_rows(lake)
    if reference is not None and rows != reference:
        have, want = collections.Counter(rows), collections.Counter(reference)
        problems.append(
            f"contents differ from the clean run: {sum((want - have).values())} "
            f"row(s) missing, {sum((have - want).values())} extra"
        )
    lines = collections.Counter((r[0], r[1]) for r in rows)
    doubled = [k for k, n in lines.items() if n > 1]
    if doubled:
        problems.append(f"{len(doubled)} (chunk_key, source_line) twice, e.g. {doubled[0]}")
    kept_ids = collections.Counter(r[2] for r in rows if r[4])
    dup_ids = [k for k, n in kept_ids.items() if n > 1]
    if dup_ids:
        problems.append(f"{len(dup_ids)} id(s) kept twice, e.g. {dup_ids[0]!r}")
    paths = LakePaths.of(lake)
    temps = sorted(str(p) for p in paths.root.rglob("*") if ".tmp" in p.name)
    temps += [e.rel for e in paths.storage.files() if ".tmp" in e.rel]
    if temps:
        problems.append(f"temp files left: {temps[:3]}")
    staged = [e.rel for e in paths.staging.files()]
    if staged:
        problems.append(f"staged files left: {staged[:3]}")
    store = DeltaStore(paths.documents)
    dt = open_table(paths.documents)
    for uri in dt.file_uris():
        try:
            loc = Location.of(uri)
            pq.read_table(loc.fs_path, filesystem=loc.fs)
        except Exception as exc:  # any failure to read is the finding
            problems.append(f"data file unreadable: {uri} ({exc})")
    referenced = store.referenced_files()
    on_disk = {str(loc) for loc in store.data_files()}  # checkpoints are in _delta_log
    if on_disk != referenced:
        problems.append(
            f"{len(on_disk - referenced)} orphan data file(s), {len(referenced - on_disk)} missing"
        )
    committed, twice = log_chunk_versions(dt)
    problems.extend(twice)
    lk = Lake.open(lake)
    success = dict(
        lk.sql("SELECT chunk_key, delta_version FROM chunks WHERE status = 'SUCCESS'").rows
    )
    if success != committed:
        differ = set(success.items()) ^ set(committed.items())
        problems.append(f"state and Delta log disagree on {len(differ)} chunk version(s)")
    if lk.sql("SELECT count(*) FROM commits WHERE status <> 'DONE'").rows[0][0]:
        problems.append("commit intents left open")
    max_seq = lk.sql("SELECT max(seq) FROM commits").rows[0][0]
    if dt.transaction_version("lakecurate") != max_seq:
        problems.append(
            f"Delta watermark {dt.transaction_version('lakecurate')} != state seq {max_seq}"
        )
    statuses = lk.sql("SELECT DISTINCT status FROM chunks").rows
    if statuses != [("SUCCESS",)]:
        problems.append(f"chunk statuses {statuses}, not all SUCCESS")
    (n_hashes, n_docs) = lk.sql(
        "SELECT (SELECT count(*) FROM content_hashes), (SELECT count(*) FROM documents "
        "WHERE kept OR (reason = 'near_dup' AND dup_of IS NOT NULL))"
    ).rows[0]
    if n_hashes != n_docs:
        problems.append(
            f"content index has {n_hashes} entries for {n_docs} kept documents and near duplicates"
        )
    return problems


def assert_lake_consistent(lake: Path, reference: list[tuple[object, ...]] | None) -> None:
    """``lake_problems`` as an assertion."""
    problems = lake_problems(lake, reference)
    assert problems == [], "\n".join(problems)


def near_decisions(lake: Path) -> list[tuple[object, ...]]:
    """Every document's near-dedup decision, in input order."""
    return (
        Lake.open(lake)
        .sql(
            "SELECT chunk_key, source_line, id, kept, reason, dup_of, cluster_id FROM documents "
            "ORDER BY chunk_key, source_line"
        )
        .rows
    )


def match_in_chunks(
    idx: NearDedupIndex,
    corpus: tuple[list[str], pa.Array, pa.Array],
    sizes: list[int],
    shuffle: int | None = None,
    workers_files: Path | None = None,
    run: int = 1,
) -> list[tuple[int, int | None, str | None]]:
    """Match and add ``corpus`` (texts, signatures, band hashes) to ``idx`` in chunks of
    ``sizes`` documents, each chunk's rows shuffled (seed ``shuffle`` + ordinal) when
    ``shuffle`` is given; (doc_seq, cluster_id, dup_of) of every document, chunk by chunk
    (``as_global`` turns them into corpus positions). With ``workers_files`` each chunk's
    signatures and bands are also written there as a worker writes them, and their files
    handed to the index (decider processes read them). ``run``: how many consecutive chunks
    are matched as one (``match_chunks``), then added one by one."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from lakecurate.store import band_index

    texts, sig, bands = corpus
    chunks = []
    start = 0
    for ordinal, size in enumerate(sizes):
        rows = np.arange(start, min(start + size, len(texts)))
        table = band_index.chunk_table(
            band_index.make_doc_seq(ordinal, np.arange(len(rows))),
            [f"d{i}" for i in rows],
            sig.take(rows),
            bands.take(rows),
        )
        files = worker_files(workers_files, ordinal, table) if workers_files is not None else []
        if shuffle is not None:
            table = table.take(np.random.default_rng(shuffle + ordinal).permutation(len(rows)))
        chunks.append((table, files))
        start += size
    out: list[tuple[int, int | None, str | None]] = []
    for at in range(0, len(chunks), run):
        these = chunks[at : at + run]
        sets = [f[0] for _, f in these if f]
        bands_files = [f[1] for _, f in these if f]
        result = idx.match_chunks(pa.concat_tables([t for t, _ in these]), sets, bands_files)
        for ordinal, (table, files) in enumerate(these, start=at):
            mine = result.filter(pc.equal(pc.shift_right(result["doc_seq"], 32), ordinal))
            idx.add_chunk(table, mine, *files)
        out.extend(
            zip(
                result["doc_seq"].to_pylist(),
                result["cluster_id"].to_pylist(),
                result["dup_of"].to_pylist(),
                strict=True,
            )
        )
    return out


def worker_files(folder: Path, ordinal: int, table: pa.Table) -> list[ChunkSets]:
    """A match table's signatures and bands written under ``folder`` as a worker writes them
    (one Arrow file per column, keyed by row), for chunk ``ordinal``; the sets and bands files
    ``match_chunk`` and ``add_chunk`` take (decider processes read them)."""
    import numpy as np
    import pyarrow as pa

    from lakecurate.lake import sets as lake_sets
    from lakecurate.lake.storage import Location
    from lakecurate.store.signatures import ChunkSets

    files = []
    for column in ("signature", "bands"):
        path = Location(str(folder / f"{ordinal}.{column}.arrow"))
        rows = np.arange(table.num_rows, dtype=np.int64)
        lake_sets.write(pa.table({"row": rows, column: table[column].combine_chunks()}), path)
        files.append(ChunkSets.of_file(ordinal, path))
    return files


def as_global(
    rows: list[tuple[int, int | None, str | None]], sizes: list[int]
) -> list[tuple[int, int | None, str | None]]:
    """Map doc_seq and cluster_id to the position in the corpus, so chunkings compare."""
    import numpy as np

    from lakecurate.store import band_index

    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))

    def pos(seq: int | None) -> int | None:
        if seq is None:
            return None
        ordinal, row = band_index.split_doc_seq(seq)
        return int(starts[ordinal]) + row

    return [(pos(s), pos(c), d) for s, c, d in rows]  # type: ignore[misc]


def log_chunk_versions(dt: DeltaTable) -> tuple[dict[str, int], list[str]]:
    """Chunk -> the Delta version whose commit carried it, from the log's commit records, and
    a line for every chunk the log carries more than once."""
    committed: dict[str, int] = {}
    twice = []
    for entry in sorted(dt.history(), key=lambda e: int(e["version"])):
        record = CommitRecord.parse(entry)
        for key in record.chunk_keys if record.kind != SUPERSEDE else []:
            if key in committed:
                twice.append(
                    f"{key} committed twice (versions {committed[key]} and {entry['version']})"
                )
            committed[key] = int(entry["version"])
    return committed, twice


# French prose (language id, per-language rules: tests/sql/test_language_*.py).
FRENCH = (
    "La rivière est montée très vite après trois jours de pluie, et les paysans ont conduit "
    "leurs bêtes sur la colline. Le deuxième matin, le vieux pont était sous l'eau et "
    "l'école avait fermé ses portes. Des bénévoles du village voisin sont arrivés avec des "
    "bateaux, des couvertures et du pain pour les familles. Personne ne se souvenait d'une "
    "telle crue depuis l'hiver où leurs grands-parents s'étaient mariés. Quand l'eau est enfin "
    "redescendue, les champs étaient couverts d'une épaisse couche de boue grise."
)

# Chinese prose, written without spaces (per-language rules: words are characters).
CHINESE = (
    "昨天下午我们在学校的图书馆里看书，外面突然下起了大雨。老师说今年的雨水比往年多，"
    "河边的农民都很担心他们的庄稼。放学以后，我和同学一起走回家，路上的水已经没过了脚面。"
    "到家的时候，妈妈已经做好了晚饭，她让我先换一身干净的衣服。"
)


def run_chunk(
    tmp_path: Path, texts: list[str], data: dict[str, Any]
) -> tuple[ChunkResult, list[dict[str, Any]]]:
    """The worker's ``process_chunk`` on one JSONL chunk of ``texts`` (ids d0, d1, ...) with
    the config ``data`` (parsed TOML): its result and its staged rows."""
    import pyarrow.parquet as pq

    from lakecurate import config
    from lakecurate.ingest import cutting, worker
    from lakecurate.types import Format, WorkOrder

    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    (spec,) = cutting.plan_file(str(path), Format.JSONL, 1 << 30)[1]
    cfg = config.from_dict(data)
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    order = WorkOrder(
        staging_dir=str(staging), run_id="r", config_hash=cfg.hash, decisions=config.to_toml(cfg)
    )
    result = worker.process_chunk(spec, order)
    return result, pq.read_table(result.staged_path).to_pylist()


def kill_then_finish(
    args: tuple[object, ...],
    point: str,
    lake: Path | str,
    reference: list,  # type: ignore[type-arg]
    env: dict[str, str] | None = None,
) -> dict[str, int]:
    """Kill an ingest at ``point``, finish it with the same command, check the lake (a folder
    or an object-store URI; ``env`` for both runs); returns the chunks the log held after the
    kill (with their versions: none is committed again)."""
    import signal

    from lakecurate.lake.delta import open_table
    from lakecurate.lake.paths import LakePaths

    killed = run_lakecurate(*args, env={**(env or {}), "LAKECURATE_FAULT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    table = LakePaths.of(lake).documents
    logged = bool((table / "_delta_log").files(".json"))
    before = log_chunk_versions(open_table(table))[0] if logged else {}
    done = run_lakecurate(*args, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_lake_consistent(lake, reference)
    after, _ = log_chunk_versions(open_table(table))
    assert {k: after[k] for k in before} == before
    return before


def key_tables(con: Any) -> None:
    """The membership index's keys as they are now, as TEMP tables ``content_hashes`` and
    ``doc_ids`` on the state connection ``con`` (what readers see: ``store.key_files``)."""
    from lakecurate.store import key_files

    files = key_files.KeyFiles(con)
    for space, name, doc_id in (("content", "content_hashes", "doc_id, "), ("ids", "doc_ids", "")):
        con.register("key_rows", files.read(space))
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {name} AS "
            f"SELECT (hi::UHUGEINT << 64) | lo AS hash, {doc_id}seq FROM key_rows"
        )
        con.unregister("key_rows")


def held_in(request: pytest.FixtureRequest) -> Iterator[Shards | None]:
    """A fixture's body for where a cache holds its rows: ``"driver"`` (None: the test's
    process), or ``"N deciders"`` (N real decider processes, stopped after the test)."""
    from lakecurate.store.band_shards import Shards

    if request.param == "driver":
        yield None
        return
    shards = Shards(int(str(request.param).split()[0]))
    try:
        yield shards
    finally:
        shards.close()


def kill_decider(shards: Shards, shard: int) -> None:
    """SIGKILL one decider process and wait until it is gone."""
    import signal

    proc = shards._procs[shard]
    os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
    proc.join()
