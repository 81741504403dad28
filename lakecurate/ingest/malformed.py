"""Input files whose records are mostly malformed for one reason, told with the fix (issue 16).

Records with ``content`` instead of ``text`` used to give "0 kept" and exit 0. After an ingest,
the chunk ledger says which input files are mostly malformed (a query on the state); only for
those are the rejected rows' reasons read from the table, and one line per file and reason names
the reason, how many records it took and what to change. It is derived from what is committed,
so a resumed or repeated run says what the first one did.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from lakecurate import engine
from lakecurate.config import InputConfig
from lakecurate.lake.delta import DeltaStore
from lakecurate.lake.storage import Location
from lakecurate.store.state import StateStore

SHARE = 0.5
"""A file is reported when more than this share of its records is malformed for one reason."""

_SAMPLE = 50  # rejected records whose field names are listed ("fields seen")
_FIELDS_SHOWN = 8

# kind -> (what is wrong, what to do); {field} is [input].text_field, {kind} the kind.
_KINDS = {
    "missing_text": (
        "no `{field}` field",
        "set [input].text_field (or --text-field) to the field that holds the text",
    ),
    "text_not_string": (
        "`{field}` is not a string",
        "set [input].text_field (or --text-field) to the field that holds the text, "
        "or store the text as strings",
    ),
    "bad_json": (
        "not valid JSON",
        "the file must be JSON lines (one JSON object per line): convert it",
    ),
    "invalid_utf8": ("invalid UTF-8", "re-encode the file as UTF-8"),
    "not_object": (
        "a JSON value that is not an object",
        'each line must be one JSON object such as {{"{field}": "..."}}',
    ),
}
_OTHER = (
    "malformed:{kind}",
    'fix these records (lakecurate sql "SELECT source_line, error FROM rejects WHERE '
    "reason = 'malformed:{kind}'\")",
)


def mostly_malformed(
    state: StateStore, documents: Location, paths: Sequence[str], fields: InputConfig
) -> list[str]:
    """One line per (file, reason) that took more than ``SHARE`` of a file's committed records."""
    files = state.con.execute(
        engine.q("ingest.mostly_malformed"), {"paths": list(paths), "share": SHARE}
    ).fetchall()
    ds = DeltaStore(documents).dataset() if files else None
    if ds is None:
        return []
    lines = []
    for path, total, keys in files:
        rejected = pc.field("chunk_key").cast(pa.string()).isin(keys)
        reasons = ds.to_table(columns=["reason"], filter=rejected)["reason"].value_counts()
        for item in sorted(reasons.to_pylist(), key=lambda i: (-i["counts"], i["values"] or "")):
            reason, count = item["values"] or "", item["counts"]
            if reason.startswith("malformed:") and count > SHARE * total:
                kind = reason.removeprefix("malformed:")
                lines.append(_line(ds, rejected, path, kind, count, total, fields))
    return lines


def _line(
    ds: pds.Dataset,
    rejected: pds.Expression,
    path: str,
    kind: str,
    count: int,
    total: int,
    fields: InputConfig,
) -> str:
    """The line for one file and reason: what, how many, an example, the fix, fields seen."""
    what, fix = _KINDS.get(kind, _OTHER)
    sample = ds.head(
        _SAMPLE,
        columns=["source_line", "error", "raw"],
        filter=rejected & (pc.field("reason").cast(pa.string()) == f"malformed:{kind}"),
    ).to_pylist()
    where = "row" if path.lower().endswith(".parquet") else "line"
    example = (
        f" (e.g. {where} {sample[0]['source_line']}: {sample[0]['error']})"
        if sample and kind != "missing_text"
        else ""
    )
    wrong_field = kind in ("missing_text", "text_not_string")
    seen = _fields_seen([r["raw"] for r in sample]) if wrong_field else []
    shown = f" (fields seen: {', '.join(seen)})" if seen else ""
    return (
        f"{what.format(field=fields.text_field, kind=kind)} in {count:,} of {total:,} records "
        f"of {path}{example}; {fix.format(field=fields.text_field, kind=kind)}{shown}"
    )


def _fields_seen(raws: list[bytes | None]) -> list[str]:
    """The most common top-level field names of some rejected records (those that are objects)."""
    counts: Counter[str] = Counter()
    for raw in raws:
        try:
            obj = json.loads(raw or b"")
        except (ValueError, RecursionError):  # what was rejected may not even be JSON
            continue
        if isinstance(obj, dict):
            counts.update(obj.keys())
    return [name for name, _ in counts.most_common(_FIELDS_SHOWN)]
