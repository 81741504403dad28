"""`report --html`: one self-contained page (no script, nothing fetched) that a real headless
browser (Debian's chromium) renders without errors into a non-trivial screenshot. Skips the
browser part cleanly when chromium is not installed (`.ci/run` installs it).

On a lake built with every filter, PII redaction, language id and a quality gate, `status` and
the report both show the funnel per step (rows in and out), the drop reasons with counts, the
PII redactions per type and the flagged chunks, and they agree with the documents."""

from __future__ import annotations

import csv
import html as htmllib
import io
import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import PROSE

from lakecurate import Lake
from lakecurate.errors import LakeError

CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", shutil.which("chromium") or "") if p and Path(p).exists()),
    None,
)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, small_lake: Path) -> Lake:
    """The corpus ingested with the small-chunk config (the session's ``small_lake``, copied)."""
    return Lake.open(shutil.copytree(small_lake, tmp_path_factory.mktemp("report") / "lake"))


FILTER_CONFIG = """\
[ingest]
chunk_size = "64KiB"
retry_backoff = 0.05

[dedup]
exact = true

[filters]
steps = ["utf8", "length", "langid", "gopher_quality", "gopher_repetition", "c4", "fineweb",
         "pii"]

[filters.length]
min_chars = 200

[pii]
email = "tag"
ipv4 = "hash"
ipv6 = "off"
phone = "drop"

[langid]
keep = ["en"]

[gates]
strict = false

[gates.gopher_quality]
max_drop = 0.02
"""
FRENCH = (
    "La rivière est montée très vite après trois jours de pluie, et les paysans ont conduit "
    "leurs bêtes sur la colline. Le deuxième matin, le vieux pont était sous l'eau et "
    "l'école avait fermé ses portes. Des bénévoles du village voisin sont arrivés avec des "
    "bateaux, des couvertures et du pain pour les familles. Personne ne se souvenait d'une "
    "telle crue depuis l'hiver où leurs grands-parents s'étaient mariés."
)
N_EMAIL, N_IPV4, N_PHONE, N_FRENCH = 12, 5, 4, 3


@pytest.fixture(scope="module")
def filtered(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Lake:
    """The generated corpus plus documents with e-mails (tag), IPv4 addresses (hash), phone
    numbers (drop) and French text (not kept), through every filter and a tight gate."""
    root = tmp_path_factory.mktemp("report_filters")
    extra = root / "extra"
    extra.mkdir()

    def doc(i: int, sentence: str) -> str:
        return "\n".join(
            [*PROSE[:3], f"Letter {i} of the flood year was sent {sentence}.", *PROSE[3:]]
        )

    docs = (
        [
            doc(i, f"to clerk{i}@example.org and to office{i}@example.com by the mayor")
            for i in range(N_EMAIL)
        ]
        + [doc(100 + i, f"from the host at 10.0.{i}.7 on the town network") for i in range(N_IPV4)]
        + [
            doc(200 + i, f"to the office at (555) 123-45{i:02d} in the morning")
            for i in range(N_PHONE)
        ]
        + [f"{FRENCH} Lettre numéro {i}." for i in range(N_FRENCH)]
    )
    (extra / "pii.jsonl").write_text(
        "".join(json.dumps({"id": f"x{i}", "text": t}) + "\n" for i, t in enumerate(docs)),
        encoding="utf-8",
    )
    (root / "lakecurate.toml").write_text(FILTER_CONFIG, encoding="utf-8")
    lake = Lake.open(root / "lake")
    assert lake.ingest([corpus, extra], config=root / "lakecurate.toml").ok
    return lake


def _section(page: str, title: str) -> list[list[str]]:
    """The rows of the first table of a report section, as cell texts (header first)."""
    part = page.split(f"<h2>{title}</h2>", 1)[1].split("</section>", 1)[0]
    table = part.split("<table>", 1)[1].split("</table>", 1)[0] if "<table>" in part else ""
    return [
        [htmllib.unescape(c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", table)
    ]


def test_status_shows_the_funnel_redactions_and_flagged_chunks(filtered: Lake) -> None:
    st = filtered.status()
    funnel = [dict(zip(st.funnel.columns, r, strict=True)) for r in st.funnel.rows]
    steps = [f["step"] for f in funnel]
    assert steps[:12] == [
        "parse",
        "filter:utf8",
        "filter:length",
        "filter:langid",
        "filter:gopher_quality",
        "filter:gopher_repetition",
        "filter:c4",
        "filter:fineweb",
        "pii:email",
        "pii:ipv4",
        "pii:phone",
        "filter:empty",
    ]
    (rows_in, kept) = filtered.sql(
        "SELECT count(*), count(*) FILTER (WHERE kept) FROM documents"
    ).rows[0]
    assert funnel[0]["docs_in"] == rows_in and funnel[-1]["docs_out"] == kept
    for before, after in itertools.pairwise(funnel):
        assert before["docs_out"] == before["docs_in"] - before["docs_dropped"] == after["docs_in"]
    by_step = {f["step"]: f for f in funnel}
    # every drop reason of the documents is a step of the funnel, with the same count
    reasons = dict(
        filtered.sql(
            "SELECT CASE WHEN reason LIKE 'malformed:%' THEN 'parse' WHEN reason = 'filter:pii' "
            "THEN 'pii:' || split_part(split_part(detail, '=', 1), '.', 2) ELSE reason END, "
            "count(*) "
            "FROM rejects GROUP BY ALL"
        ).rows
    )
    assert reasons == {s: f["docs_dropped"] for s, f in by_step.items() if f["docs_dropped"]}
    assert by_step["pii:phone"]["docs_dropped"] == N_PHONE
    assert by_step["filter:langid"]["docs_dropped"] >= N_FRENCH
    assert by_step["filter:gopher_quality"]["drop_pct"] > 2
    # PII matches replaced, per type, in the kept documents; NULL on the other steps
    assert by_step["pii:email"]["redacted"] == 2 * N_EMAIL
    assert by_step["pii:ipv4"]["redacted"] == N_IPV4
    assert by_step["pii:phone"]["redacted"] == 0  # dropped, not replaced
    assert by_step["filter:c4"]["redacted"] is None
    (tagged,) = filtered.sql(
        "SELECT count(*) FROM docs WHERE text LIKE '%<EMAIL> and to <EMAIL> by%'"
    ).rows[0]
    assert tagged == N_EMAIL
    # chunks outside the gopher_quality gate are flagged with the measured rate
    flagged = dict(st.flagged.rows)
    assert flagged and all(
        v.startswith("gopher_quality: dropped ") and "allowed 0%..2%" in v for v in flagged.values()
    )
    assert set(flagged) == {
        k
        for (k,) in filtered.sql(
            "SELECT chunk_key FROM chunks WHERE gate_violations IS NOT NULL"
        ).rows
    }


def test_status_cli_prints_every_section(filtered: Lake, run_cli) -> None:  # type: ignore[no-untyped-def]
    table = run_cli("status", "--lake", filtered.root)
    assert table.returncode == 0, table.stderr
    out = table.stdout
    for section in ("== chunks", "== funnel", "== flagged", "== runs"):
        assert section in out
    head = out.split("== funnel", 1)[1].splitlines()[1].split()
    assert head == ["step", "docs_in", "docs_dropped", "docs_out", "drop_pct", "redacted"]
    email = next(ln for ln in out.splitlines() if ln.startswith("pii:email")).split()
    assert email[-1] == str(2 * N_EMAIL)
    flagged = out.split("== flagged", 1)[1].split("==", 1)[0]
    assert "gopher_quality: dropped" in flagged
    proc = run_cli("status", "--lake", filtered.root, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    header: list[str] = []
    funnel = []
    for r in csv.reader(io.StringIO(proc.stdout, newline="")):
        if r[0] == "section":
            header = r
        elif r[0] == "funnel":
            funnel.append(dict(zip(header, r, strict=True)))
    ipv4 = next(f for f in funnel if f["step"] == "pii:ipv4")
    assert ipv4["redacted"] == str(N_IPV4) and int(ipv4["docs_out"]) == int(ipv4["docs_in"])


def test_report_shows_funnel_reasons_redactions_and_gates(filtered: Lake, tmp_path: Path) -> None:
    page = filtered.report(tmp_path / "report.html").read_text(encoding="utf-8")
    for section in ("Filter funnel", "Drop reasons", "PII redaction", "Quality gates"):
        assert f"<h2>{section}</h2>" in page
    st = filtered.status()
    status_funnel = [(s, i, i - d) for s, i, d, *_ in st.funnel.rows]
    # the report's funnel (from the documents of the version) is the state's funnel
    rows = _section(page, "Filter funnel")
    assert rows[0] == ["step", "docs in", "docs out", "dropped", "% of step input"]
    assert [
        (s, int(i.replace(",", "")), int(o.replace(",", ""))) for s, i, o, _, _ in rows[1:]
    ] == status_funnel
    # drop reasons by rule, with counts and measured values, adding up to the dropped rows
    reasons = _section(page, "Drop reasons")[1:]
    (dropped,) = filtered.sql("SELECT count(*) FROM rejects").rows[0]
    assert sum(int(n.replace(",", "")) for _, _, n, _ in reasons) == dropped
    rules = {(r, rule): (int(n.replace(",", "")), v) for r, rule, n, v in reasons}
    assert rules[("filter:pii", "pii.phone")][0] == N_PHONE
    assert "fr" in rules[("filter:langid", "langid.lang")][1].split(", ")
    by_rule = dict(
        filtered.sql(
            "SELECT split_part(detail, '=', 1), count(*) FROM rejects "
            "WHERE reason = 'filter:gopher_quality' GROUP BY ALL"
        ).rows
    )
    assert {
        rule: n for (r, rule), (n, _) in rules.items() if r == "filter:gopher_quality"
    } == by_rule
    # PII per type: matches replaced in kept documents, chunks, documents dropped
    pii = {k: (m, c, d) for k, m, c, d in _section(page, "PII redaction")[1:]}
    assert pii["email"] == (str(2 * N_EMAIL), "1", "0")
    assert pii["ipv4"] == (str(N_IPV4), "1", "0")
    assert pii["phone"] == ("0", "0", str(N_PHONE))
    assert "ipv6" not in pii  # off
    assert f"<b>{2 * N_EMAIL + N_IPV4}</b><span>PII matches redacted</span>" in page
    # the flagged chunks with their violations
    gates = _section(page, "Quality gates")[1:]
    assert {k for k, _ in gates} == {k for k, _ in st.flagged.rows}
    assert all(v.startswith("gopher_quality: dropped") for _, v in gates)
    assert f"<b>{len(gates)}</b><span>flagged chunks</span>" in page


def test_report_is_self_contained_and_about_its_version(lake: Lake, tmp_path: Path) -> None:
    latest = lake.report(tmp_path / "latest.html")
    first = lake.report(tmp_path / "first.html", version=0)
    page = latest.read_text(encoding="utf-8")
    # funnel, lengths, duplicates, throughput (no language id here: a note, no chart)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 4
    for section in (
        "Filter funnel",
        "Drop reasons",
        "PII redaction",
        "Quality gates",
        "Document length, before and after",
        "Languages",
        "Keep rate by input file",
        "Duplicate groups by size",
        "Chunk throughput over time",
        "Failures",
    ):
        assert section in page
    assert "PII redaction is not configured" in page  # no [filters]: nothing redacted
    assert "language id is not configured" in page and "unknown" not in page
    assert "no chunk outside its quality gate" in page
    # nothing outside the file: no script, no external reference of any kind
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=|url\(|@import|https?://(?!www\.w3\.org)""", page)
    (rows, kept) = lake.sql("SELECT count(*), count(*) FILTER (WHERE kept) FROM documents").rows[0]
    assert f"<b>{rows:,}</b><span>documents in</span>" in page
    assert f"{kept:,} of {rows:,} documents kept" in page
    (rows0,) = lake.at(version=0).sql("SELECT count(*) FROM documents").rows[0]
    assert f"<b>{rows0:,}</b><span>documents in</span>" in first.read_text(encoding="utf-8")
    assert "report: version 0" in first.read_text(encoding="utf-8")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless chromium with no network, no sync and a fresh profile, on ``args``."""
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,2000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# Run by the browser on a copy of the report (the report itself has no script): every pair of
# texts of one chart whose boxes, as laid out, overlap; and every chart wider than its section.
_LAYOUT_PROBE = """<script>
addEventListener('load', () => {
  const out = [];
  for (const svg of document.querySelectorAll('section svg')) {
    const title = svg.closest('section').querySelector('h2').textContent;
    const boxes = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim())
      .map(t => [t.textContent, t.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, r] = boxes[i], [b, q] = boxes[j];
      const w = Math.min(r.right, q.right) - Math.max(r.left, q.left);
      const h = Math.min(r.bottom, q.bottom) - Math.max(r.top, q.top);
      if (w > 1 && h > 1) out.push(`${title}: "${a}" overlaps "${b}"`);
    }
    const s = svg.getBoundingClientRect(), p = svg.closest('section').getBoundingClientRect();
    if (s.right > p.right + 1) out.push(`${title}: chart wider than its section`);
  }
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)"
)
@pytest.mark.parametrize(  # the default run keeps "filtered": the same sections, one chart more
    "which", [pytest.param("lake", marks=pytest.mark.slow), "filtered"]
)
def test_report_renders_in_headless_chromium(
    which: str, request: pytest.FixtureRequest, tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    lake: Lake = request.getfixturevalue(which)
    html = tmp_path / "report.html"
    proc = run_cli("report", "--lake", lake.root, "--html", html)
    assert proc.returncode == 0, proc.stderr
    shot = tmp_path / "report.png"
    result = _chromium(tmp_path, f"--screenshot={shot}", html.resolve().as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.exists()
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 30_000, "a screenshot this small is a blank page"
    log = result.stderr
    assert "Uncaught" not in log and "CONSOLE" not in log, log[-2000:]
    assert not re.search(r"net::ERR_|Failed to load resource", log), log[-2000:]
    # The charts as the browser lays them out: no label on top of another (the length
    # chart's used to overlap), no chart spilling out of its box.
    probed = tmp_path / "probed.html"
    probed.write_text(
        html.read_text(encoding="utf-8").replace("</body>", _LAYOUT_PROBE + "</body>"),
        encoding="utf-8",
    )
    result = _chromium(tmp_path, "--dump-dom", probed.resolve().as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.DOTALL)
    assert found, result.stdout[-2000:]
    assert json.loads(htmllib.unescape(found.group(1))) == []
    assert "<svg" in result.stdout  # the probe really had charts to look at


def test_report_into_the_lake_is_refused(lake: Lake, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    # D22: `report --html LAKE/state.duckdb` replaced the state with a web page.
    state = lake.root / "state.duckdb"
    before = state.read_bytes()
    proc = run_cli("report", "--lake", lake.root, "--html", state)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "inside the lake" in proc.stderr, proc.stderr
    assert state.read_bytes() == before
    link = tmp_path / "lake-link"
    link.symlink_to(lake.root)
    for target in (
        lake.root / "report.html",
        lake.root / "documents" / "kept=true" / "r.html",
        link / "r.html",
    ):
        with pytest.raises(LakeError, match="inside the lake"):
            lake.report(target)
        assert not target.exists()
    assert not list(lake.root.glob(".*tmp_*"))
    assert state.read_bytes() == before
    assert lake.sql("SELECT count(*) FROM chunks").rows[0][0] > 0
