"""Which files an ingest reads (design section 4): inputs discovered, lakes refused, files that are
not read listed by kind. How each file is cut into chunks is ``ingest.cutting``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from lakecurate.errors import InputError, LakeError, one_line
from lakecurate.ingest.cutting import detect_format
from lakecurate.lake.paths import LakePaths
from lakecurate.lake.storage import Location, is_uri
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


class FileStat(NamedTuple):
    """What the stat cache compares: size, modification time and inode (0 on object storage,
    where an object is replaced whole and gets a new modification time)."""

    st_size: int
    st_mtime_ns: int
    st_ino: int


def stat_input(path: str) -> FileStat:
    """The stat of an input (a local path or an object-store URI); OSError when it is gone."""
    if is_uri(path):
        found = Location(path).stat()
        if found is None:
            raise FileNotFoundError(2, "No such object", path)
        return FileStat(found.size, found.mtime_ns, 0)
    st = os.stat(path)
    return FileStat(st.st_size, st.st_mtime_ns, st.st_ino)


def input_exists(path: str) -> bool:
    """Whether an input path (or object) is still there, a broken link included."""
    return Location(path).stat() is not None if is_uri(path) else os.path.lexists(path)


def input_folder(raw: str) -> str | None:
    """The folder (or object-store prefix) an input names, normalised; None when it is not
    one (a file, or gone)."""
    if is_uri(raw):
        loc = Location.of(raw)
        return loc.uri + "/" if loc.kind() == "folder" else None
    folder = os.path.abspath(raw)
    return folder + os.sep if os.path.isdir(folder) else None


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


def find_inputs(given: Sequence[str], lake: str | Path | None) -> Inputs:
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
    lake: str | Path | None = None,
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

    An ``s3://`` input is an object or every object under a prefix (``_discover_uri``).
    """
    inputs = list(inputs)  # iterated twice: a generator would leave the error message empty
    found: dict[str, Format] = {}
    skipped = {} if skipped is None else skipped
    own = None if lake is None else os.fspath(lake)
    own = own if own is None or is_uri(own) else os.path.abspath(own)
    for raw in inputs:
        if is_uri(os.fspath(raw)):
            _discover_uri(os.fspath(raw), own, found, skipped, notes)
            continue
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


def _discover_uri(
    raw: str,
    own: str | None,
    found: dict[str, Format],
    skipped: dict[str, list[str]],
    notes: list[str] | None,
) -> None:
    """An object-store input: one object, or every object under a prefix, passed over as a
    folder walk passes over files (hidden names, formats not read) and lakes (a Delta
    table's objects, and a lake's whole prefix when the table is its ``documents``)."""
    try:
        loc = Location.of(raw)
        kind = loc.kind()
    except LakeError as exc:
        raise InputError(str(exc)) from exc
    except OSError as exc:
        raise InputError(
            f"{raw}: cannot reach it ({one_line(exc)}); check AWS_ENDPOINT_URL, AWS_REGION and "
            "the credentials"
        ) from exc
    if own is not None and (loc.uri == own or loc.uri.startswith(own + "/")):
        raise InputError(f"{raw}: is inside the lake {own}; a lake is never read as input")
    if kind == "file":
        if (fmt := detect_format(loc.uri)) is None:
            raise InputError(f"{raw}: unknown input format; lakecurate reads {READS} files")
        found[loc.uri] = fmt
        return
    if kind is None:
        raise InputError(f"{raw}: no such object or prefix")
    entries = [e.rel for e in loc.files()]
    tables = {r.split("_delta_log/")[0].rstrip("/") for r in entries if "_delta_log/" in r}
    lakes = {t.rpartition("/")[0] for t in tables if t.rpartition("/")[2] == "documents"}
    if "" in tables | lakes:
        raise InputError(f"{raw}: is a lake or a Delta table; a lake is never read as input")
    passed = lakes | {t for t in tables if not any(t.startswith(k + "/") for k in lakes)}
    if notes is not None:
        notes += [f"{loc / base}: a lake, not read as input" for base in sorted(passed)]
    for rel in entries:
        full = (loc / rel).uri
        if any(rel.startswith(base + "/") for base in passed) or (
            own is not None and full.startswith(own + "/")
        ):
            continue
        fmt = detect_format(full)
        if any(part.startswith(".") for part in rel.split("/")):
            skipped.setdefault(SKIP_HIDDEN, []).append(full)
        elif fmt is None:
            skipped.setdefault(SKIP_UNSUPPORTED, []).append(full)
        else:
            found[full] = fmt
