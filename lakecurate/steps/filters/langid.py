"""Language identification as a vectorised Arrow UDF for DuckDB (library chosen in docs/langid.md).

pycld2 is a C library: one call per document is unavoidable, but it runs at ~50,000 documents/s,
so the per-call overhead is what it is. Control characters are blanked first because pycld2
rejects some of them as invalid UTF-8. The codes are pycld2's own: ``lc_lang_code``
(sql/filters/langid.sql) makes them BCP-47, in SQL, where the lake's rule version is known.
"""

from __future__ import annotations

import re

import pyarrow as pa

LIBRARY = "pycld2"
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
RESULT_TYPE = pa.struct([("lang", pa.string()), ("score", pa.float64())])


def detect(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """{lang (pycld2's code, 'un' if unknown), score (share of the text in that language,
    0..1)} for each text; NULL for a NULL text."""
    import pycld2

    langs: list[str | None] = []
    scores: list[float | None] = []
    for text in texts.to_pylist():
        if text is None:
            langs.append(None)
            scores.append(None)
            continue
        try:
            _, _, details = pycld2.detect(_CTRL.sub(" ", text))
            code, pct = details[0][1], details[0][2]
        except pycld2.error:
            code, pct = "un", 0
        langs.append(code)
        scores.append(pct / 100)
    return pa.StructArray.from_arrays(
        [pa.array(langs, pa.string()), pa.array(scores, pa.float64())], fields=list(RESULT_TYPE)
    )
