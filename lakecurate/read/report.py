"""``report --html FILE``: one self-contained page about one version of the lake.

A person should rather look at this than read tables: the filter funnel (rows in and out of
every step), drop reasons with the rules that failed and their measured values, PII redactions
per type, chunks outside a quality gate, document lengths before and after curation,
languages, duplicate group sizes, chunk throughput over time, and failures. Everything is
inline (CSS and SVG, no script, no font, no network), so the file can be mailed, archived next
to a training run, or opened in a browser with no access to anything.
Numbers come from the same SQL surface as ``lakecurate sql`` (``sql/report/``), commit times
from the Delta log.
"""

from __future__ import annotations

import datetime
import html
import math
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lakecurate import __version__, engine
from lakecurate.lake import atomic
from lakecurate.lake.delta import DeltaStore, utc_text
from lakecurate.lake.storage import Location
from lakecurate.read import history, query
from lakecurate.store.state import SNAPSHOT_TABLES

_W = 640  # chart width in px
_COLORS = {
    "before": "#b8c2cc",
    "after": "#2b6cb0",
    "drop": "#e07a5f",
    "near": "#81b29a",
    "exact": "#3d5a80",
    "line": "#2b6cb0",
}
_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
color:#1a202c;background:#f4f6f8}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:18px;margin:0 0 10px}
.sub{color:#4a5568;margin-bottom:20px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:20px}
.card{background:#fff;border-radius:8px;padding:12px 16px;min-width:130px;
box-shadow:0 1px 2px rgba(0,0,0,.08)}
.card b{display:block;font-size:24px}.card span{color:#4a5568;font-size:13px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(540px,1fr));gap:16px}
section{background:#fff;border-radius:8px;padding:16px;box-shadow:0 1px 2px rgba(0,0,0,.08);
overflow-x:auto}section.wide{grid-column:1/-1}
svg{display:block;max-width:100%;height:auto}svg text{font-size:12px;fill:#2d3748}
.note{color:#4a5568;font-size:13px;margin:6px 0 0}
table{border-collapse:collapse;width:100%;font-size:13px}
td,th{text-align:left;padding:4px 6px;border-bottom:1px solid #e2e8f0}
.ok{color:#2f855a;font-weight:600}.legend i{display:inline-block;width:10px;height:10px;
margin:0 4px 0 12px;border-radius:2px}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(n: float) -> str:
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def hbars(items: Sequence[tuple[str, float, str]], color: str = _COLORS["after"]) -> str:
    """Horizontal bars: (label, value, note after the bar)."""
    if not items:
        return '<p class="note">nothing to show</p>'
    top = max(v for _, v, _ in items) or 1
    # Room after the longest bar for the longest note (~7 px a character at 12 px).
    note_w = max(150, 7 * max(len(n) for _, _, n in items) + 12)
    label_w, bar_w, row_h = 170, _W - 170 - note_w, 26
    parts = [f'<svg viewBox="0 0 {_W} {row_h * len(items) + 6}" role="img">']
    for i, (label, value, note) in enumerate(items):
        y = i * row_h + 3
        w = max(value / top * bar_w, 1 if value else 0)
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">{_e(label)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" '
            f'rx="3" fill="{color}"><title>{_e(label)}: {_num(value)}</title></rect>'
            f'<text x="{label_w + w + 6:.1f}" y="{y + 16}">{_e(note)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _ticks(top: float, log: bool) -> list[tuple[float, float]]:
    """(value, fraction of the plot's height) of the y-axis lines: 0, half and top, or the
    powers of ten up to ``top`` on a log scale."""
    if not log:
        return [(round(top * f) if top > 10 else top * f, f) for f in (0, 0.5, 1)]
    out, t = [], 1.0
    while t <= top:
        out.append((t, _height(t, top, log)))
        t *= 10
    if not out or out[-1][1] < 0.85:  # the top too, when the last power of ten is well below it
        out.append((top, 1.0))
    return out


def _height(value: float, top: float, log: bool) -> float:
    """A value's bar height as a fraction of the plot's (log: log(1 + v), so 1 still shows)."""
    if log:
        return math.log1p(max(value, 0)) / math.log1p(top)
    return value / top


def vbars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    x_title: str = "",
    y_title: str = "",
    log: bool = False,
) -> str:
    """Grouped vertical bars: one group per label, one bar per series (legend below); with
    ``log``, heights on a log scale (a few large groups would flatten the others)."""
    if not labels:
        return '<p class="note">nothing to show</p>'
    height, left, bottom, top_pad = 230, 56, 44, 10
    plot_w, plot_h = _W - left - 10, height - bottom - top_pad
    top = max((v for vals in series.values() for v in vals), default=1) or 1
    group_w = plot_w / len(labels)
    bar_w = max(group_w * 0.8 / len(series), 1)
    # Every k-th label, k such that the widest label (~7 px a character at 12 px) fits.
    every = math.ceil((max(len(x) for x in labels) * 7 + 8) / group_w)
    parts = [f'<svg viewBox="0 0 {_W} {height}" role="img">']
    for value, frac in _ticks(top, log):
        y = top_pad + plot_h * (1 - frac)
        parts.append(
            f'<line x1="{left}" x2="{_W - 10}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#e2e8f0"/><text x="{left - 6}" y="{y + 4:.1f}" '
            f'text-anchor="end">{_num(value)}</text>'
        )
    for g, label in enumerate(labels):
        x0 = left + g * group_w + group_w * 0.1
        for s, (name, vals) in enumerate(series.items()):
            h = _height(vals[g], top, log) * plot_h
            parts.append(
                f'<rect x="{x0 + s * bar_w:.1f}" y="{top_pad + plot_h - h:.1f}" '
                f'width="{bar_w - 1:.1f}" height="{h:.1f}" '
                f'fill="{_COLORS.get(name, "#718096")}"><title>{_e(name)} {_e(label)}'
                f": {_num(vals[g])}</title></rect>"
            )
        if g % every == 0:
            parts.append(
                f'<text x="{left + (g + 0.5) * group_w:.1f}" y="{height - bottom + 16}"'
                f' text-anchor="middle">{_e(label)}</text>'
            )
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle">'
        f'{_e(x_title)}</text><text x="12" y="{top_pad + plot_h / 2:.1f}" '
        f'transform="rotate(-90 12 {top_pad + plot_h / 2:.1f})" text-anchor="middle">'
        f"{_e(y_title)}</text></svg>"
    )
    legend = "".join(
        f'<i style="background:{_COLORS.get(n, "#718096")}"></i>{_e(n)}' for n in series
    )
    return "".join(parts) + f'<p class="note legend">{legend}</p>'


def line(points: Sequence[tuple[float, float]], x_labels: tuple[str, str], y_title: str) -> str:
    """A line with its area filled: (x, y) points, x ascending."""
    if len(points) < 2:
        return '<p class="note">one commit: nothing to plot over time</p>'
    height, left, bottom, top_pad = 220, 64, 36, 10
    plot_w, plot_h = _W - left - 14, height - bottom - top_pad
    x0, x1 = points[0][0], points[-1][0]
    top = max(y for _, y in points) or 1
    span = (x1 - x0) or 1
    xy = [(left + (x - x0) / span * plot_w, top_pad + plot_h * (1 - y / top)) for x, y in points]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    base = top_pad + plot_h
    return (
        f'<svg viewBox="0 0 {_W} {height}" role="img">'
        f'<line x1="{left}" x2="{_W - 14}" y1="{base}" y2="{base}" stroke="#cbd5e0"/>'
        f'<polygon points="{left},{base} {path} {xy[-1][0]:.1f},{base}" fill="#bee3f8"/>'
        f'<polyline points="{path}" fill="none" stroke="{_COLORS["line"]}" '
        f'stroke-width="2"/><text x="{left - 6}" y="{top_pad + 8}" text-anchor="end">'
        f'{_num(top)}</text><text x="{left - 6}" y="{base}" text-anchor="end">0</text>'
        f'<text x="{left}" y="{height - 10}">{_e(x_labels[0])}</text>'
        f'<text x="{_W - 14}" y="{height - 10}" text-anchor="end">{_e(x_labels[1])}</text>'
        f'<text x="12" y="{top_pad + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {top_pad + plot_h / 2:.1f})">{_e(y_title)}</text></svg>'
    )


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


_WIDE = {"Keep rate by input file"}  # sections with a table too wide for half the page
_NOT_IDENTIFIED = "(not identified: dropped earlier)"  # the by_language row of no language


def _compact(n: int) -> str:
    """1, 512, 1K, 64K, 1M: a power of two short enough for an axis label."""
    for unit, size in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= size:
            return f"{n / size:g}{unit}"
    return str(n)


def _group_sizes(clusters: Sequence[tuple[Any, ...]]) -> tuple[list[str], dict[str, list[float]]]:
    """Duplicate groups per size, for the chart: every size when there are at most 16, else
    sizes binned in powers of two (2-3, 4-7, ...) so that no bar is too thin to see."""
    sizes = sorted({int(s) for _, s, _ in clusters})
    if len(sizes) <= 16:
        bins = [(z, z) for z in sizes]
    else:
        top = max(sizes).bit_length()
        bins = [(2**b, 2 ** (b + 1) - 1) for b in range(1, top)]
        bins = [(lo, hi) for lo, hi in bins if any(lo <= z <= hi for z in sizes)]
    labels = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in bins]
    by_kind = {
        k: [
            float(sum(int(g) for kk, z, g in clusters if kk == k and lo <= int(z) <= hi))
            for lo, hi in bins
        ]
        for k in ("exact", "near")
        if any(c[0] == k for c in clusters)
    }
    return labels, by_kind


def _funnel(total: int, steps: Sequence[tuple[str, int]]) -> str:
    """Documents left after each step (blue), and what the step dropped (orange)."""
    if not total:
        return '<p class="note">no documents</p>'
    label_w, bar_w, row_h = 170, _W - 170 - 150, 26
    parts = [f'<svg viewBox="0 0 {_W} {row_h * (len(steps) + 1) + 6}" role="img">']
    left = total
    for i, (step, n) in enumerate([("input documents", 0), *steps]):
        left -= n
        y, w, d = i * row_h + 3, left / total * bar_w, n / total * bar_w
        note = f"{left:,}" if i == 0 else f"{left:,} left, −{n:,}"
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">{_e(step)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" '
            f'fill="{_COLORS["after"]}"><title>{_e(step)}: {left:,} left</title></rect>'
            f'<rect x="{label_w + w:.1f}" y="{y + 3}" width="{d:.1f}" '
            f'height="{row_h - 8}" fill="{_COLORS["drop"]}"><title>{_e(step)}: '
            f"{n:,} dropped</title></rect>"
            f'<text x="{label_w + w + d + 6:.1f}" y="{y + 16}">{_e(note)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _funnel_rows(total: int, steps: Sequence[tuple[str, int]]) -> list[tuple[str, ...]]:
    """(step, docs in, docs out, dropped, share of the step's input) in pipeline order."""
    out: list[tuple[str, ...]] = []
    left = total
    for step, n in steps:
        share = f"{n / left:.2%}" if left else "-"
        out.append((step, f"{left:,}", f"{left - n:,}", f"{n:,}", share))
        left -= n
    return out


def _measured(lo: float | None, hi: float | None, words: Sequence[str] | None) -> str:
    """The measured values of one rule: a numeric range, or a few of the values."""
    if lo is not None and hi is not None:
        return _num(lo) if lo == hi else f"{lo:g} .. {hi:g}"
    return ", ".join(str(w) for w in words or []) or "-"


def _throughput(entries: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """Cumulative documents committed over time, and a sentence on the rate."""
    appends = [e for e in entries if e["operation"] == "APPEND"]
    if not appends:
        return '<p class="note">no chunk commits in this version</p>', ""
    t0 = appends[0]["timestamp"]
    points, total = [(0.0, 0.0)], 0
    for e in appends:
        total += e["rows_added"]
        points.append(((e["timestamp"] - t0).total_seconds(), float(total)))
    secs = points[-1][0]
    first = t0.strftime("%Y-%m-%d %H:%M:%S")
    last = appends[-1]["timestamp"].strftime("%Y-%m-%d %H:%M:%S UTC")
    rate = f"{len(appends):,} chunk commits, {total:,} documents between {first} and {last}" + (
        f": {len(appends) / secs * 60:,.1f} chunks/min, {total / secs:,.0f} documents/s "
        "while committing"
        if secs > 0
        else ""
    )
    return line(points, (first, last), "documents committed"), rate


def render(state: Path, documents: Location, version: int | None) -> str:
    """The report page as a string."""
    con = query.open_reader(state, documents, version, tables=SNAPSHOT_TABLES)
    try:

        def run(name: str) -> list[tuple[Any, ...]]:
            return query.run(con, engine.q(f"report.{name}")).rows

        (rows, kept, dropped, malformed, chunks, sources, chars, hashes) = run("summary")[0]
        funnel = [(str(s), int(n)) for s, n in run("funnel")]
        langs = query.run(con, engine.q("report.by_language"), {"limit": 13}).rows
        by_file = query.shorten_paths(
            query.run(con, engine.q("report.by_file"), {"limit": 30}), "file"
        )
        clusters = run("clusters")
        found = {int(b): (int(x), int(y)) for b, x, y in run("lengths")}
        lengths = [
            (b, *found.get(b, (0, 0)))
            for b in range(min(found, default=0), max(found, default=-1) + 1)
        ]
        failures, (failed_attempts, went_dead) = run("failures"), run("failure_events")[0]
        reasons, redactions, flagged = run("reasons"), run("redactions"), run("flagged")
    finally:
        con.close()
    delta = DeltaStore(documents)
    entries = [e for e in delta.log_entries() if version is None or int(e["version"]) <= version]
    log = history.log_rows(delta, entries)
    shown = log[-1]["version"] if log else None
    when = utc_text(int(entries[-1]["timestamp"])) if entries else "no commits yet"
    chart, rate = _throughput(log)
    size_labels, by_kind = _group_sizes(clusters)
    lang_items = [
        (str(lg), float(k), f"{k:,} kept of {n:,} ({pct}%)")
        for lg, n, k, pct in langs[:12]
        if lg != _NOT_IDENTIFIED
    ]
    unidentified = sum(int(n) for lg, n, _, _ in langs if lg == _NOT_IDENTIFIED)
    n_flagged = int(flagged[0][2]) if flagged else 0
    n_redacted = sum(int(m) for _, m, _, _ in redactions)
    cards = [
        ("documents in", rows),
        ("kept", kept),
        ("dropped", dropped),
        ("malformed", malformed),
        ("chunks", chunks),
        ("source files", sources),
        ("kept characters", chars),
        ("PII matches redacted", n_redacted),
        ("flagged chunks", n_flagged),
    ]
    fail_html = (
        _table(["chunk", "status", "attempts", "last error"], failures)
        if failures
        else '<p class="ok">no failed or dead chunks</p>'
    )
    funnel_html = _funnel(int(rows), funnel) + (
        _table(
            ["step", "docs in", "docs out", "dropped", "% of step input"],
            _funnel_rows(int(rows), funnel),
        )
        if rows
        else ""
    )
    reason_html = (
        _table(
            ["reason", "rule", "documents", "measured value(s)"],
            [(r, rule or "-", f"{n:,}", _measured(lo, hi, w)) for r, rule, n, lo, hi, w in reasons],
        )
        if reasons
        else '<p class="ok">no document dropped</p>'
    )
    pii_html = (
        _table(
            ["type", "matches redacted", "chunks with a match", "documents dropped"],
            [(k, f"{m:,}", f"{c:,}", f"{d:,}") for k, m, c, d in redactions],
        )
        if redactions
        else '<p class="note">PII redaction is not configured</p>'
    )
    gate_html = (
        _table(["chunk", "gate violations"], [(k, v) for k, v, _ in flagged])
        if flagged
        else '<p class="ok">no chunk outside its quality gate</p>'
    )
    sections = [
        (
            "Filter funnel",
            funnel_html,
            f"{kept:,} of {rows:,} documents kept ({kept / rows:.1%})." if rows else "",
        ),
        (
            "Drop reasons",
            reason_html,
            "Every dropped row by its reason and the first rule that failed (from detail), with "
            "the range of the values measured.",
        ),
        (
            "PII redaction",
            pii_html,
            "Matches replaced in the documents kept (tag or hash), and documents a drop "
            "strategy dropped, per type.",
        ),
        (
            "Quality gates",
            gate_html,
            f"{n_flagged:,} chunk(s) of this version outside a [gates] bound"
            + (" (first 50 shown)." if n_flagged > len(flagged) else "."),
        ),
        (
            "Document length, before and after",
            vbars(
                [_compact(2 ** int(b)) for b, _, _ in lengths],
                {
                    "before": [float(x) for _, x, _ in lengths],
                    "after": [float(x) for _, _, x in lengths],
                },
                x_title="characters (at least)",
                y_title="documents",
            ),
            "Every parsed document (before) and the kept ones (after), by length.",
        ),
        (
            "Languages (kept documents)",
            hbars(lang_items)
            if lang_items
            else '<p class="note">language id is not configured</p>',
            (
                f"{unidentified:,} document(s) were dropped before language id ran (malformed, "
                "or by a step listed before it): they have no language and are not counted here."
                if unidentified and lang_items
                else ""
            ),
        ),
        (
            "Keep rate by input file",
            _table(
                ["file", "documents", "kept", "% kept", "most common drop reason"],
                [(f, f"{n:,}", f"{k:,}", f"{p}%", r or "-") for f, n, k, p, r in by_file.rows],
            )
            if by_file.rows
            else '<p class="note">no documents</p>',
            "The lowest share kept first"
            + (f" (first {len(by_file.rows)} of {sources:,} files)." if sources > 30 else "."),
        ),
        (
            "Duplicate groups by size",
            vbars(
                size_labels,
                by_kind,
                x_title="documents in the group",
                y_title="groups (log scale)",
                log=True,
            )
            if size_labels
            else '<p class="note">no duplicates</p>',
            "Exact: a kept document and its copies; near: a near-duplicate cluster of two or "
            "more documents (a document near no other is not a group).",
        ),
        ("Chunk throughput over time", chart, rate),
        (
            "Failures",
            fail_html,
            f"{failed_attempts:,} failed attempt(s) in the lake's history, "
            f"{went_dead:,} chunk(s) went DEAD; state as of now.",
        ),
    ]
    body = "".join(
        ('<section class="wide">' if t in _WIDE else "<section>")
        + f"<h2>{_e(t)}</h2>{svg}"
        + (f'<p class="note">{_e(n)}</p>' if n else "")
        + "</section>"
        for t, svg, n in sections
    )
    card_html = "".join(
        f'<div class="card"><b>{_num(float(v))}</b><span>{_e(k)}</span></div>' for k, v in cards
    )
    made = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"lakecurate report: version {shown}" if shown is not None else "lakecurate report"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>"
        f'<h1>{_e(title)}</h1><div class="sub">{_e(posixpath.dirname(documents.uri))}'
        f" · committed {when}"
        f" · config {_e(hashes or '-')} · made {made} by lakecurate {__version__}</div>"
        f'<div class="cards">{card_html}</div><div class="grid">{body}</div>'
        f"</main></body></html>\n"
    )


def write_report(state: Path, documents: Location, version: int | None, out: Path) -> Path:
    """Render the report and write it atomically to ``out``; returns ``out``. A path inside
    the lake is refused (``report --html LAKE/state.duckdb`` must not replace the state)."""
    query.refuse_inside(out, state.parent, "the report")
    text = render(state, documents, version)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out, text, hidden=True)
    return out
