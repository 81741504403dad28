"""Progress within a chunk (issue 16 item 5): a worker's heartbeat says how far into its chunk
it is, so the bar moves before the first (large) chunk is committed; and DuckDB never draws its
own bar over ours, even on a terminal."""

from __future__ import annotations

import json
import os
import pty
import random
import select
import subprocess
import time
from pathlib import Path

import pytest
from helpers import cli_env, lakecurate_cmd

from lakecurate import Lake
from lakecurate.progress import NullReporter

WORDS = [
    "river",
    "stone",
    "light",
    "market",
    "winter",
    "garden",
    "letter",
    "signal",
    "engine",
    "harbour",
    "valley",
]


@pytest.fixture(scope="module")
def big_chunk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~30 MB of JSONL: one chunk that takes a worker several seconds (filters, near dedup)."""
    folder = tmp_path_factory.mktemp("progress")
    rng = random.Random(3)
    with (folder / "in.jsonl").open("w") as f:
        for i in range(12_000):
            text = " ".join(rng.choice(WORDS) for _ in range(400))
            f.write(json.dumps({"id": f"d{i}", "text": f"Document {i}. {text}"}) + "\n")
    (folder / "lakecurate.toml").write_text(
        '[ingest]\nchunk_size = "64MiB"\n\n[near_dedup]\nenabled = true\n\n'
        '[filters]\nsteps = ["gopher_repetition", "gopher_quality", "c4"]\n'
    )
    return folder


class Recorder(NullReporter):
    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []
        self.done_at: int | None = None

    def chunk_progress(self, running: dict[str, tuple[float, int]]) -> None:
        self.seen += running.values()

    def chunk_done(self, chunk_key: str, input_bytes: int, rows_in: int, rows_kept: int) -> None:
        self.done_at = len(self.seen)


def test_a_chunk_reports_how_far_it_is_before_it_is_committed(
    big_chunk: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    report = Lake.open(tmp_path / "lake").ingest(
        [big_chunk / "in.jsonl"], config=big_chunk / "lakecurate.toml", workers=1, reporter=rec
    )
    assert report.ok and report.chunks_committed == 1
    size = (big_chunk / "in.jsonl").stat().st_size
    assert all(0.0 <= f <= 1.0 and n == size for f, n in rec.seen)
    partial = sorted({f for f, _ in rec.seen if 0.0 < f < 1.0})
    assert partial, rec.seen  # the chunk was seen part-way, not only at 0 and done
    assert rec.done_at is not None and rec.done_at >= 1


@pytest.mark.slow  # a real terminal, 10 s; tests/unit/test_engine.py checks the setting
def test_no_duckdb_bar_on_a_terminal(big_chunk: Path, tmp_path: Path) -> None:
    """A real ingest on a pseudo-terminal: DuckDB's bar (drawn with U+2595/U+258F) never
    appears, in the driver's output or the workers' (they share the terminal)."""
    main, child = pty.openpty()
    args = lakecurate_cmd(
        "ingest",
        big_chunk / "in.jsonl",
        "--lake",
        tmp_path / "lake",
        "--config",
        big_chunk / "lakecurate.toml",
        "--workers",
        "2",
    )
    env = cli_env({"COLUMNS": "120", "TERM": "xterm"})
    proc = subprocess.Popen(args, stdin=child, stdout=child, stderr=child, env=env)
    os.close(child)
    out = b""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1.0)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            out += data
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(main)
    text = out.decode("utf-8", "replace")
    assert proc.returncode == 0, text
    assert "ingested 1 chunk" in text, text
    assert "\u2595" not in text and "\u258f" not in text, text
