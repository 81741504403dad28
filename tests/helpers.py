"""Helpers shared by the tests (importable as ``helpers``: pytest puts tests/ on the path)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from lakecurate import Lake

ROOT = Path(__file__).resolve().parents[1]

SMALL_CONFIG = """\
[ingest]
chunk_size = "64KiB"
max_attempts = 3
retry_backoff = 0.05

[dedup]
exact = true
"""


def load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("generate_corpus",
                                                  ROOT / "examples" / "generate_corpus.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKECURATE_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def lake_rows(lake: Path) -> list[tuple[object, ...]]:
    """The lake's latest version as a sorted list of (chunk_key, source_line, id, content_hash,
    kept, reason, dup_of): the identity of a lake's contents."""
    res = Lake.open(lake).sql(
        "SELECT chunk_key, source_line, id, content_hash, kept, reason, dup_of FROM documents "
        "ORDER BY chunk_key, source_line")
    return res.rows
