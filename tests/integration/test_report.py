"""`report --html`: one self-contained page (no script, nothing fetched) that a real headless
browser (Debian's chromium) renders without errors into a non-trivial screenshot. Skips the
browser part cleanly when chromium is not installed (`.ci/run` installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import SMALL_CONFIG

from lakecurate import Lake

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "") if p and
                 Path(p).exists()), None)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Lake:
    root = tmp_path_factory.mktemp("report")
    (root / "lakecurate.toml").write_text(SMALL_CONFIG, encoding="utf-8")
    lake = Lake.open(root / "lake")
    assert lake.ingest([corpus], config=root / "lakecurate.toml").ok
    return lake


def test_report_is_self_contained_and_about_its_version(lake: Lake, tmp_path: Path) -> None:
    latest = lake.report(tmp_path / "latest.html")
    first = lake.report(tmp_path / "first.html", version=0)
    page = latest.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 5
    for section in ("Filter funnel", "Document length, before and after", "Languages",
                    "Duplicate groups by size", "Chunk throughput over time", "Failures"):
        assert section in page
    # nothing outside the file: no script, no external reference of any kind
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=|url\(|@import|https?://(?!www\.w3\.org)""", page)
    (rows, kept) = lake.sql("SELECT count(*), count(*) FILTER (WHERE kept) FROM documents").rows[0]
    assert f"<b>{rows:,}</b><span>documents in</span>" in page
    assert f"{kept:,} of {rows:,} documents kept" in page
    (rows0,) = lake.at(version=0).sql("SELECT count(*) FROM documents").rows[0]
    assert f"<b>{rows0:,}</b><span>documents in</span>" in first.read_text(encoding="utf-8")
    assert "report: version 0" in first.read_text(encoding="utf-8")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                                             "chromium; .ci/run does)")
def test_report_renders_in_headless_chromium(lake: Lake, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    html = tmp_path / "report.html"
    proc = run_cli("report", "--lake", lake.root, "--html", html)
    assert proc.returncode == 0, proc.stderr
    shot = tmp_path / "report.png"
    assert CHROMIUM is not None
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
         "--v=0", f"--screenshot={shot}", "--window-size=1280,2000", html.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.exists()
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 30_000, "a screenshot this small is a blank page"
    log = result.stderr
    assert "Uncaught" not in log and "CONSOLE" not in log, log[-2000:]
    assert not re.search(r"net::ERR_|Failed to load resource", log), log[-2000:]
