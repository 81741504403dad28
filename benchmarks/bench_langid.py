"""Choose the language-id library by measurement: accuracy and documents/s on shared/data/real.

Run: /work/venv/bin/python benchmarks/bench_langid.py [--data DIR] [--max-chars 2000]
Writes benchmarks/results/bench_langid.json and prints the Markdown table of docs/langid.md.
A candidate that is not installed is reported as such, not skipped silently.
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
    args = ap.parse_args()
    if not args.data.is_dir():
        print(f"skipped: {args.data} not found")
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
