"""The full pipeline at 1x, 4x and 16x a base corpus: does the cost stay linear (issue 14)?

Run: /work/venv/bin/python benchmarks/bench_scale.py [--scales 1 4 16] [--workers 2]
     [--chunk-mb 16] [--distinct] [--deciders 0] [--out benchmarks/results/bench_scale.json]

The base corpus is ``../shared/data/real`` (about 62,000 documents, 52 MB of text, skipped with
a message when the folder is absent) plus one perturbed copy of each document (a few words
dropped or swapped: near duplicates); scale k is k such copies of the base with different seeds
(copy 0 is the base itself), written as plain JSONL. Each scale is ingested into a new lake with
the ``multilingual`` preset (language id, the Gopher, C4 and FineWeb filters, exact and near
dedup) by a fresh Python process (so peak RSS is per scale) with ``--workers`` workers.
Reported per scale: input bytes and documents, wall seconds, documents/s, the driver's and the
workers' peak RSS, the driver's CPU seconds for the first and the last chunk it decided
(``Committer.stage``, thread CPU time; a batch's shared by its chunks), and the process CPU
time (DuckDB's threads included) of every chunk's ``stage`` with the medians of the first and
the last quarter of chunks (one chunk is noisy and the first pays for warming up; nor is the
corpus uniform: the chunks holding the English end of the base carry most near-dedup
signatures), the state file, the Bloom tier and
the Delta table on disk (bytes, and state bytes per document: target <= 150), the near-dedup
signature and band files and tier 2's key files (``index/signatures``, ``index/bands``,
``index/keys``, outside the state), and the time ratio to scale 1
(target: 16x input costs <= 17x the time).

With ``--distinct`` the copies after the first have each line's words shuffled before they are
perturbed: the lake grows as much, but a document has one near copy (its variant) whatever the
scale, so the driver's cost per chunk shows what the lake's size does to it apart from how many
earlier near copies each document has (which grows with the scale in the default corpus).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import loadavg, save

RESULTS = Path(__file__).resolve().parent / "results" / "bench_scale.json"
REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"

# Run in a fresh process per scale: its peak RSS is that scale's alone.
CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from statistics import median
from lakecurate.api import Lake
from lakecurate.ingest.commit import Committer

if __name__ == "__main__":
    data, lake, workers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    chunk_mb, deciders = int(sys.argv[4]), int(sys.argv[5])
    from lakecurate.store import band_shards
    shards = []
    close_shards = band_shards.Shards.close
    def closed(self):
        close_shards(self)
        shards.append(self)
    band_shards.Shards.close = closed
    cpu, proc = [], []
    stage = Committer.stage
    depth = [0]
    def timed(self, items, *a, **k):
        # A batch's CPU shared by its chunks; only the outermost call (stage cuts a batch
        # into runs by calling itself).
        depth[0] += 1
        t, p = time.thread_time(), time.process_time()
        try:
            out = stage(self, items, *a, **k)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            n = max(1, len(items))
            cpu.extend([(time.thread_time() - t) / n] * n)
            proc.extend([(time.process_time() - p) / n] * n)  # DuckDB's threads too
        return out
    Committer.stage = timed
    cfg = lake.parent / (lake.name + ".toml")
    cfg.write_text(
        f'preset = "multilingual"\n\n[ingest]\nchunk_size = "{chunk_mb}MiB"\n'
        f"deciders = {deciders}\n"
    )
    started = time.perf_counter()
    report = Lake.open(lake).ingest([data], config=cfg, workers=workers)
    wall = time.perf_counter() - started
    kib = 1 if sys.platform == "darwin" else 1024
    peak = lambda who: round(resource.getrusage(who).ru_maxrss * kib / 2**20)
    print(json.dumps({
        "ok": report.ok, "chunks": report.chunks_committed, "rows_in": report.rows_in,
        "rows_kept": report.rows_kept, "wall_seconds": round(wall, 1),
        "driver_peak_rss_mib": peak(resource.RUSAGE_SELF),
        "workers_peak_rss_mib": peak(resource.RUSAGE_CHILDREN),  # deciders' too
        "deciders": deciders,
        "deciders_cpu_seconds": round(sum(s.cpu_seconds for s in set(shards)), 1),
        "deciders_peak_rss_mib": round(max([0, *(s.peak_rss_kib for s in shards)]) * kib / 2**20),
        "driver_cpu_first_chunk_s": round(cpu[0], 3) if cpu else None,
        "driver_cpu_last_chunk_s": round(cpu[-1], 3) if cpu else None,
        "driver_process_cpu_per_chunk_s": [round(c, 3) for c in proc],
        "driver_process_cpu_first_quarter_median_s": median(proc[: max(1, len(proc) // 4)]),
        "driver_process_cpu_last_quarter_median_s": median(proc[-max(1, len(proc) // 4):]),
    }))
"""


def perturb(text: str, rng: random.Random) -> str:
    """A near duplicate: about one word in 25 dropped, and one pair of words swapped."""
    words = text.split(" ")
    kept = [w for w in words if rng.random() > 0.04] or words
    if len(kept) > 3:
        i = rng.randrange(len(kept) - 1)
        kept[i], kept[i + 1] = kept[i + 1], kept[i]
    return " ".join(kept)


def base_documents(real: Path) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(real.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            docs += [json.loads(line) for line in f if line.strip()]
    return docs


def shuffle_lines(text: str, rng: random.Random) -> str:
    """The same words line by line, each line's words in another order: the statistics the
    filters and language id look at stay (words, lines, their ends mostly), the shingles go,
    so the copy is near no other."""
    out = []
    for line in text.split("\n"):
        words = line.split(" ")
        rng.shuffle(words)
        out.append(" ".join(words))
    return "\n".join(out)


def write_scale(
    path: Path, docs: list[dict[str, Any]], scale: int, distinct: bool = False
) -> tuple[int, int]:
    """``scale`` copies of the base (the documents and a perturbed copy of each); copy 0 is
    unperturbed. With ``distinct`` every copy after the first has each line's words shuffled
    first, so copies are not near each other. Returns (bytes, documents)."""
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for copy in range(scale):
            rng = random.Random(copy)
            for doc in docs:
                base = shuffle_lines(doc["text"], rng) if distinct and copy else doc["text"]
                for variant in (0, 1):
                    text = base
                    if copy or variant:
                        text = perturb(text, rng)
                    record = {"id": f"{doc['id']}~{copy}.{variant}", "text": text}
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                    n += 1
    return path.stat().st_size, n


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def run_scale(
    scale: int,
    docs: list[dict[str, Any]],
    workers: int,
    chunk_mb: int,
    work: Path,
    distinct: bool = False,
    deciders: int = 0,
) -> dict[str, Any]:
    data = work / f"scale{scale}.jsonl"
    size, n = write_scale(data, docs, scale, distinct)
    lake = work / f"lake{scale}"
    load = loadavg()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(data),
            str(lake),
            str(workers),
            str(chunk_mb),
            str(deciders),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    state = du(lake / "state.duckdb")
    out.update(
        scale=scale,
        input_bytes=size,
        documents=n,
        docs_per_second=round(n / out["wall_seconds"]),
        state_bytes=state,
        state_bytes_per_document=round(state / n, 1),
        bloom_bytes=sum(du(p) for p in (lake / "index").glob("*.bloom")),
        signatures_bytes=du(lake / "index" / "signatures"),
        bands_bytes=du(lake / "index" / "bands"),
        key_files_bytes=du(lake / "index" / "keys"),  # tier 2, out of state.duckdb since aabefd2
        table_bytes=du(lake / "documents"),
        loadavg_before=load,
    )
    data.unlink()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk-mb", type=int, default=16)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--real", type=Path, default=REAL, help="the real corpora's folder")
    parser.add_argument(
        "--distinct",
        action="store_true",
        help="copies not near each other (each line's words shuffled): the lake grows, the "
        "number of earlier near copies of a document does not",
    )
    parser.add_argument(
        "--deciders",
        type=int,
        default=0,
        help="[ingest] deciders: processes holding the band index (their CPU and peak RSS "
        "are reported apart; the workers' peak RSS includes theirs)",
    )
    args = parser.parse_args()
    if not args.real.is_dir():
        print(f"skipped: {args.real} is absent (the real corpora are not on this machine)")
        return 0
    docs = base_documents(args.real)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for scale in args.scales:
            results.append(
                run_scale(
                    scale,
                    docs,
                    args.workers,
                    args.chunk_mb,
                    Path(tmp),
                    args.distinct,
                    args.deciders,
                )
            )
            print(json.dumps(results[-1]), flush=True)
    first = results[0]
    for r in results:
        r["time_over_first"] = round(r["wall_seconds"] / first["wall_seconds"], 2)
        r["input_over_first"] = round(r["input_bytes"] / first["input_bytes"], 2)
    save({"distinct": args.distinct, "deciders": args.deciders, "results": results}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
