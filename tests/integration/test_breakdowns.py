"""`status` and the report break keep rates down by input file and by language, so that a
step wiping out one file or one language is visible at a glance (issue 16: the example config
kept 2 of 6,239 Spanish documents and nothing said so). Documents dropped before language id
ran have no language: they are one row of their own, never "unknown 0 kept"."""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest
from helpers import PROSE

from lakecurate import Lake

FRENCH = (
    "La rivière est montée très vite après trois jours de pluie, et les paysans ont conduit "
    "leurs bêtes sur la colline. Le deuxième matin, le vieux pont était sous l'eau et "
    "l'école avait fermé ses portes. Des bénévoles du village voisin sont arrivés avec des "
    "bateaux, des couvertures et du pain pour les familles."
)
CONFIG = """\
[ingest]
retry_backoff = 0.05

[filters]
steps = ["length", "langid", "gopher_quality"]

[filters.length]
min_chars = 100

[langid]
keep = ["en"]
"""
N_EN, N_FR, N_SHORT = 8, 5, 3


def _write(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    root = tmp_path_factory.mktemp("breakdowns")
    data = root / "data"
    data.mkdir()
    english = [" ".join([*PROSE, f"This was letter number {i} of the year."]) for i in range(N_EN)]
    short = [f"Too short {i}." for i in range(N_SHORT)]  # dropped by length, before langid
    _write(data / "english.jsonl", english + short)
    _write(data / "french.jsonl", [f"{FRENCH} Lettre numéro {i}." for i in range(N_FR)])
    (root / "lakecurate.toml").write_text(CONFIG, encoding="utf-8")
    lake = Lake.open(root / "lake")
    assert lake.ingest([data], config=root / "lakecurate.toml", workers=1).ok
    return lake


def test_status_breaks_keep_rates_down_by_file_and_language(lake: Lake) -> None:
    st = lake.status()
    files = st.by_file.dicts()
    # The wiped-out file first, with the reason; paths shown relative to their common folder.
    assert files == [
        {
            "file": "french.jsonl",
            "docs": N_FR,
            "kept": 0,
            "kept_pct": 0.0,
            "top_drop_reason": "filter:langid",
        },
        {
            "file": "english.jsonl",
            "docs": N_EN + N_SHORT,
            "kept": N_EN,
            "kept_pct": round(100 * N_EN / (N_EN + N_SHORT), 1),
            "top_drop_reason": "filter:length",
        },
    ]
    langs = {r["lang"]: (r["docs"], r["kept"]) for r in st.by_language.dicts()}
    assert langs == {
        "en": (N_EN, N_EN),
        "fr": (N_FR, 0),
        "(not identified: dropped earlier)": (N_SHORT, 0),
    }
    assert st.by_language.rows[-1][0] == "(not identified: dropped earlier)"  # listed last


def test_status_on_the_command_line_shows_both_tables(lake: Lake, run_cli) -> None:  # type: ignore[no-untyped-def]
    proc = run_cli("status", "--lake", lake.root, env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "== files" in out and "== languages" in out
    files = out.split("== files")[1].split("==")[0]
    assert re.search(r"french\.jsonl\s+5\s+0\s+0\.0\s+filter:langid", files), files
    assert max(len(ln) for ln in out.split("== runs")[0].splitlines()) <= 100
    proc = run_cli("status", "--lake", lake.root, "--format", "json")
    rows = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert {r["lang"] for r in rows if r["section"] == "languages"} == {
        "en",
        "fr",
        "(not identified: dropped earlier)",
    }
    assert [r["file"] for r in rows if r["section"] == "files"] == ["french.jsonl", "english.jsonl"]


def _section(page: str, title: str) -> str:
    return page.split(f"<h2>{title}</h2>", 1)[1].split("</section>", 1)[0]


def test_the_report_shows_files_and_languages_without_an_unknown_language(
    lake: Lake, tmp_path: Path
) -> None:
    page = lake.report(tmp_path / "r.html").read_text(encoding="utf-8")
    langs = _section(page, "Languages (kept documents)")
    assert "unknown" not in langs and "not identified" not in langs.split('<p class="note">')[0]
    assert f"{N_EN} kept of {N_EN} (100.0%)" in langs and f"0 kept of {N_FR}" in langs
    assert f"{N_SHORT} document(s) were dropped before language id ran" in langs
    files = _section(page, "Keep rate by input file")
    rows = [
        [htmllib.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r)]
        for r in re.findall(r"<tr>(.*?)</tr>", files)
    ][1:]
    assert rows[0] == ["french.jsonl", f"{N_FR}", "0", "0.0%", "filter:langid"]
    assert rows[1][0] == "english.jsonl" and rows[1][2] == f"{N_EN}"


def test_the_duplicate_chart_shows_groups_of_two_or_more_on_a_log_scale(
    tmp_path: Path,
) -> None:
    # Near dedup gives every document a cluster; the singletons (here 6, on real data 5,629)
    # used to be one tall bar hiding the real groups.
    data = tmp_path / "data.jsonl"
    near = [" ".join([*PROSE, f"This was letter number {i} of the year."]) for i in range(4)]
    _write(data, near + PROSE)  # 4 near duplicates, then 6 unrelated sentences
    (tmp_path / "c.toml").write_text("[near_dedup]\nenabled = true\n", encoding="utf-8")
    lake = Lake.open(tmp_path / "lake")
    assert lake.ingest([data], config=tmp_path / "c.toml", workers=1).ok
    (singletons,) = lake.sql(
        "SELECT count(*) FROM (SELECT cluster_id FROM documents WHERE cluster_id IS NOT NULL "
        "GROUP BY ALL HAVING count(*) = 1)"
    ).rows[0]
    assert singletons == len(PROSE)
    part = _section(
        lake.report(tmp_path / "r.html").read_text(encoding="utf-8"), "Duplicate groups by size"
    )
    bars = re.findall(r"<title>(.*?)</title>", part)
    assert bars == ["near 4: 1"]
    assert "groups (log scale)" in part
