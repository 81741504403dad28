"""Which files an ingest reads (design section 4): inputs discovered, lakes refused, files that are
not read listed by kind. How each file is cut into chunks is ``ingest.cutting``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lakecurate.errors import InputError
from lakecurate.ingest.cutting import detect_format
from lakecurate.lake.paths import LakePaths
from lakecurate.types import Format

READS = "JSON lines (.jsonl, .ndjson, .json.gz; plain or .gz, .zst, .bz2, .xz) and .parquet"

# Why a file below an input folder was not read (``Inputs.skipped`` keys, in the order shown).
SKIP_UNSUPPORTED = "unsupported"
SKIP_HIDDEN = "hidden"
SKIP_EMPTY = "empty"
_SKIP_WHY = {
    SKIP_UNSUPPORTED: f"not a format lakecurate reads (it reads {READS})",
    SKIP_HIDDEN: "hidden (the name starts with '.'); name one on the command line to read it",
    SKIP_EMPTY: "empty file (0 bytes), no records",
}
_EXAMPLES = 5


def _extension(path: str) -> str:
    """How a skipped file's name ends, for the summary: ``.txt``, ``.json``, ``no extension``."""
    name = os.path.basename(path).lstrip(".")
    return "." + name.rsplit(".", 1)[1].lower() if "." in name else "no extension"


def _hint(path: str) -> str:
    """What to do with a plain ``.json`` (see ``_SUFFIXES``), else nothing."""
    json_file = _extension(path) == ".json"
    return "; rename a .json holding one JSON object per line to .jsonl" if json_file else ""


def skipped_lines(skipped: dict[str, list[str]]) -> list[str]:
    """One line per kind of skipped file: how many, why, and a few of them."""
    lines = []
    for kind, why in _SKIP_WHY.items():
        paths = sorted(skipped.get(kind, []))
        if not paths:
            continue
        counts: dict[str, int] = {}
        for p in paths:
            counts[_extension(p)] = counts.get(_extension(p), 0) + 1
        what = (
            " (" + ", ".join(f"{n} {e}" for e, n in sorted(counts.items())) + ")"
            if kind == SKIP_UNSUPPORTED
            else ""
        )
        more = f" and {len(paths) - _EXAMPLES:,} more" if len(paths) > _EXAMPLES else ""
        hint = _hint("x.json") if ".json" in counts else ""
        lines.append(
            f"skipped {len(paths):,} file(s){what}: {why}{hint}: "
            + ", ".join(paths[:_EXAMPLES])
            + more
        )
    return lines


def _bad_name(path: str) -> str | None:
    """Why a path cannot be ingested by name, or None.

    A name that is not valid UTF-8 comes back from the OS with surrogate escapes; DuckDB and
    Arrow refuse such strings, so before this check one such file crashed the whole ingest.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return f"{shown}: the file name is not valid UTF-8; rename the file and re-run"
    return None


def is_lake(folder: str) -> bool:
    """A lakecurate lake, or a Delta table (a lake's ``documents/``, or anyone's)."""
    lake = LakePaths(Path(folder))
    return os.path.isdir(os.path.join(folder, "_delta_log")) or (
        lake.state.is_file() and os.path.isdir(lake.documents.uri)
    )


def _inside_lake(path: str, lake: str | None) -> str | None:
    """The lake or Delta table that ``path`` is in (or is), if any."""
    parts = path
    while True:
        if (lake is not None and parts == lake) or (os.path.isdir(parts) and is_lake(parts)):
            return parts
        parent = os.path.dirname(parts)
        if parent == parts:
            return None
        parts = parent


@dataclass
class Inputs:
    """The inputs of one ingest, discovered once: what was given, the files found with their
    formats, and what was skipped (``problems``: unreadable entries; ``notes``: lakes;
    ``skipped``: files below a folder that are not read, by kind: ``SKIP_*``)."""

    given: list[str]
    files: list[tuple[str, Format]]
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)


def find_inputs(given: Sequence[str], lake: Path | None) -> Inputs:
    """Discover ``given`` for an ingest into ``lake``; raises InputError for a bad path."""
    found = Inputs(list(given), [])
    found.files = discover(
        found.given, found.problems, lake=lake, notes=found.notes, skipped=found.skipped
    )
    return found


def discover(
    inputs: Iterable[str | Path],
    problems: list[str] | None = None,
    *,
    lake: Path | None = None,
    notes: list[str] | None = None,
    skipped: dict[str, list[str]] | None = None,
) -> list[tuple[str, Format]]:
    """Expand files and folders into (absolute path, format), sorted, without following links.

    A folder contributes every file with a known suffix; a file named explicitly must have one.
    The other files of a folder, and its hidden files and folders (names starting with '.':
    ``.git``, macOS's ``._x.jsonl``), are not read; when ``skipped`` is given they are listed
    there by kind, so that none vanishes without a word (issue 16).
    An entry of a folder that has a known suffix but cannot be read as a file (a broken link, a
    symlink loop, a FIFO, a name that is not UTF-8) is skipped, and when ``problems`` is given a
    message naming it is added there: it must never vanish without a word (issue 7).

    A lake is never input: an input inside ``lake`` or any other lake (a folder with
    ``state.duckdb`` and ``documents/``, or a Delta table) is refused, and such folders below
    an input folder are skipped with a note (issue 12, D10: `ingest .` with the lake inside
    the input read the lake's own data files on every run).
    """
    inputs = list(inputs)  # iterated twice: a generator would leave the error message empty
    found: dict[str, Format] = {}
    skipped = {} if skipped is None else skipped
    own = os.path.abspath(lake) if lake is not None else None
    for raw in inputs:
        path = os.path.abspath(os.fspath(raw))
        if (why := _bad_name(path)) is not None:
            raise InputError(why)
        if (inside := _inside_lake(path, own)) is not None:
            raise InputError(
                f"{raw}: is inside the lake or Delta table {inside}; a lake is "
                "never read as input (export a version to read its documents)"
            )
        if os.path.isdir(path):
            for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
                lakes = [
                    d
                    for d in dirnames
                    if os.path.join(dirpath, d) == own or is_lake(os.path.join(dirpath, d))
                ]
                for name in lakes:
                    dirnames.remove(name)
                    if notes is not None:
                        notes.append(f"{os.path.join(dirpath, name)}: a lake, not read as input")
                for name in [d for d in dirnames if d.startswith(".")]:
                    dirnames.remove(name)
                    skipped.setdefault(SKIP_HIDDEN, []).append(os.path.join(dirpath, name, ""))
                dirnames.sort()
                for name in sorted(filenames):
                    full = os.path.join(dirpath, name)
                    fmt = detect_format(full)
                    skip = SKIP_HIDDEN if name.startswith(".") else SKIP_UNSUPPORTED
                    if name.startswith(".") or not fmt:
                        skipped.setdefault(skip, []).append(full)
                        continue
                    why = _bad_name(full)
                    if why is None and not os.path.isfile(full):
                        kind = (
                            "a broken link or a symlink loop"
                            if os.path.islink(full)
                            else "not a regular file"
                        )
                        why = f"{full}: {kind}; skipped"
                    if why is None:
                        found[full] = fmt
                    elif problems is not None:
                        problems.append(why)
        elif os.path.isfile(path):
            fmt = detect_format(path)
            if fmt is None:
                raise InputError(
                    f"{raw}: unknown input format; lakecurate reads {READS} files{_hint(path)}"
                )
            found[path] = fmt
        elif os.path.lexists(path):
            raise InputError(f"{raw}: not a readable file or folder (broken link?)")
        else:
            raise InputError(f"{raw}: no such file or folder")
    if not found:
        seen = ", ".join(f"{len(v):,} {k}" for k, v in sorted(skipped.items()))
        raise InputError(
            f"no input files found in {', '.join(map(str, inputs))}"
            + (f" (skipped: {seen})" if seen else "")
            + f"; lakecurate reads {READS}"
        )
    return sorted(found.items())
