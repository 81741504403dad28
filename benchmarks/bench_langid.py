"""Choose the language-id library by measurement: accuracy and documents/s on shared/data/real.

Run: /work/venv/bin/python benchmarks/bench_langid.py [--data DIR] [--max-chars 2000]
Writes benchmarks/results/bench_langid.json and prints the Markdown table of docs/langid.md.
A candidate that is not installed is reported as such, not skipped silently.

`--coverage` (issue 17): pycld2 against lingua on every UDHR translation (387 documents, labels
ISO 639-3) and Wikipedia en/es/fr, every code compared as ISO 639-3 with individual languages
folded into their macrolanguage (`arb` -> `ara`, `cmn` -> `zho`, `nob` -> `nor`...): accuracy
(right label over every labelled document), coverage (documents whose language the detector can
name at all) and documents/s. Writes benchmarks/results/bench_langid_coverage.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

Detector = Callable[[list[str]], list[tuple[str, float]]]
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _read(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def eval_sets(data: Path) -> dict[str, list[tuple[str, str]]]:
    """(text, expected ISO 639-1) per evaluation set; UDHR keeps the languages lingua can name."""
    sets: dict[str, list[tuple[str, str]]] = {}
    for lang in ("en", "es", "fr"):
        sets[f"wikipedia_{lang}"] = [
            (d["text"], lang) for d in _read(data / f"wikipedia_vital_leads_{lang}.jsonl.gz")
        ]
    sets["fortunes_zh"] = [(d["text"], "zh") for d in _read(data / "debian_fortunes_zh.jsonl.gz")]
    en_other = []
    for name in (
        "c4_en_olmo_sample",
        "web_articles_scrapinghub_aeb",
        "nltk_rt_polarity_snippets",
        "debian_fortunes_en",
    ):
        en_other += [(d["text"], "en") for d in _read(data / f"{name}.jsonl.gz")]
    sets["english_web_reviews_fortunes"] = en_other
    try:
        from lingua import Language

        iso3 = {
            lang.iso_code_639_3.name.lower(): lang.iso_code_639_1.name.lower()
            for lang in Language.all()
        }
    except ImportError:
        iso3 = {"eng": "en", "fra": "fr", "spa": "es", "deu": "de"}
    sets["udhr"] = [
        (d["text"], iso3[d["lang"]])
        for d in _read(data / "nltk_udhr2_multilingual.jsonl.gz")
        if d["lang"] in iso3
    ]
    return sets


def _pycld2() -> Detector:
    import pycld2

    def run(texts: list[str]) -> list[tuple[str, float]]:
        out = []
        for t in texts:
            try:
                _, _, details = pycld2.detect(_CTRL.sub(" ", t))
                code, pct = details[0][1], details[0][2]
            except pycld2.error:
                code, pct = "un", 0
            out.append(("zh" if code.startswith("zh") else code, pct / 100))
        return out

    return run


def _py3langid() -> Detector:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return lambda texts: [ident.classify(t) for t in texts]


def _lingua(low: bool) -> Detector:
    from lingua import LanguageDetectorBuilder

    b = LanguageDetectorBuilder.from_all_languages()
    det = (b.with_low_accuracy_mode() if low else b).build()

    def run(texts: list[str]) -> list[tuple[str, float]]:
        out = []
        for vals in det.compute_language_confidence_values_in_parallel(texts):
            top = vals[0]
            out.append((top.language.iso_code_639_1.name.lower(), top.value))
        return out

    return run


def _gcld3() -> Detector:
    import gcld3

    det = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=4000)

    def run(texts: list[str]) -> list[tuple[str, float]]:
        res = [det.FindLanguage(text=t) for t in texts]
        return [("zh" if r.language.startswith("zh") else r.language, r.probability) for r in res]

    return run


# Individual languages folded into the macrolanguage a detector names (ISO 639-3 tables).
_MACRO = {
    "arb": "ara", "arz": "ara", "pes": "fas", "prs": "fas", "cmn": "zho", "yue": "zho",
    "azj": "aze", "azb": "aze", "uzn": "uzb", "khk": "mon", "als": "sqi", "ekk": "est",
    "zlm": "msa", "zsm": "msa", "mly": "msa", "lvs": "lav", "swh": "swa", "ydd": "yid",
    "plt": "mlg", "gaz": "orm", "hae": "orm", "quz": "que", "quy": "que", "qug": "que",
    "nob": "nor", "nno": "nor", "kmr": "kur", "ckb": "kur", "ayr": "aym", "gug": "grn",
    "kng": "kon", "fuc": "ful", "fuf": "ful", "knc": "kau",
}  # fmt: skip
# pycld2 codes that are not ISO 639-1/3 as such.
_CLD2 = {"iw": "heb", "jw": "jav", "in": "ind", "ji": "yid", "mo": "ron", "bh": "bih"}


def iso3(code: str | None) -> str | None:
    """An ISO 639-1 or 639-3 code (or pycld2's) as ISO 639-3, macrolanguage-folded; None for
    'unknown'."""
    import pycountry

    if not code or code in ("un", "zzp") or code.startswith("xx-"):
        return None
    code = code.split("-")[0].lower()
    if code in _CLD2:
        return _CLD2[code]
    if len(code) == 2:
        found = pycountry.languages.get(alpha_2=code)
        code = found.alpha_3 if found else code
    return _MACRO.get(code, code)


def coverage_sets(data: Path) -> dict[str, list[tuple[str, str]]]:
    """(text, ISO 639-3 label) per set: every UDHR translation with a language code (the five
    numbered files have none), Wikipedia en/es/fr."""
    sets = {
        f"wikipedia_{lang}": [
            (d["text"], code) for d in _read(data / f"wikipedia_vital_leads_{lang}.jsonl.gz")
        ]
        for lang, code in (("en", "eng"), ("es", "spa"), ("fr", "fra"))
    }
    udhr = _read(data / "nltk_udhr2_multilingual.jsonl.gz")
    sets["udhr"] = [
        (d["text"], _MACRO.get(d["lang"].split("_")[0], d["lang"].split("_")[0]))
        for d in udhr
        if not d["lang"][:3].isdigit()
    ]
    return sets


def _known_languages() -> dict[str, set[str]]:
    """The ISO 639-3 codes (folded) each detector can return."""
    import pycld2
    from lingua import Language

    codes = dict(pycld2.LANGUAGES)
    cld2 = {iso3(codes[n]) for n in pycld2.DETECTED_LANGUAGES if n in codes}
    ling = {_MACRO.get(x, x) for x in (lg.iso_code_639_3.name.lower() for lg in Language.all())}
    return {"pycld2": {c for c in cld2 if c}, "lingua": ling}


def _lingua3(low: bool) -> Detector:
    """lingua with its ISO 639-3 codes (it names nob/nno apart, 639-1 has no code for some)."""
    from lingua import LanguageDetectorBuilder

    b = LanguageDetectorBuilder.from_all_languages()
    det = (b.with_low_accuracy_mode() if low else b).build()

    def run(texts: list[str]) -> list[tuple[str, float]]:
        return [
            (vals[0].language.iso_code_639_3.name.lower(), vals[0].value)
            for vals in det.compute_language_confidence_values_in_parallel(texts)
        ]

    return run


def _second_opinion(first: Detector, second: Detector) -> Detector:
    """``first``, and ``second`` for the texts ``first`` cannot name (pycld2's ``un``)."""

    def run(texts: list[str]) -> list[tuple[str, float]]:
        out = first(texts)
        unsure = [i for i, (code, _) in enumerate(out) if iso3(code) is None]
        for i, guess in zip(unsure, second([texts[i] for i in unsure]), strict=True):
            out[i] = guess
        return out

    return run


def coverage(data: Path, max_chars: int, out: Path) -> None:
    """The accuracy/coverage/speed table of docs/langid.md ("Coverage")."""
    sets = coverage_sets(data)
    known = _known_languages()
    known["both"] = known["pycld2"] | known["lingua"]
    detectors = {
        "pycld2": ("pycld2", _pycld2()),
        "lingua (high accuracy)": ("lingua", _lingua3(False)),
        "lingua (low accuracy)": ("lingua", _lingua3(True)),
        "pycld2, then lingua (high) where pycld2 says un": (
            "both",
            _second_opinion(_pycld2(), _lingua3(False)),
        ),
    }
    results: dict[str, dict[str, object]] = {}
    for name, (family, detect) in detectors.items():
        row: dict[str, object] = {}
        n_all = secs_all = 0.0
        for set_name, docs in sets.items():
            texts = [t[:max_chars] for t, _ in docs]
            t0 = time.perf_counter()
            pred = [iso3(code) for code, _ in detect(texts)]
            secs = time.perf_counter() - t0
            labels = [label for _, label in docs]
            row[set_name] = {
                "docs": len(docs),
                "accuracy": sum(p == e for p, e in zip(pred, labels, strict=True)) / len(docs),
                "coverage": sum(e in known[family] for e in labels) / len(docs),
                "unknown": sum(p is None for p in pred) / len(docs),
                "languages": len(set(labels)),
                "languages_covered": len(set(labels) & known[family]),
            }
            n_all += len(docs)
            secs_all += secs
        row["docs_per_s"] = n_all / secs_all
        row["languages_known"] = len(known[family])
        results[name] = row
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"max_chars": max_chars, "results": results}, indent=2))
    cols = list(sets)
    print("accuracy / coverage / unknown, per set")
    print("| detector | languages it names | " + " | ".join(cols) + " | docs/s |")
    print("|---" * (len(cols) + 3) + "|")
    for name, row in results.items():
        cells = []
        for c in cols:
            r = row[c]
            assert isinstance(r, dict)
            cells.append(
                f"{100 * r['accuracy']:.1f}% / {100 * r['coverage']:.1f}% / "
                f"{100 * r['unknown']:.1f}%"
                + (f" ({r['languages_covered']} of {r['languages']})" if c == "udhr" else "")
            )
        print(
            f"| {name} | {row['languages_known']} | "
            + " | ".join(cells)
            + f" | {float(row['docs_per_s']):,.0f} |"  # type: ignore[arg-type]
        )


CANDIDATES: dict[str, Callable[[], Detector]] = {
    "pycld2": _pycld2,
    "py3langid": _py3langid,
    "lingua (high accuracy)": lambda: _lingua(False),
    "lingua (low accuracy)": lambda: _lingua(True),
    "gcld3": _gcld3,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--data",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "data" / "real",
    )
    ap.add_argument("--max-chars", type=int, default=2000)
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "bench_langid.json"
    )
    ap.add_argument("--coverage", action="store_true", help="pycld2 vs lingua, every UDHR text")
    args = ap.parse_args()
    if not args.data.is_dir():
        print(f"skipped: {args.data} not found")
        return
    if args.coverage:
        coverage(args.data, args.max_chars, args.out.with_name("bench_langid_coverage.json"))
        return
    sets = eval_sets(args.data)
    results: dict[str, dict[str, object]] = {}
    for name, make in CANDIDATES.items():
        try:
            detect = make()
        except ImportError as exc:
            results[name] = {"error": f"not installed: {exc}"}
            continue
        row: dict[str, object] = {}
        n_all = secs_all = 0.0
        for set_name, docs in sets.items():
            texts = [t[: args.max_chars] for t, _ in docs]
            t0 = time.perf_counter()
            pred = detect(texts)
            secs = time.perf_counter() - t0
            hits = sum(p == e for (p, _), (_, e) in zip(pred, docs, strict=True))
            row[set_name] = hits / len(docs)
            n_all += len(docs)
            secs_all += secs
        row["docs_per_s"] = n_all / secs_all
        results[name] = row
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "max_chars": args.max_chars,
                "sizes": {k: len(v) for k, v in sets.items()},
                "results": results,
            },
            indent=2,
        )
    )
    cols = list(sets)
    print("| library | " + " | ".join(f"{c} (n={len(sets[c])})" for c in cols) + " | docs/s |")
    print("|---" * (len(cols) + 2) + "|")
    for name, row in results.items():
        if "error" in row:
            print(f"| {name} | {row['error']} |")
            continue
        accs = " | ".join(
            f"{100 * float(row[c]):.1f}%"  # type: ignore[arg-type]
            for c in cols
        )
        print(f"| {name} | {accs} | {float(row['docs_per_s']):,.0f} |")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
