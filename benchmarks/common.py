"""What every benchmark here records the same way: the load, the driver's RSS, the result file."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any


def rss_mib() -> float:
    """This process's resident memory now, in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def loadavg() -> list[float]:
    """The 1/5/15-minute load averages, rounded: the machine is shared, say how busy it was."""
    return [round(x, 2) for x in os.getloadavg()]


def save(result: dict[str, Any], out: Path) -> None:
    """Record the command line with ``result``, print it and write it to ``out``."""
    result["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    print(json.dumps(result, indent=2))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


def tenths(times: list[float]) -> tuple[float, float]:
    """The median of the first and of the last tenth of ``times`` (seconds): does a cost per
    commit stay flat as the table grows?"""
    tenth = max(1, len(times) // 10)
    return statistics.median(times[:tenth]), statistics.median(times[-tenth:])


def each_in_own_process(
    script: str, names: tuple[str, ...], args: list[str], tmp: Path
) -> list[Any]:
    """Run ``script --one NAME ARGS --table TMP/NAME`` for each name in a fresh process (so one
    path's memory and caches do not weigh on the next) and return the JSON line each prints."""
    results = []
    for name in names:
        out = subprocess.run(
            [sys.executable, script, "--one", name, *args, "--table", str(tmp / name)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    return results


def table_fingerprint(lake: Path | str) -> tuple[object, ...]:
    """A lake's rows (every column but run ids and times) as a count and an XOR of row hashes,
    computed in DuckDB: comparing two lakes' tables without holding their text here (a child
    process inherits its parent's ``ru_maxrss`` across fork and exec)."""
    from lakecurate.api import Lake

    return tuple(
        Lake.open(lake)
        .sql(
            "SELECT count(*), bit_xor(hash(chunk_key, source_line, id, content_hash, kept, "
            "reason, dup_of, cluster_id, text)) FROM documents"
        )
        .rows[0]
    )
