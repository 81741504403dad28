"""The document cache gives a chunk's matching exactly the rows of ``minhash_docs`` that a join
with the table gives, through random histories of indexed chunks, chunks indexed again,
forgotten commits, rolled-back transactions and reopens: the model is the table itself."""

from __future__ import annotations

import random
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from lakecurate import engine
from lakecurate.store.doc_cache import DocCache

# What kept_pairs and chunk_result joined before the cache: the candidates' rows and their
# clusters' kept documents' rows.
JOIN = """
WITH asked AS (SELECT unnest($dst::BIGINT[]) AS doc_seq)
SELECT doc_seq, cluster_id, doc_id FROM minhash_docs
WHERE doc_seq IN (SELECT doc_seq FROM asked)
   OR doc_seq IN (SELECT cluster_id FROM minhash_docs WHERE doc_seq IN (SELECT doc_seq FROM asked))
ORDER BY doc_seq
"""


class RolledBackError(Exception):
    pass


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    con = engine.connect(threads=1)
    con.execute(engine.q("dedup.create_docs"))
    yield con
    con.close()


def index_chunk(
    con: duckdb.DuckDBPyConnection, cache: DocCache, seq: int, rng: random.Random, held: list[int]
) -> None:
    """What ``add_chunk`` does to the table: replace the chunk's rows (an earlier attempt's),
    insert its documents, each its own cluster or that of an earlier document; then the cache's
    add."""
    rows = rng.randrange(1, 30)
    doc_seq = np.array([(seq << 32) | r for r in range(rows)], dtype=np.int64)
    cluster = np.array(
        [rng.choice(held) if held and rng.random() < 0.4 else int(d) for d in doc_seq],
        dtype=np.int64,
    )
    ids = pa.array([f"s{seq}r{r}" for r in range(rows)])
    con.execute(
        engine.q("dedup.forget_docs_range"), {"lo": int(doc_seq[0]), "hi": int(doc_seq[-1])}
    )
    con.register("new", pa.table({"doc_seq": doc_seq, "doc_id": ids, "cluster_id": cluster}))
    con.execute("INSERT INTO minhash_docs SELECT doc_seq, doc_id, cluster_id FROM new")
    con.unregister("new")
    cache.add(doc_seq, cluster, ids)


@pytest.mark.parametrize("seed", range(3))
def test_the_cache_gives_what_the_join_gives_through_a_history(
    con: duckdb.DuckDBPyConnection, seed: int
) -> None:
    rng = random.Random(seed)
    cache = DocCache(con)
    seq, changes = 0, 1
    for _ in range(60):
        op = rng.choice(["index", "index", "index", "again", "forget", "rollback", "check"])
        held = [r[0] for r in con.execute("SELECT doc_seq FROM minhash_docs").fetchall()]
        if op == "index":
            seq += 1
            index_chunk(con, cache, seq, rng, held)
        elif op == "again" and seq:  # a chunk indexed again, other clusters this time
            index_chunk(con, cache, rng.randrange(1, seq + 1), rng, held)
            changes += 1
        elif op == "forget" and seq:
            con.execute(engine.q("dedup.forget_docs_seqs"), {"seqs": [rng.randrange(1, seq + 1)]})
            changes += 1
        elif op == "rollback":
            con.execute("BEGIN")
            seq += 1
            index_chunk(con, cache, seq, rng, held)
            con.execute("ROLLBACK")
            changes += 1
        dst = [*rng.sample(held, min(len(held), 12)), (10**6) << 32]  # one never indexed
        got = cache.lake_docs(np.array(dst, dtype=np.int64)).sort_by("doc_seq")
        want = con.execute(JOIN, {"dst": dst}).fetchall()
        assert list(zip(*got.to_pydict().values(), strict=True)) == want
    assert cache.loads <= changes  # indexed chunks were held, not read again
