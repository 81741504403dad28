#!/usr/bin/env python
"""Model-based campaign: a seeded random walk over a CHANGING input tree, with kills and
maintenance, where every successful ingest is compared with a clean run on the current inputs.

The model is a small folder tree of JSONL files (2-3 subfolders, a few files each) that the walk
keeps changing: append records, edit one record's text, delete one line, copy a file into another
folder under the same name, rename a file, remove a file, add a new file. Records have a given
``id`` or none, some texts are exact copies of others, some are near copies (one of the last two
words of a 40-50 word text changed: Jaccard of word 5-grams >= 0.89), some are too short or
blank (dropped by a filter), and a few lines are malformed (bad JSON, no text, text not a
string, not an object, invalid UTF-8). Odd seeds turn near dedup on (``link = "kept"`` when
seed % 4 == 3). The config has 1 KiB chunks, so files have several.

Between the changes the walk runs ``lakecurate ingest`` as a real process (sometimes SIGKILLed:
``LAKECURATE_FAULT=<point>:kill`` at a random point of ``lakecurate/faults.py`` or a SIGKILL of
the process group after a random delay, as ``benchmarks/chaos.py`` does; then resumed with the
same command, at once or a few steps later), ``compact``, ``vacuum --no-dry-run`` (the table's
retention, or 0 h with ``--force``), ``verify --repair``, ``restore N`` and the deletion of
``LAKE/state.duckdb`` (and its WAL).

After EVERY successful ingest a fresh lake is built from the current tree in one clean run (same
config) and the two lakes' current ``documents`` tables are compared:

1. every current input line exactly once: the multiset of (source_path, source_line) of the
   clean lake equal to the lines of the model tree, and the model lake's equal to the clean
   lake's; nothing doubled;
2. per (source_path, source_line): the same id, id_given, text, meta, raw, error, content_hash,
   lang, lang_score, chunk_key, input_sha256, and the same kept / reason / detail when the reason
   is a filter or malformed;
3. duplicates (the kept copy may differ when commit order differs): exact-only seeds have the
   same set of kept content hashes; in each lake every exact-duplicate group (one content_hash
   among rows whose reason is NULL / exact_dup / near_dup / duplicate_id) has exactly one kept
   row (near seeds: at most one, and exactly one per generated near-duplicate family); every
   exact_dup / near_dup ``dup_of`` names a kept row's id in the same lake (a duplicate_id row
   names its own id, which an earlier, not duplicate_id, row has); no kept id twice;
4. ``lakecurate verify`` on the model lake exits 0 and says ok;
5. a second identical ingest says "nothing to do" (exit 0, no new Delta version); if it did
   something, the comparison is made again.

A difference is recorded with the step that found it; the model lake is then replaced by a
clean build (a ``reset``), so later differences are new findings rather than echoes. The steps
are a pure function of the seed (they depend on the model tree only); where a timed SIGKILL
lands is not (use ``--kill-modes fault`` for a fully repeatable run). Commands that are never
killed (the clean runs, the second ingest, verify, compact, vacuum, restore) run in this
process through click, to save interpreter start-ups.

``--shrink`` replays shortened step lists (fresh folders) to find a minimal sequence that still
shows the first difference of each kind; ``--replay FILE`` runs the steps of a JSON summary.

Run from the repository root with the project's virtualenv::

    python benchmarks/model_campaign.py --steps 400 --seed 1
    python benchmarks/model_campaign.py --steps 2000 --seed 2 --out /tmp/model.json --shrink

Writes a JSON summary to ``benchmarks/results/model_campaign.json`` (``--out``): steps run,
steps by kind, ingests checked, differences found (must be 0), load average, git commit.
``tests/integration/test_model.py`` runs ``campaign()`` for a few seeds in the test suite.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "model_campaign.json"
sys.path.insert(0, str(REPO / "tests"))  # cli_env lives in tests/helpers.py

from helpers import cli_env  # noqa: E402

FAULT_POINTS = (
    "worker",
    "staged_write",
    "before_delta_commit",
    "delta_write",
    "after_delta_commit",
    "during_state_update",
)
FOLDERS = ("web", "books", "forum")
FILE_NAMES = ("part-0.jsonl", "part-1.jsonl", "news.jsonl", "crawl.jsonl", "misc.jsonl")
MIN_CHARS = 40  # [filters.length].min_chars: the short texts are below it
DUP_REASONS = (None, "exact_dup", "near_dup", "duplicate_id")
COMPARED = (
    "id",
    "id_given",
    "text",
    "meta",
    "raw",
    "error",
    "content_hash",
    "lang",
    "lang_score",
    "chunk_key",
    "input_sha256",
)
DECISION = ("kept", "reason", "detail")
TREE_KINDS = ("append", "edit", "delete_line", "copy", "rename", "remove", "add")
LAKE_KINDS = ("compact", "vacuum", "verify_repair", "restore", "delete_state")

CONFIG = """\
[ingest]
chunk_size = "{chunk_size}"
max_attempts = 2
retry_backoff = 0.05
workers = {workers}
deciders = {deciders}

[dedup]
exact = true

[filters]
steps = ["length"]

[filters.length]
min_chars = {min_chars}
"""
NEAR = '\n[near_dedup]\nenabled = true\nthreshold = 0.8\nlink = "{link}"\n'


def _load_chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chaos_for_model", HERE.parent / "chaos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


chaos = _load_chaos()  # kill_group (SIGKILL a process group and wait) and environment()


# -- settings, steps, findings ------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """What a campaign does; everything else follows from the seed."""

    seed: int = 1
    steps: int = 100
    near: bool | None = None  # None: odd seeds use near dedup, even seeds exact only
    ingest_every: float = 10.0  # mean steps between ingests (gaps uniform in 0.5x .. 1.5x)
    kill_rate: float = 0.4  # share of ingests that are killed first
    kill_modes: tuple[str, ...] = ("fault", "timer")  # "fault" is deterministic, "timer" not
    maintenance: float = 0.12  # share of steps that are lake commands, once a lake exists
    max_files: int = 5
    max_lines: int = 10
    workers: int = 1
    deciders: int = 0  # [ingest] deciders: the band index and tier 2's keys in K processes
    reset_on_difference: bool = True
    chunk_size: str = "1KiB"  # 3-7 records: a full file has 2-3 chunks

    @property
    def near_dedup(self) -> bool:
        return self.seed % 2 == 1 if self.near is None else self.near


@dataclass(frozen=True)
class Step:
    """One concrete action, replayable on any tree (it is skipped where it does not apply)."""

    kind: str
    path: str = ""  # relative to the input folder
    dest: str = ""
    index: int = -1
    lines: tuple[str, ...] = ()  # file lines (bytes as str, surrogateescape)
    trailing_newline: bool = True
    kills: tuple[tuple[str, str, float], ...] = ()  # (mode, fault rule, delay seconds)
    resume: bool = True
    retention_zero: bool = False
    fraction: float = 0.0

    def describe(self) -> str:
        if self.kind == "add":
            return (
                f"add {self.path} ({len(self.lines)} line(s)"
                f"{', no final newline' if not self.trailing_newline else ''})"
            )
        if self.kind == "append":
            return f"append {len(self.lines)} line(s) to {self.path}: {_brief(self.lines)}"
        if self.kind == "edit":
            return f"edit line {self.index + 1} of {self.path} -> {_brief(self.lines)}"
        if self.kind == "delete_line":
            return f"delete line {self.index + 1} of {self.path}"
        if self.kind in ("copy", "rename"):
            return f"{self.kind} {self.path} -> {self.dest}"
        if self.kind == "remove":
            return f"remove {self.path}"
        if self.kind == "ingest":
            kills = "; ".join(
                f"killed by {r}" if m == "fault" else f"SIGKILL after {d:.2f} s"
                for m, r, d in self.kills
            )
            tail = "" if self.resume or not self.kills else ", not resumed"
            return f"ingest{' (' + kills + tail + ')' if kills else ''}"
        if self.kind == "vacuum":
            return (
                "vacuum --no-dry-run --retention-hours 0 --force"
                if self.retention_zero
                else "vacuum --no-dry-run"
            )
        if self.kind == "restore":
            return f"restore to version int({self.fraction:.2f} x current)"
        if self.kind == "verify_repair":
            return "verify --repair"
        if self.kind == "delete_state":
            return "delete state.duckdb (+ .wal)"
        return self.kind

    def detail(self) -> str:
        """``describe`` plus every line an add step writes (for minimal reproductions)."""
        if self.kind != "add":
            return self.describe()
        return self.describe() + "".join(
            f"\n       {n}: {_brief([line], 400)}" for n, line in enumerate(self.lines, 1)
        )

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v != getattr(Step, k, None) or k == "kind"}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Step:
        data = dict(data)
        data["lines"] = tuple(data.get("lines", ()))
        data["kills"] = tuple(tuple(k) for k in data.get("kills", ()))
        return cls(**data)


def _brief(lines: Iterable[str], width: int = 60) -> str:
    out = []
    for line in lines:
        rec = parse(line)
        if rec is not None:
            text = rec["text"]
            words = text.split()
            shown = (
                text
                if len(text) <= width
                else f"{' '.join(words[:3])} ... {' '.join(words[-3:])} ({len(words)} words)"
            )
            out.append(f"[id={rec['id']!r}] {shown!r}" if "id" in rec else repr(shown))
        else:
            out.append(f"malformed {line[:30]!r}")
    return "; ".join(out)


@dataclass
class Difference:
    """One broken expectation at one step."""

    step: int  # 1-based index into the history
    kind: str
    lake: str  # "model", "clean" or "both"
    detail: str
    count: int = 1

    def line(self) -> str:
        return f"step {self.step}: [{self.lake}] {self.kind} ({self.count}): {self.detail}"

    def signature(self) -> str:
        """What a replay must show to count as the same finding: the lake and kind, plus the
        error line (digits and paths masked) when a command failed."""
        sig = f"{self.lake}: {self.kind}"
        if " || " in self.detail:
            error = re.sub(r"/\S+", "PATH", self.detail.split(" || ")[0])
            sig += " :: " + re.sub(r"\d+", "N", error)
        return sig


@dataclass
class Outcome:
    """What executing one step did."""

    step: Step
    notes: list[str] = field(default_factory=list)
    checked: bool = False
    seconds: float = 0.0


# -- the text factory ---------------------------------------------------------------------------
class Texts:
    """Generates record lines and remembers which near-duplicate family each text belongs to."""

    def __init__(self, rng: random.Random, near: bool) -> None:
        vocab_rng = random.Random(20261203)
        syll = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
        words = {
            "".join(vocab_rng.choice(syll) for _ in range(vocab_rng.randint(2, 4)))
            for _ in range(6000)
        }
        self.vocab = [*sorted(words), "café", "naïve", "über", "señal"]
        self.rng = rng
        self.near = near
        self.family: dict[str, int] = {}  # text -> family (near copies share one)
        self.next_id = 0
        self.next_family = 0

    def _words(self, n: int) -> list[str]:
        return [self.rng.choice(self.vocab) for _ in range(n)]

    def new_text(self) -> str:
        lo, hi = (40, 50) if self.near else (12, 24)
        text = " ".join(self._words(self.rng.randint(lo, hi)))
        self.family[text] = self.next_family
        self.next_family += 1
        return text

    def near_copy(self, text: str) -> str:
        """One of the last 2 words changed: members of a family differ only there, in at most
        2 word 5-grams each, so they are pairwise near (Jaccard >= 34/38 = 0.89 at 40 words;
        the MinHash verification needs 103 of 128 equal positions, 114 expected)."""
        words = text.split()
        pos = len(words) - 1 - self.rng.randrange(min(2, len(words)))
        words[pos] = self.rng.choice([w for w in self._words(5) if w != words[pos]] or ["zz"])
        out = " ".join(words)
        if text not in self.family:
            self.family[text] = self.next_family
            self.next_family += 1
        self.family.setdefault(out, self.family[text])
        return out

    def new_id(self) -> str | int:
        self.next_id += 1
        return 100000 + self.next_id if self.rng.random() < 0.2 else f"doc-{self.next_id}"

    def record(self, text: str) -> str:
        """A JSON line; half have a given id (new, so one id never has two texts)."""
        rec: dict[str, Any] = {}
        if self.rng.random() < 0.5:
            rec["id"] = self.new_id()
        rec["text"] = text
        if self.rng.random() < 0.3:
            rec["tag"] = self.rng.choice(["news", "blog", "faq"])
        if self.rng.random() < 0.15:
            rec["n"] = self.rng.randint(0, 9)
        return json.dumps(rec, ensure_ascii=self.rng.random() < 0.5)

    def malformed(self) -> str:
        self.next_id += 1
        n = self.next_id
        return self.rng.choice(
            [
                f'{{"id": "bad-{n}", "text": "unterminated',
                f'{{"id": "bad-{n}", "body": "a record without a text field"}}',
                f'{{"id": "bad-{n}", "text": {n}}}',
                f'["bad-{n}", "not", "an", "object"]',
                f'{{"text": "caf\udce9 {n} is latin-1, not UTF-8, in this line"}}',
            ]
        )

    def line(self, existing: list[str]) -> str:
        """A new line: a fresh text, an exact or near copy of a text in the tree, a short or
        blank text (filtered), or a malformed line."""
        r = self.rng.random()
        if r < 0.14 and existing:
            return self.record(self.rng.choice(existing))  # exact copy, never the same id
        if r < 0.26 and existing:
            return self.record(self.near_copy(self.rng.choice(existing)))
        if r < 0.33:
            return self.record(" ".join(self._words(self.rng.randint(1, 3)))[: MIN_CHARS - 5])
        if r < 0.35:
            return self.record("   ")
        if r < 0.40:
            return self.malformed()
        return self.record(self.new_text())


# -- the model tree -----------------------------------------------------------------------------
@dataclass
class FileModel:
    lines: list[str]
    trailing_newline: bool = True

    def data(self) -> bytes:
        body = "\n".join(self.lines).encode("utf-8", "surrogateescape")
        return body + (b"\n" if self.trailing_newline and self.lines else b"")


def parse(line: str) -> dict[str, Any] | None:
    """The record a line holds, or None when it is malformed."""
    if "\udce9" in line:
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("text"), str) else None


class Tree:
    """The input folder and its model (what every file holds, line by line)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, FileModel] = {}
        root.mkdir(parents=True, exist_ok=True)

    def _write(self, rel: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:  # in place: same inode, new size and mtime
            f.write(self.files[rel].data())

    def apply(self, step: Step) -> bool:
        """Apply a tree step; False when it does not apply to this tree (skipped)."""
        f = self.files.get(step.path)
        if step.kind == "add":
            if f is not None:
                return False
            self.files[step.path] = FileModel(list(step.lines), step.trailing_newline)
            self._write(step.path)
            return True
        if f is None:
            return False
        if step.kind == "append":
            with open(self.root / step.path, "ab") as out:  # as `>>` would
                head = b"" if f.trailing_newline or not f.lines else b"\n"
                out.write(head + "\n".join(step.lines).encode("utf-8", "surrogateescape") + b"\n")
            f.lines.extend(step.lines)
            f.trailing_newline = True
            return True
        if step.kind in ("edit", "delete_line"):
            if not 0 <= step.index < len(f.lines):
                return False
            if step.kind == "edit":
                f.lines[step.index] = step.lines[0]
            else:
                del f.lines[step.index]
            self._write(step.path)
            return True
        if step.kind in ("copy", "rename"):
            if step.dest in self.files:
                return False
            (self.root / step.dest).parent.mkdir(parents=True, exist_ok=True)
            if step.kind == "copy":
                shutil.copy2(self.root / step.path, self.root / step.dest)  # keeps the mtime
                self.files[step.dest] = FileModel(list(f.lines), f.trailing_newline)
            else:
                os.rename(self.root / step.path, self.root / step.dest)
                self.files[step.dest] = self.files.pop(step.path)
            return True
        if step.kind == "remove":
            if len(self.files) == 1:
                return False
            (self.root / step.path).unlink()
            del self.files[step.path]
            return True
        raise ValueError(f"not a tree step: {step.kind}")

    def texts(self) -> list[str]:
        out = []
        for f in self.files.values():
            for line in f.lines:
                rec = parse(line)
                if rec is not None and len(rec["text"]) >= MIN_CHARS:
                    out.append(rec["text"])
        return out

    def ids(self) -> collections.Counter[str]:
        return collections.Counter(
            str(rec["id"])
            for f in self.files.values()
            for line in f.lines
            if (rec := parse(line)) is not None and "id" in rec
        )

    def id_texts_consistent(self) -> bool:
        """The walk keeps one text per given id, so which copy of an id wins cannot change
        which texts are kept; a replayed, shortened walk may break that."""
        seen: dict[str, str] = {}
        for f in self.files.values():
            for line in f.lines:
                rec = parse(line)
                if (
                    rec is not None
                    and "id" in rec
                    and seen.setdefault(str(rec["id"]), rec["text"]) != rec["text"]
                ):
                    return False
        return True

    def expected_lines(self) -> collections.Counter[tuple[str, int]]:
        """(source_path, source_line) of every line (blank lines are never generated)."""
        return collections.Counter(
            (str(self.root / rel), n + 1)
            for rel, f in self.files.items()
            for n in range(len(f.lines))
        )

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for rel in sorted(self.files):
            h.update(rel.encode() + b"\0" + self.files[rel].data() + b"\0")
        return h.hexdigest()


# -- the walk -----------------------------------------------------------------------------------
class Walk:
    """Chooses the next step from the seed and the model tree alone."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.texts = Texts(self.rng, settings.near_dedup)
        self.ingested = False
        self.since_ingest = 0
        self.gap = self._gap()

    def _gap(self) -> int:
        every = max(self.s.ingest_every, 1.0)
        return max(1, round(self.rng.uniform(0.5 * every, 1.5 * every)))

    def next(self, tree: Tree) -> Step:
        s, rng = self.s, self.rng
        if self.ingested and rng.random() < s.maintenance:
            kind = rng.choices(LAKE_KINDS, weights=(2, 2, 2, 2, 1))[0]
            zero, fraction = rng.random() < 0.5, rng.random()
            return Step(
                kind,
                retention_zero=zero and kind == "vacuum",
                fraction=fraction if kind == "restore" else 0.0,
            )
        self.since_ingest += 1
        if self.since_ingest >= self.gap:
            self.ingested, self.since_ingest, self.gap = True, 0, self._gap()
            return self._ingest(tree)
        while True:
            kind = rng.choices(TREE_KINDS, weights=(14, 12, 6, 4, 4, 3, 5))[0]
            step = self.add(tree) if kind == "add" else getattr(self, f"_{kind}")(tree)
            if step is not None:
                return step

    def _ingest(self, tree: Tree) -> Step:
        rng, kills = self.rng, []
        if rng.random() < self.s.kill_rate:
            for _ in range(1 if rng.random() < 0.75 else 2):
                mode = rng.choice(self.s.kill_modes)
                rule = f"{rng.choice(FAULT_POINTS)}:kill"
                if rng.random() < 0.3:  # only on a chunk of one (changed or not) file
                    rule += ":" + Path(rng.choice(sorted(tree.files))).stem
                kills.append(
                    (
                        mode,
                        rule if mode == "fault" else "",
                        round(rng.uniform(0.3, 3.0), 2) if mode == "timer" else 0.0,
                    )
                )
        return Step("ingest", kills=tuple(kills), resume=not kills or rng.random() < 0.75)

    def _pick_file(self, tree: Tree) -> str:
        return self.rng.choice(sorted(tree.files))

    def add(self, tree: Tree, folder: str | None = None) -> Step | None:
        if len(tree.files) >= self.s.max_files:
            return None
        folder = folder or self.rng.choice(FOLDERS)
        free = [n for n in FILE_NAMES if f"{folder}/{n}" not in tree.files]
        if not free:
            return None
        existing = tree.texts()
        lines: list[str] = []
        for _ in range(self.rng.randint(3, self.s.max_lines - 3)):
            lines.append(self.texts.line(existing))
            rec = parse(lines[-1])
            if rec is not None and len(rec["text"]) >= MIN_CHARS:
                existing.append(rec["text"])
        return Step(
            "add",
            f"{folder}/{self.rng.choice(free)}",
            lines=tuple(lines),
            trailing_newline=self.rng.random() < 0.85,
        )

    def _append(self, tree: Tree) -> Step | None:
        path = self._pick_file(tree)
        room = self.s.max_lines - len(tree.files[path].lines)
        if room < 1:
            return None
        existing = tree.texts()
        n = min(room, 1 if self.rng.random() < 0.6 else self.rng.randint(2, 3))
        return Step("append", path, lines=tuple(self.texts.line(existing) for _ in range(n)))

    def _edit(self, tree: Tree) -> Step | None:
        path = self._pick_file(tree)
        lines = tree.files[path].lines
        if not lines:
            return None
        index = self.rng.randrange(len(lines))
        rec = parse(lines[index])
        t = self.texts
        if rec is None:  # a malformed line is fixed
            return Step("edit", path, index=index, lines=(t.record(t.new_text()),))
        text = rec["text"]
        if len(text) < MIN_CHARS:
            new = t.new_text() if self.rng.random() < 0.5 else text + " x"
        elif self.s.near_dedup or self.rng.random() < 0.5:
            new = t.near_copy(text)  # near seeds: the record stays in its family
        elif self.rng.random() < 0.5:
            words = text.split()
            words[self.rng.randrange(len(words))] = self.rng.choice(t.vocab)
            new = " ".join(words)
        else:
            new = t.new_text()
        out = dict(rec, text=new)
        if "id" in rec and tree.ids()[str(rec["id"])] > 1:
            out["id"] = t.new_id()  # one text per given id (see Tree.id_texts_consistent)
        return Step(
            "edit",
            path,
            index=index,
            lines=(json.dumps(out, ensure_ascii=self.rng.random() < 0.5),),
        )

    def _delete_line(self, tree: Tree) -> Step | None:
        path = self._pick_file(tree)
        n = len(tree.files[path].lines)
        return Step("delete_line", path, index=self.rng.randrange(n)) if n else None

    def _copy(self, tree: Tree) -> Step | None:
        if len(tree.files) >= self.s.max_files:
            return None
        path = self._pick_file(tree)
        folder, name = path.split("/")
        targets = [f for f in FOLDERS if f != folder and f"{f}/{name}" not in tree.files]
        return Step("copy", path, f"{self.rng.choice(targets)}/{name}") if targets else None

    def _rename(self, tree: Tree) -> Step | None:
        path = self._pick_file(tree)
        folder = path.split("/")[0]
        free = [n for n in FILE_NAMES if f"{folder}/{n}" not in tree.files]
        return Step("rename", path, f"{folder}/{self.rng.choice(free)}") if free else None

    def _remove(self, tree: Tree) -> Step | None:
        return Step("remove", self._pick_file(tree)) if len(tree.files) > 1 else None


# -- running lakecurate -------------------------------------------------------------------------
@dataclass
class Run:
    rc: int
    out: str
    err: str = ""

    def text(self, limit: int = 1500) -> str:
        """The last line of stderr (the error) first, then the tail of both outputs."""
        both = (self.out + self.err).strip()
        last = next((ln for ln in reversed(self.err.splitlines()) if ln.strip()), "")
        tail = both if len(both) <= limit else "..." + both[-limit:]
        return f"{last.strip()} || {tail}" if last else tail


def cli(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    delay: float | None = None,
    timeout: float = 600.0,
) -> Run:
    """``python -m lakecurate ARGS`` as a real process in its own session; with ``delay``, the
    whole process group is SIGKILLed after that many seconds (unless it ended before). Returns
    once no process of the group is left."""
    cmd = [sys.executable, "-m", "lakecurate", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            cmd, env=cli_env(env), cwd=REPO, stdout=out, stderr=err, start_new_session=True
        )
        try:
            proc.wait(timeout=delay if delay is not None else timeout)
        except subprocess.TimeoutExpired:
            chaos.kill_group(proc)
        if proc.returncode == -signal.SIGKILL:  # a fault rule kills its own group
            chaos.kill_group(proc)
        out.seek(0)
        err.seek(0)
        return Run(
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


def cli_inprocess(args: list[str]) -> Run:
    """The same command through click in this process (no interpreter start-up): for commands
    that are never killed. Library exceptions the CLI does not catch come back as rc 1 with the
    traceback."""
    from click.testing import CliRunner

    from lakecurate.cli import main

    result = CliRunner().invoke(main, args, catch_exceptions=True)
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += "".join(traceback.format_exception(result.exception))
    return Run(result.exit_code, result.stdout, err)


def delta_version(lake: Path) -> int | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(lake / "documents")).version()
    except TableNotFoundError:
        return None


def read_rows(lake: Path) -> list[dict[str, Any]]:
    """The lake's current ``documents`` table, read with deltalake (not through lakecurate)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(lake / "documents")).to_pyarrow_table().to_pylist()
    except TableNotFoundError:
        return []


# -- the comparison -----------------------------------------------------------------------------
def _row(r: dict[str, Any], root: Path) -> str:
    path = os.path.relpath(r["source_path"], root)
    text = r.get("text") or ""
    return (
        f"{path}:{r['source_line']} id={r['id']!r} kept={r['kept']} reason={r['reason']}"
        f" dup_of={r.get('dup_of')!r} text={text[:40]!r}"
    )


def compare(
    model: list[dict[str, Any]],
    clean: list[dict[str, Any]],
    expected: collections.Counter[tuple[str, int]],
    root: Path,
    families: dict[str, int] | None,
) -> list[tuple[str, str, int, str]]:
    """Every broken expectation as (kind, lake, count, examples). ``families`` (near seeds):
    text -> generated near-duplicate family; None for exact-only seeds."""
    found: list[tuple[str, str, int, str]] = []

    def add(kind: str, lake: str, examples: list[str]) -> None:
        if examples:
            found.append((kind, lake, len(examples), " | ".join(examples[:3])))

    by_key: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
    for name, rows in (("model", model), ("clean", clean)):
        keys = collections.Counter((r["source_path"], r["source_line"]) for r in rows)
        add(
            "row doubled",
            name,
            [
                f"{os.path.relpath(k[0], root)}:{k[1]} x{n}"
                for k, n in sorted(keys.items())
                if n > 1
            ],
        )
        by_key[name] = {(r["source_path"], r["source_line"]): r for r in rows}
        if name == "clean":  # the model lake is held to the clean one, row by row, below
            add(
                "input line missing",
                name,
                [f"{os.path.relpath(k[0], root)}:{k[1]}" for k in sorted(expected - keys)],
            )
            add(
                "row of no current input line",
                name,
                [
                    _row(r, root)
                    for r in rows
                    if (r["source_path"], r["source_line"]) not in expected
                ],
            )
    m, c = by_key["model"], by_key["clean"]
    add("row missing (clean has it)", "model", [_row(c[k], root) for k in sorted(c.keys() - m)])
    add("row extra (clean lacks it)", "model", [_row(m[k], root) for k in sorted(m.keys() - c)])
    differing: dict[str, list[str]] = collections.defaultdict(list)
    for k in sorted(m.keys() & c.keys()):
        a, b = m[k], c[k]
        for col in COMPARED:
            if a.get(col) != b.get(col):
                differing[f"{col} differs"].append(
                    f"{os.path.relpath(k[0], root)}:{k[1]} model={a.get(col)!r:.60} "
                    f"clean={b.get(col)!r:.60}"
                )
        filtered = any(str(r["reason"]).startswith(("filter:", "malformed:")) for r in (a, b))
        if filtered and any(a[col] != b[col] for col in DECISION):
            differing["filter/malformed decision differs"].append(
                f"{os.path.relpath(k[0], root)}:{k[1]} model={[a[x] for x in DECISION]} "
                f"clean={[b[x] for x in DECISION]}"
            )
    for kind, examples in differing.items():
        add(kind, "model", examples)
    if families is None:
        mk = {r["content_hash"] for r in model if r["kept"]}
        ck = {r["content_hash"] for r in clean if r["kept"]}
        add("kept content missing", "model", [_first_row(clean, h, root) for h in sorted(ck - mk)])
        add("kept content extra", "model", [_first_row(model, h, root) for h in sorted(mk - ck)])
    for name, rows in (("model", model), ("clean", clean)):
        found += [(kind, name, n, ex) for kind, n, ex in dedup_problems(rows, root, families)]
    return found


def _first_row(rows: list[dict[str, Any]], content_hash: str, root: Path) -> str:
    return next(
        (_row(r, root) for r in rows if r["content_hash"] == content_hash and r["kept"]),
        content_hash,
    )


def dedup_problems(
    rows: list[dict[str, Any]], root: Path, families: dict[str, int] | None
) -> list[tuple[str, int, str]]:
    """The duplicate invariants inside one lake, as (kind, count, examples)."""
    out: list[tuple[str, int, str]] = []

    def add(kind: str, examples: list[str]) -> None:
        if examples:
            out.append((kind, len(examples), " | ".join(examples[:3])))

    dup_rows = [r for r in rows if r["reason"] in DUP_REASONS]
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in dup_rows:
        groups[r["content_hash"]].append(r)
    wrong = []
    for rs in groups.values():
        kept = sum(1 for r in rs if r["kept"])
        if kept > 1 or (kept == 0 and families is None):
            wrong.append(f"{kept} kept of {len(rs)}: " + "; ".join(_row(r, root) for r in rs[:3]))
    add("exact-duplicate group without exactly one kept row", wrong)
    if families is not None:
        fams: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
        for r in dup_rows:
            if r["text"] in families:  # a text changed by the lake shows in "text differs"
                fams[families[r["text"]]].append(r)
        add(
            "near-duplicate family without exactly one kept row",
            [
                f"family {f}: {sum(r['kept'] for r in rs)} kept of {len(rs)}: "
                + "; ".join(_row(r, root) for r in rs[:3])
                for f, rs in sorted(fams.items())
                if sum(1 for r in rs if r["kept"]) != 1
            ],
        )
    kept_ids = collections.Counter(r["id"] for r in rows if r["kept"])
    add("kept id twice", [f"{i!r} x{n}" for i, n in sorted(kept_ids.items()) if n > 1])
    originals = {r["id"] for r in rows if r["reason"] != "duplicate_id"}
    dangling = []
    for r in rows:
        if r["dup_of"] is None:
            continue
        if r["reason"] == "duplicate_id":
            if r["dup_of"] != r["id"] or r["id"] not in originals:
                dangling.append(_row(r, root))
        elif r["dup_of"] not in kept_ids:
            dangling.append(_row(r, root))
    add("dup_of names no kept row", dangling)
    return out


# -- the campaign -------------------------------------------------------------------------------
class Campaign:
    """Executes steps on a work folder: INPUT (the tree), LAKE (the model lake), CLEAN."""

    def __init__(
        self,
        work: Path,
        settings: Settings,
        *,
        log: Callable[[str], None] = print,
        families: dict[str, int] | None = None,
        stop_at: str | None = None,
        check_from: int = 0,
    ) -> None:
        self.work = work
        self.s = settings
        self.log = log
        work.mkdir(parents=True, exist_ok=True)
        for name in ("input", "lake", "clean"):
            shutil.rmtree(work / name, ignore_errors=True)
        self.tree = Tree(work / "input")
        self.lake = work / "lake"
        self.clean = work / "clean"
        self.config = work / "lakecurate.toml"
        text = CONFIG.format(
            chunk_size=settings.chunk_size,
            workers=settings.workers,
            deciders=settings.deciders,
            min_chars=MIN_CHARS,
        )
        if settings.near_dedup:
            text += NEAR.format(link="kept" if settings.seed % 4 == 3 else "any")
        self.config.write_text(text, encoding="utf-8")
        self.families = families  # near seeds: filled from the walk's Texts
        self.history: list[Step] = []
        self.outcomes: list[Outcome] = []
        self.differences: list[Difference] = []
        self.kinds: collections.Counter[str] = collections.Counter()
        self.ingests_checked = 0
        self.kills = collections.Counter[str]()
        self.notes: collections.Counter[str] = collections.Counter()
        self.clean_fingerprint = ""
        self.check_from = check_from  # compare only at steps >= this (1-based)
        self.stop_at = stop_at  # a replay stops at the first difference of this kind
        if os.environ.get("LAKECURATE_FAULT"):
            raise RuntimeError("LAKECURATE_FAULT is set in this process: unset it")

    # -- commands ---------------------------------------------------------------------------
    def ingest_args(self, lake: Path) -> list[str]:
        return [
            "ingest",
            str(self.tree.root),
            "--lake",
            str(lake),
            "--config",
            str(self.config),
            "--workers",
            str(self.s.workers),
        ]

    def differ(self, kind: str, lake: str, detail: str, count: int = 1) -> None:
        d = Difference(len(self.history), kind, lake, detail, count)
        self.differences.append(d)
        self.log(f"  DIFFERENCE {d.line()}")

    @property
    def stopped(self) -> bool:
        return self.stop_at is not None and any(
            d.signature() == self.stop_at for d in self.differences
        )

    def execute(self, step: Step) -> Outcome:
        self.history.append(step)
        self.kinds[step.kind] += 1
        outcome = Outcome(step)
        self.outcomes.append(outcome)
        if step.kind in TREE_KINDS:
            if not self.tree.apply(step):
                outcome.notes.append("skipped: does not apply to this tree")
            elif not self.tree.id_texts_consistent():
                outcome.notes.append("a given id now has two texts (replay only)")
            return outcome
        t0 = time.perf_counter()
        getattr(self, f"_do_{step.kind}")(step, outcome)
        outcome.seconds = time.perf_counter() - t0
        for note in outcome.notes:
            self.notes[f"{step.kind}: {note.split(':')[0]}"] += 1
        return outcome

    def _do_ingest(self, step: Step, outcome: Outcome) -> None:
        args = self.ingest_args(self.lake)
        if not self.tree.files:  # only in a shortened replay: the walk keeps one file
            run = cli(args)
            outcome.notes.append(f"no input files: exit {run.rc}")
            return
        for mode, rule, delay in step.kills:
            run = (
                cli(args, env={"LAKECURATE_FAULT": rule})
                if mode == "fault"
                else cli(args, delay=delay)
            )
            if run.rc == -signal.SIGKILL:
                self.kills[mode] += 1
                outcome.notes.append(f"killed ({mode})")
            elif run.rc == 0:  # the kill did not land: a successful ingest, checked
                outcome.notes.append(f"completed before the kill ({mode})")
                if len(self.history) >= self.check_from:
                    self.check(outcome)
                return
            else:
                self.differ("ingest failed (a run meant to be killed)", "model", run.text())
                self._reset(outcome)
                return
        if not step.resume:
            return
        run = cli(args)
        if run.rc != 0:
            self.differ("ingest failed", "model", run.text())
            self._reset(outcome)
            return
        if len(self.history) >= self.check_from:
            self.check(outcome)

    def _maintenance(self, args: list[str], outcome: Outcome) -> Run:
        """A lake command: exit 0, or a clean refusal (exit 1, one ``error:`` line, noted)."""
        run = cli_inprocess([*args, "--lake", str(self.lake)])
        if run.rc == 0:
            return run
        if run.rc == 1 and "Traceback" not in run.err and "error:" in run.err:
            outcome.notes.append("refused: " + run.err.strip().splitlines()[-1][:300])
            return run
        self.differ(f"{args[0]} failed", "model", run.text())
        return run

    def _do_compact(self, step: Step, outcome: Outcome) -> None:
        self._maintenance(["compact"], outcome)

    def _do_vacuum(self, step: Step, outcome: Outcome) -> None:
        extra = ["--retention-hours", "0", "--force"] if step.retention_zero else []
        self._maintenance(["vacuum", "--no-dry-run", *extra], outcome)

    def _do_verify_repair(self, step: Step, outcome: Outcome) -> None:
        run = self._maintenance(["verify", "--repair"], outcome)
        for line in run.out.splitlines():
            if line.startswith(("problem:", "repaired:")):
                outcome.notes.append(f"verify --repair: {line[:300]}")

    def _do_restore(self, step: Step, outcome: Outcome) -> None:
        current = delta_version(self.lake)
        if current is None:
            outcome.notes.append("skipped: no table")
            return
        target = int(step.fraction * current)
        outcome.notes.append(f"target: version {target} of 0..{current}")
        self._maintenance(["restore", str(target)], outcome)

    def _do_delete_state(self, step: Step, outcome: Outcome) -> None:
        for name in ("state.duckdb", "state.duckdb.wal"):
            with contextlib.suppress(FileNotFoundError):
                (self.lake / name).unlink()

    def _reset(self, outcome: Outcome) -> None:
        """Replace the model lake by a clean build, so later differences are new ones."""
        if not self.s.reset_on_difference:
            return
        shutil.rmtree(self.lake, ignore_errors=True)
        run = cli_inprocess(self.ingest_args(self.lake))
        outcome.notes.append("reset: the model lake was rebuilt by a clean run")
        if run.rc != 0:
            self.differ("clean ingest failed (reset)", "clean", run.text())

    # -- the check --------------------------------------------------------------------------
    def _build_clean(self) -> bool:
        fp = self.tree.fingerprint()
        if fp == self.clean_fingerprint and self.clean.exists():
            return True
        shutil.rmtree(self.clean, ignore_errors=True)
        run = cli_inprocess(self.ingest_args(self.clean))
        if run.rc != 0:
            self.differ("clean ingest failed", "clean", run.text())
            return False
        self.clean_fingerprint = fp
        return True

    def check(self, outcome: Outcome) -> None:
        """Compare the model lake with a clean run on the current tree (points 1-5)."""
        outcome.checked = True
        self.ingests_checked += 1
        before = len(self.differences)
        if not self._build_clean():
            return
        clean_rows = read_rows(self.clean)
        first = self._compare("", clean_rows, set())
        run = cli_inprocess(["verify", "--lake", str(self.lake)])
        if run.rc != 0 or not run.out.startswith("ok:"):
            self.differ("verify fails", "model", run.text())
        version = delta_version(self.lake)
        again = cli_inprocess(self.ingest_args(self.lake))
        after = delta_version(self.lake)
        if again.rc != 0 or "nothing to do" not in again.out or after != version:
            self.differ(
                "second identical ingest is not a no-op",
                "model",
                f"rc {again.rc}, Delta version {version} -> {after}: {again.text(600)}",
            )
            if again.rc == 0:
                self._compare("after the second ingest: ", clean_rows, first)
        if len(self.differences) > before:
            self._reset(outcome)

    def _compare(
        self, prefix: str, clean_rows: list[dict[str, Any]], known: set[tuple[str, str, int, str]]
    ) -> set[tuple[str, str, int, str]]:
        """Record what ``compare`` finds, except the findings in ``known``; returns them all."""
        families = self.families if self.s.near_dedup else None
        found = set(
            compare(
                read_rows(self.lake),
                clean_rows,
                self.tree.expected_lines(),
                self.tree.root,
                families,
            )
        )
        for kind, lake, n, ex in sorted(found - known):
            self.differ(prefix + kind, lake, ex, n)
        return found

    # -- reporting --------------------------------------------------------------------------
    def history_lines(self, upto: int | None = None) -> list[str]:
        out = []
        for n, o in enumerate(self.outcomes[:upto], 1):
            notes = f"  [{'; '.join(o.notes)}]" if o.notes else ""
            out.append(f"{n:4d}. {o.step.describe()}{notes}")
        return out


def first_by_kind(differences: list[Difference]) -> dict[str, Difference]:
    """The first difference of each signature (lake, kind, error line)."""
    out: dict[str, Difference] = {}
    for d in differences:
        out.setdefault(d.signature(), d)
    return out


def campaign(
    work: Path,
    settings: Settings,
    *,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the random walk of ``settings`` in ``work``; returns the summary (JSON-able)."""
    started = time.perf_counter()
    walk = Walk(settings)
    camp = Campaign(work, settings, log=log, families=walk.texts.family)
    log(
        f"seed {settings.seed}: {'near' if settings.near_dedup else 'exact-only'} dedup, "
        f"chunk_size {settings.chunk_size}, {settings.steps} steps"
    )
    for folder in FOLDERS:  # one file per folder to start with
        step = walk.add(camp.tree, folder)
        assert step is not None
        camp.execute(step)
    while len(camp.history) < settings.steps:
        step = walk.next(camp.tree)  # from the seed and the tree alone
        o = camp.execute(step)
        if step.kind not in TREE_KINDS:
            log(
                f"{len(camp.history):4d}. {step.describe()}"
                + (f"  [{'; '.join(o.notes)}]" if o.notes else "")
                + f"  ({'checked, ' if o.checked else ''}{o.seconds:.1f} s)"
            )
    if not any(o.checked for o in camp.outcomes[-1:]):  # end on a checked ingest
        camp.execute(Step("ingest"))
        log(f"{len(camp.history):4d}. ingest (the last step)")
    return summarise(camp, settings, time.perf_counter() - started)


def summarise(camp: Campaign, settings: Settings, seconds: float) -> dict[str, Any]:
    firsts = first_by_kind(camp.differences)
    return {
        "ok": not camp.differences,
        "seed": settings.seed,
        "near_dedup": settings.near_dedup,
        "steps_run": len(camp.history),
        "steps_by_kind": dict(sorted(camp.kinds.items())),
        "ingests_checked": camp.ingests_checked,
        "kills": dict(camp.kills),
        "differences_found": len(camp.differences),
        "difference_kinds": {
            k: {
                "first_step": d.step,
                "times": sum(1 for x in camp.differences if x.signature() == k),
                "example": d.detail,
            }
            for k, d in firsts.items()
        },
        "differences": [asdict(d) for d in camp.differences],
        "notes": dict(camp.notes),
        "seconds": round(seconds, 1),
        "settings": {**asdict(settings), "near_dedup": settings.near_dedup},
        "history": camp.history_lines(),
        "steps": [s.to_json() for s in camp.history],
        "families": dict(camp.families or {}) if settings.near_dedup else {},
    }


def failure_report(summary: dict[str, Any], limit: int = 8) -> str:
    """The differences and the steps since the start, for an assertion message."""
    diffs = [Difference(**d) for d in summary["differences"]]
    if not diffs:
        return "no differences"
    upto = max(d.step for d in diffs[:limit])
    lines = [
        f"seed {summary['seed']} ({'near' if summary['near_dedup'] else 'exact-only'} "
        f"dedup): {len(diffs)} difference(s) in {summary['ingests_checked']} checked "
        "ingest(s); by kind (first step):"
    ]
    lines += [
        f"  {k}: first at step {v['first_step']}, {v['times']}x"
        for k, v in summary["difference_kinds"].items()
    ]
    lines.append("differences:")
    lines += ["  " + d.line()[:1000] for d in diffs[:limit]]
    lines.append(f"steps since the start (up to step {upto}):")
    lines += summary["history"][:upto]
    return "\n".join(lines)


# -- replay and shrink --------------------------------------------------------------------------
def replay(
    work: Path,
    settings: Settings,
    steps: list[Step],
    families: dict[str, int],
    stop_at: str | None = None,
    log: Callable[[str], None] = lambda _m: None,
    check_from: int = 0,
) -> Campaign:
    """Execute ``steps`` on a fresh work folder; checks after every successful ingest (from
    step ``check_from`` on); with ``stop_at``, stops at the first difference of that kind."""
    camp = Campaign(
        work, settings, log=log, families=families, stop_at=stop_at, check_from=check_from
    )
    for step in steps:
        camp.execute(step)
        if camp.stopped:
            break
    return camp


def shrink(
    work: Path,
    settings: Settings,
    steps: list[Step],
    families: dict[str, int],
    target: str,
    budget: float,
    log: Callable[[str], None] = print,
) -> list[Step]:
    """A shorter step list that still shows a difference with signature ``target``
    (``Difference.signature``) at its last step: delta debugging (remove runs of steps,
    halving the run length when none can go), then ingests without their kills. Only the
    last step is checked, to save clean runs."""
    deadline = time.monotonic() + budget

    skipped: set[int] = set()  # steps that did not apply in the last reproducing replay

    def fails(candidate: list[Step]) -> bool:
        if not candidate or candidate[-1].kind != "ingest":
            return False
        camp = replay(
            work, settings, candidate, families, stop_at=target, check_from=len(candidate)
        )
        bad = any("two texts" in n for o in camp.outcomes for n in o.notes)
        if camp.stopped and not bad:
            skipped.clear()
            skipped.update(
                i
                for i, o in enumerate(camp.outcomes)
                if o.notes and o.notes[0].startswith("skipped")
            )
            return True
        return False

    if not fails(steps):
        log(f"  {target}: does not reproduce on replay")
        return steps
    # Ingests and lake commands cost seconds each, file changes nothing: drop them first.
    light = [s for s in steps[:-1] if s.kind in TREE_KINDS] + [Step("ingest")]
    plain = [Step("ingest") if s.kills else s for s in steps]
    for candidate in (light, plain):
        if candidate != steps and fails(candidate):
            steps = candidate
            log(f"  {target}: {len(steps)} steps")
            break
    for i in reversed(range(len(steps) - 1)):
        if steps[i].kind not in TREE_KINDS and time.monotonic() < deadline:
            candidate = steps[:i] + steps[i + 1 :]
            if fails(candidate):
                steps = candidate
                log(f"  {target}: {len(steps)} steps")
    size = max(1, len(steps) // 2)
    while size >= 1 and time.monotonic() < deadline:
        i, removed = 0, False
        while i < len(steps) - 1 and time.monotonic() < deadline:
            candidate = steps[:i] + steps[i + size :]
            if fails(candidate):
                steps, removed = candidate, True
                log(f"  {target}: {len(steps)} steps")
            else:
                i += size
        if not removed:
            size //= 2
    for i, step in enumerate(steps):
        if step.kills and time.monotonic() < deadline:
            candidate = [*steps[:i], Step("ingest"), *steps[i + 1 :]]
            if fails(candidate):
                steps = candidate
    fails(steps)  # which steps are no-ops in the final list (they change nothing: dropped)
    return [s for i, s in enumerate(steps) if i not in skipped]


# -- command line -------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=300, help="steps of the walk (default 300)")
    ap.add_argument(
        "--seed",
        type=int,
        default=1,
        help="seed (default 1); odd seeds use near dedup unless --near/--exact",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--near", dest="near", action="store_true", default=None)
    mode.add_argument("--exact", dest="near", action="store_false")
    ap.add_argument(
        "--ingest-every", type=float, default=8.0, help="mean steps per ingest (default 8)"
    )
    ap.add_argument(
        "--kill-rate", type=float, default=0.4, help="share of ingests killed first (default 0.4)"
    )
    ap.add_argument(
        "--kill-modes", default="fault,timer", help="fault, timer or both (default fault,timer)"
    )
    ap.add_argument("--workers", type=int, default=1, help="--workers of every ingest")
    ap.add_argument("--deciders", type=int, default=0, help="[ingest] deciders (default 0)")
    ap.add_argument("--chunk-size", default="1KiB", help="[ingest].chunk_size (default 1KiB)")
    ap.add_argument(
        "--no-reset", action="store_true", help="keep going on the model lake after a difference"
    )
    ap.add_argument(
        "--shrink",
        action="store_true",
        help="find a minimal step list for the first difference of each kind",
    )
    ap.add_argument(
        "--shrink-budget",
        type=float,
        default=900.0,
        help="seconds per kind for --shrink (default 900)",
    )
    ap.add_argument(
        "--shrink-only", default="", help="with --shrink: only the kinds containing this text"
    )
    ap.add_argument(
        "--replay",
        type=Path,
        default=None,
        help="run the steps of this JSON summary (its settings) instead of a walk",
    )
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    settings = Settings(
        seed=args.seed,
        steps=args.steps,
        near=args.near,
        ingest_every=args.ingest_every,
        kill_rate=args.kill_rate,
        kill_modes=tuple(args.kill_modes.split(",")),
        workers=args.workers,
        deciders=args.deciders,
        reset_on_difference=not args.no_reset,
        chunk_size=args.chunk_size,
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="lakecurate-model-"))
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    try:
        if args.replay:
            old = json.loads(args.replay.read_text(encoding="utf-8"))
            keep = {k: v for k, v in old["settings"].items() if k in Settings.__dataclass_fields__}
            keep["kill_modes"] = tuple(keep.get("kill_modes", ()))
            settings = Settings(**keep)
            steps = [Step.from_json(s) for s in old["steps"]]
            t0 = time.perf_counter()
            camp = replay(work, settings, steps, old.get("families", {}), log=log)
            summary = summarise(camp, settings, time.perf_counter() - t0)
        else:
            summary = campaign(work, settings, log=log)
        if args.shrink and summary["differences"]:
            minimal: dict[str, list[str]] = {}
            steps = [Step.from_json(s) for s in summary["steps"]]
            for kind, first in summary["difference_kinds"].items():
                if args.shrink_only not in kind or "after the second ingest" in kind:
                    continue
                log(f"shrinking {kind} (first at step {first['first_step']})")
                small = shrink(
                    work / "shrink",
                    settings,
                    steps[: first["first_step"]],
                    summary["families"],
                    kind,
                    args.shrink_budget,
                    log,
                )
                minimal[kind] = [s.detail() for s in small]
            summary["minimal_reproductions"] = minimal
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    summary["started"] = started
    summary["benchmark_command"] = "python benchmarks/model_campaign.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    summary["load_average"] = os.getloadavg()
    summary["environment"] = chaos.environment()
    summary["git_commit"] = summary["environment"]["git"]["commit"]
    brief = {
        k: v
        for k, v in summary.items()
        if k not in ("differences", "history", "steps", "families", "environment")
    }
    print(json.dumps(brief, indent=2))
    if summary["differences"]:
        print(failure_report(summary, limit=20), file=sys.stderr)
    chaos.write_summary(summary, args.out)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
