"""Generate the small, deliberately *dirty* example corpus bundled in ``examples/corpus/``.

Why this exists
---------------
lakecurate's ingestion, dedup and quality filters need realistic input to be exercised
end to end, in tests and in demos, without downloading anything. Real crawls cannot be
shipped, so this script synthesises a corpus that looks like one: English-like documents
(plus a few French, Spanish and Chinese ones) in four storage formats, salted with the
kinds of dirt a curation pipeline must handle, at positions that are fixed and documented
below. Output is byte-for-byte reproducible for a given ``--seed`` and ``--scale`` (and
given versions of zlib, libzstd and pyarrow), so the bundled files can be regenerated and
checked in CI.

Usage::

    python examples/generate_corpus.py OUT_DIR [--seed 7] [--scale 1.0] [--print-layout]

Files (record counts at scale 1.0; files are processed by lakecurate in sorted path order,
which is also the order they are built in here)::

    books.parquet      400 records  columns id, text, url, source (all string), zstd
                                    compression, row groups of 100 rows (4 row groups)
    forum.jsonl.zst    400 records  zstd level 3, one frame, no threads
    web_a.jsonl       1500 records  plain JSONL, ~1.3 MB (5 chunks of 256 KiB); 1501 lines
                                    (one extra blank line), see below for the broken ones
    web_b.jsonl.gz     500 records  gzip, mtime=0, empty name; one line is malformed JSON

Each JSONL line is ``{"id": "<prefix>-<n>", "text": ..., "url": ..., "source": ...}``
(keys in that order, ``json.dumps(..., ensure_ascii=False)``, ``\n``-terminated), ``n``
being the 0-based record index in that file; ``source`` is the prefix. Blank lines are not
records and take no index.

Where the dirt is
-----------------
Roles are a pure function of the record index ``i`` (the seed only changes the words and
which originals get copied), so positions are the same for every seed at a given scale:

* ``i % 100 in {11, 23, 36, 48, 59, 71, 84, 96}`` -> exact duplicate (8 %): the text of an
  earlier clean English document, copied byte for byte, with a new id and url. The k-th
  exact duplicate slot of a file takes its original from, in turn:
  books -> books; forum -> books, forum; web_a -> books, forum, web_a, web_a;
  web_b -> web_a, web_a, books, forum, web_b. So the copy always comes *later* in
  processing order than its original, either in a later file or later in the same file.
* ``i % 100 in {17, 42, 63, 78, 91}`` -> near duplicate (5 %), sourced the same way, and
  altered in turn (k-th near slot of the file) by: substituting 2-3 words, inserting 2-3
  words, deleting 2-3 words, appending trailing whitespace, changing the final punctuation.
* ``i % 100 in {29, 67, 88}`` -> keyword-stuffed spam (3 %); offsets 29 and 88 are pure
  stuffing ("BUY CHEAP VIAGRA CASINO BONUS CLICK HERE ..."), 67 is a short normal text
  followed by a stuffed block.
* ``i % 100 in {5, 33, 54, 75}`` -> boilerplate page (4 %), in turn (k-th boilerplate slot):
  cookie banner ("Accept cookies", "Privacy Policy | Terms of Use"), newsletter ("Subscribe
  to our newsletter"), lorem ipsum filler, "JavaScript is required" notice. These are short
  (about 230-1500 characters).
* ``i % 200 == 14`` -> French, ``i % 200 == 114`` -> Spanish, ``i % 200 == 157`` ->
  Chinese (no spaces); all 300+ characters.
* Empty text ``""`` at the first clean index at or after 10 %, 50 % and 85 % of each file;
  whitespace-only text at 30 % (``"   \n\t  "``), 65 % (``"\n\n"``) and 95 %
  (``" \t \t "``). Being equal strings, these are also exact duplicates across files.
* Every other index is a clean English document (300-3000 characters, a title / greeting /
  chapter line and several paragraphs separated by ``\n``).

Apart from the intended exact duplicates and the empty / whitespace-only texts, every text
in the corpus is unique (the generator re-draws on a collision).

Only in ``web_a.jsonl`` (each at the first clean index at or after the given fraction, so
they fall in different 256 KiB chunks; their texts are fresh, never duplicate sources):
12 % malformed JSON line (``{"id": ..., "text": "unterminated ...`` with no closing quote
or brace), 27 % line with the raw bytes ``\xff\xfe`` inside the text (invalid UTF-8),
41 % blank line (inserted *before* that record, which is itself a normal record), 55 %
record without a ``text`` key, 68 % ``text`` is the number ``31415926``, 80 % ``text`` is
``null``, 92 % a normal record whose line ends with ``\r\n``.

Only in ``web_b.jsonl.gz``: at 60 % a malformed JSON line (closing brace missing).

At scale 1.0 these resolve to the following record indexes n (the 1-based line number in
web_a.jsonl is n + 1 before the blank line and n + 2 after it, i.e. for n >= 615):
empty: books and forum 40, 200, 340; web_a 150, 750, 1276; web_b 50, 250, 425.
whitespace-only: books and forum 120, 260, 380; web_a 450, 976, 1425; web_b 150, 325, 476.
web_a: malformed JSON 180 (line 181), invalid UTF-8 406 (line 407), blank line 616 (just
before record 615), no ``text`` 825 (line 827), numeric text 1020 (line 1022), null text
1200 (line 1202), CRLF 1380 (line 1382). web_b: malformed JSON 300 (line 301).
Run with ``--print-layout`` for the full per-record list (including which original each
duplicate copies).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

# --------------------------------------------------------------------------------------
# Vocabulary (written for this file)
# --------------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    """Split a whitespace-separated word list."""
    return text.split()


NOUNS = _words("""
account answer area article author bank book box bridge budget building business camera
car card care case center chance change child choice church city class coast code
community company computer council country course court culture customer data day deal
decision design detail development device difference dinner director discussion doctor
door dream driver economy edge effect energy engine evening event example experience
factory family farm father feature field film fire floor flower food forest friend
future game garden glass goal government group guide hand health heart history home
hospital hotel house idea image industry island issue job journey kitchen lake land
language law leader lesson letter level library light line list market meeting member
memory message method minute model moment money month morning mother mountain movie
museum music name nation network news night number office officer order owner page
painting paper parent park part party patient pattern people period person phone picture
piece place plan plant player point police policy pool price problem process product
program project question radio rain reason record region report research result river
road room rule school science season second sector service share ship shop side signal
site skill sky society software song sound source space station step stone story street
student study summer system table teacher team test theory thing time tool tower town
trade train tree trip truth unit valley value village voice wall water way weather week
window winter word worker world writer year
""")

ADJECTIVES = _words("""
able active ancient angry basic beautiful best better big bitter bright broad busy calm
careful central cheap clean clear close cold common complex cool correct dark deep
different difficult early easy empty entire exact fair famous fast final fine firm
foreign formal free fresh friendly full general gentle good great green happy hard heavy
high honest huge important large late legal little local long loud low main major modern
narrow natural nearby new nice normal old open orange personal plain political poor
popular possible private public quick quiet rare ready real recent red rich right rough
sad safe serious sharp short simple slow small smart soft special strange strong sudden
sweet tall thin tiny tired true typical useful usual warm weak wide wild wise wooden
young
""")

# base:third_person:past, for verbs that are irregular or need doubled consonants.
VERB_FORMS = _words("""
add allow answer appear ask build:builds:built buy:buys:bought call carry:carries:carried
change check choose:chooses:chose clean close collect cook cover create cross decide
describe design discover draw:draws:drew drive:drives:drove enjoy explain fill find:finds:found
finish fix:fixes:fixed follow gather grow:grows:grew help hold:holds:held improve include
join keep:keeps:kept learn leave:leaves:left listen live look love make:makes:made mention
move need notice offer open order paint pass plan:plans:planned plant play prepare present
protect pull push reach read:reads:read receive remember repair report return save
see:sees:saw sell:sells:sold send:sends:sent share show start stop:stops:stopped
study:studies:studied support take:takes:took teach:teaches:taught test touch train travel
try:tries:tried turn use visit wait walk want wash:washes:washed watch:watches:watched
win:wins:won write:writes:wrote
""")

ADVERBS = _words("""
actually almost already always carefully certainly clearly completely early easily
especially finally gently happily honestly later mostly nearly never often perhaps
quickly quietly rarely really recently slowly sometimes soon suddenly together usually
""")

PREPOSITIONS = _words("in on near behind under above across along around beside beyond")
PREPOSITIONS += _words("inside outside through toward with without after before during")

# fmt: off
CONNECTORS = [
    "However,", "Meanwhile,", "In the end,", "For example,", "At the same time,",
    "As a result,", "Still,", "Later that week,", "On the other hand,", "In fact,",
    "Even so,", "Of course,", "After a while,", "By contrast,", "Most of the time,",
]

MODALS = _words("can could should would might must will may")
SUBJECT_PRONOUNS = _words("I we they you she he")
DETERMINERS = ["the", "the", "the", "a", "this", "that", "every", "our", "their", "one"]
PEOPLE = [
    "Anna", "Tomas", "Maya", "Oliver", "Priya", "Lucas", "Hana", "Samuel", "Elena", "Noah",
    "Grace", "Victor", "Leila", "Daniel", "Iris", "Marco", "Nora", "Felix", "Ruth", "Omar",
]
PLACES = [
    "Eastbrook", "Millford", "the north valley", "Port Saren", "the old quarter",
    "Linden Park", "the river district", "Harlow", "Westmere", "the coastal towns",
]
FORUM_GREETINGS = [
    "Hi all,", "Hello everyone,", "Quick question:", "Thanks for the replies so far.",
    "Update:", "Long time reader, first post.", "Hey folks,", "Following up on my last post.",
]
FORUM_SIGNOFFS = [
    "Thanks in advance!", "Cheers,", "Any advice is welcome.", "Hope this helps someone.",
    "Let me know what you think.", "Edit: fixed a typo.", "Thanks again \U0001f642",
]

FRENCH = _words("""
le la les un une des et est dans sur avec pour pas plus mais nous vous ils elle maison
ville jour temps eau soleil travail famille ami rue marche pain livre enfant monde petit
grand beau nouveau vieux toujours souvent aujourd'hui demain hier ici voir faire aller
venir prendre donner trouver parler manger regarder café école été fenêtre très déjà
""")

SPANISH = _words("""
el la los las un una y es en con para por pero muy más nosotros ellos casa ciudad día
tiempo agua sol trabajo familia amigo calle mercado pan libro niño mundo pequeño grande
bonito nuevo viejo siempre mañana ayer aquí ver hacer ir venir tomar dar encontrar hablar
comer mirar escuela verano ventana también año señor corazón
""")

CHINESE_CHARS = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同"
    "工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理"
    "起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义"
    "事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结"
)

LOREM = _words("""
lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut
labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco
laboris nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate
velit esse cillum fugiat nulla pariatur excepteur sint occaecat cupidatat non proident
sunt culpa qui officia deserunt mollit anim id est laborum
""")

SPAM_PHRASES = [
    "buy cheap viagra", "casino bonus", "click here", "free money", "best price",
    "limited offer", "online pharmacy", "win big now", "100% free", "earn $$$ fast",
    "no prescription", "hot singles", "act now", "lowest price guaranteed",
]

DOMAINS = {
    "web_a": [
        "harbor-news.example.com", "quietpine.example.org", "dailyledger.example.net",
        "greenroute.example.com", "citywire.example.org", "maplehouse.example.com",
    ],
    "web_b": [
        "northstar-blog.example.com", "tinkerbench.example.net", "kitchenlog.example.org",
        "wanderpost.example.com",
    ],
    "forum": ["forum.example.org", "community.example.net", "boards.example.com"],
    "books": ["library.example.org", "openshelf.example.net"],
}

# fmt: on

# --------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------

BASE_COUNTS = {"books": 400, "forum": 400, "web_a": 1500, "web_b": 500}
FILE_NAMES = {
    "books": "books.parquet",
    "forum": "forum.jsonl.zst",
    "web_a": "web_a.jsonl",
    "web_b": "web_b.jsonl.gz",
}
PROCESSING_ORDER = ("books", "forum", "web_a", "web_b")
PARQUET_ROW_GROUP = 100

EXACT_OFFSETS = (11, 23, 36, 48, 59, 71, 84, 96)
NEAR_OFFSETS = (17, 42, 63, 78, 91)
SPAM_OFFSETS = (29, 67, 88)
BOILERPLATE_OFFSETS = (5, 33, 54, 75)
FOREIGN_OFFSETS = {14: "french", 114: "spanish", 157: "chinese"}  # i % 200

DUP_SOURCES = {
    "books": ("books",),
    "forum": ("books", "forum"),
    "web_a": ("books", "forum", "web_a", "web_a"),
    "web_b": ("web_a", "web_a", "books", "forum", "web_b"),
}
NEAR_VARIANTS = ("substitute", "insert", "delete", "trailing_ws", "punct")
BOILERPLATE_KINDS = ("cookies", "newsletter", "lorem", "javascript")

EMPTY_FRACTIONS = (0.10, 0.50, 0.85)
WHITESPACE_FRACTIONS = ((0.30, "   \n\t  "), (0.65, "\n\n"), (0.95, " \t \t "))
WEB_A_SPECIAL_FRACTIONS = (
    (0.12, "malformed_json"),
    (0.27, "invalid_utf8"),
    (0.41, "blank_line_before"),
    (0.55, "missing_text"),
    (0.68, "numeric_text"),
    (0.80, "null_text"),
    (0.92, "crlf"),
)
WEB_B_SPECIAL_FRACTIONS = ((0.60, "malformed_json"),)

BAD_BYTES_TOKEN = "@@INVALID_UTF8@@"
MIN_TEXT, MAX_TEXT = 300, 3000

Record = dict[str, object]


def _cycle_role(i: int) -> str:
    """Role of record ``i`` from the fixed offset tables (before fraction-placed roles)."""
    r = i % 100
    if r in EXACT_OFFSETS:
        return "exact_dup"
    if r in NEAR_OFFSETS:
        return "near_dup"
    if r in SPAM_OFFSETS:
        return "spam"
    if r in BOILERPLATE_OFFSETS:
        return "boilerplate"
    if i % 200 in FOREIGN_OFFSETS:
        return FOREIGN_OFFSETS[i % 200]
    return "clean"


def _layout(prefix: str, n: int) -> list[str]:
    """Return the role of every record index of one file."""
    roles = [_cycle_role(i) for i in range(n)]

    def place(fraction: float, role: str) -> None:
        i = int(n * fraction)
        while i < n and roles[i] != "clean":
            i += 1
        if i >= n:
            raise ValueError(f"{prefix}: no clean slot left for {role} (scale too small)")
        roles[i] = role

    for fraction in EMPTY_FRACTIONS:
        place(fraction, "empty")
    for k, (fraction, _) in enumerate(WHITESPACE_FRACTIONS):
        place(fraction, f"whitespace{k}")
    specials = {"web_a": WEB_A_SPECIAL_FRACTIONS, "web_b": WEB_B_SPECIAL_FRACTIONS}
    for fraction, role in specials.get(prefix, ()):
        place(fraction, role)
    return roles


# --------------------------------------------------------------------------------------
# Text synthesis
# --------------------------------------------------------------------------------------


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    if noun in ("person",):
        return "people"
    if noun in ("child",):
        return "children"
    if noun == "people":
        return "people"
    return noun + "s"


def _article(word: str) -> str:
    """Indefinite article for ``word`` (every u-word in the vocabulary sounds like "you")."""
    return "an" if word[0] in "aeio" or word.startswith("hon") else "a"


def _verb_table() -> list[tuple[str, str, str]]:
    table = []
    for entry in VERB_FORMS:
        if ":" in entry:
            base, third, past = entry.split(":")
        else:
            base = entry
            third = base + "s"
            past = base + "d" if base.endswith("e") else base + "ed"
        table.append((base, third, past))
    return table


VERBS = _verb_table()


class TextMaker:
    """Builds sentences, paragraphs and documents from the embedded vocabulary."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    # -- small pieces ------------------------------------------------------------------
    def noun_phrase(self, plural: bool = False) -> str:
        rng = self.rng
        noun = rng.choice(NOUNS)
        if plural:
            words = [rng.choice(["the", "many", "some", "few", "most", "our", "local"])]
            if rng.random() < 0.5:
                words.append(rng.choice(ADJECTIVES))
            words.append(_plural(noun))
            return " ".join(words)
        det = rng.choice(DETERMINERS)
        words = [det]
        if rng.random() < 0.55:
            words.append(rng.choice(ADJECTIVES))
        words.append(noun)
        if det == "a":
            words[0] = _article(words[1])
        return " ".join(words)

    def sentence(self) -> str:
        rng = self.rng
        base, third, past = rng.choice(VERBS)
        kind = rng.randrange(10)
        if kind == 0:
            s = f"{self.noun_phrase()} {past} {self.noun_phrase()} {rng.choice(PREPOSITIONS)} "
            s += f"{self.noun_phrase()}."
        elif kind == 1:
            s = f"{rng.choice(SUBJECT_PRONOUNS)} {rng.choice(MODALS)} {base} "
            s += f"{self.noun_phrase(plural=True)} {rng.choice(ADVERBS)}."
        elif kind == 2:
            s = f"{rng.choice(CONNECTORS)} {self.noun_phrase()} {third} "
            s += f"{self.noun_phrase()} {rng.choice(PREPOSITIONS)} {rng.choice(PLACES)}."
        elif kind == 3:
            who = rng.choice(PEOPLE)
            s = f"{who} said that {self.noun_phrase()} was {rng.choice(ADVERBS)} "
            s += f"{rng.choice(ADJECTIVES)}."
        elif kind == 4:
            year = rng.randrange(1950, 2024)
            count = rng.randrange(2, 900)
            s = f"In {year}, {self.noun_phrase()} in {rng.choice(PLACES)} {past} {count} "
            s += f"{_plural(rng.choice(NOUNS))}."
        elif kind == 5:
            s = f"Why {rng.choice(['does', 'would', 'should'])} {self.noun_phrase()} "
            s += f"{base} {self.noun_phrase()}?"
        elif kind == 6:
            quote = f"{rng.choice(SUBJECT_PRONOUNS).capitalize()} {rng.choice(MODALS)} "
            quote += f"{base} {self.noun_phrase()} {rng.choice(['today', 'tomorrow', 'soon'])}"
            s = f'"{quote}," {rng.choice(PEOPLE)} told {self.noun_phrase()}.'
        elif kind == 7:
            s = f"{self.noun_phrase(plural=True)} {rng.choice(ADVERBS)} {base} "
            s += f"{self.noun_phrase()}, and {self.noun_phrase(plural=True)} {base} "
            s += f"{self.noun_phrase()}."
        elif kind == 8:
            adj = rng.choice(ADJECTIVES)
            det = rng.choice(["no", "a", "one", "little"])
            if det == "a":
                det = _article(adj)
            s = f"There is {det} {adj} {rng.choice(NOUNS)} like "
            s += f"{self.noun_phrase()} {rng.choice(PREPOSITIONS)} {self.noun_phrase()}."
        else:
            s = f"{rng.choice(SUBJECT_PRONOUNS)} {rng.choice(ADVERBS)} {past} that "
            s += f"{self.noun_phrase()} {rng.choice(MODALS)} {base} {self.noun_phrase()} "
            s += f"{rng.choice(['again', 'at last', 'for a while', 'in time', 'every day'])}."
        s = s.replace(" that that ", " that the ")
        return s[0].upper() + s[1:]

    def paragraph(self, low: int = 3, high: int = 7) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(low, high)))

    def title(self) -> str:
        rng = self.rng
        words = [rng.choice(ADJECTIVES), rng.choice(NOUNS)]
        noun = rng.choice(NOUNS)
        words += [rng.choice(PREPOSITIONS), rng.choice(["the", _article(noun)]), noun]
        if rng.random() < 0.4:
            words = ["How", "to", rng.choice(VERBS)[0], *words[:2]]
        small = {"a", "an", "the", "to", "in", "on", "with", "near", "after", "before", "under"}
        return " ".join(w if w in small and i > 0 else w.capitalize() for i, w in enumerate(words))

    def target_length(self) -> int:
        rng = self.rng
        return min(MAX_TEXT - 200, MIN_TEXT + int(rng.expovariate(1 / 330)))

    def _fit(
        self, head: list[str], make_block: Callable[[], str], tail: list[str] | None = None
    ) -> str:
        target = self.target_length()
        lines = list(head)
        tail = tail or []
        while True:
            lines.append(make_block())
            text = "\n".join(lines + tail)
            if len(text) >= target and len(lines) > len(head) + 1:
                break
        while len(text) > MAX_TEXT and len(lines) > len(head) + 1:
            lines.pop()
            text = "\n".join(lines + tail)
        while len(text) < MIN_TEXT:
            lines.append(make_block())
            text = "\n".join(lines + tail)
        return text[:MAX_TEXT]

    # -- documents per source -----------------------------------------------------------
    def web_doc(self) -> str:
        return self._fit([self.title()], lambda: self.paragraph(2, 5))

    def forum_doc(self) -> str:
        rng = self.rng
        tail = [rng.choice(FORUM_SIGNOFFS)]
        if tail[0] == "Cheers,":
            tail.append(rng.choice(PEOPLE))
        return self._fit([rng.choice(FORUM_GREETINGS)], lambda: self.paragraph(2, 4), tail)

    def book_doc(self) -> str:
        rng = self.rng
        head: list[str] = []
        if rng.random() < 0.3:
            head.append(f"CHAPTER {rng.randrange(1, 40)}")
        return self._fit(head, lambda: self.paragraph(4, 7))

    def doc_for(self, prefix: str) -> str:
        if prefix == "forum":
            return self.forum_doc()
        if prefix == "books":
            return self.book_doc()
        return self.web_doc()

    # -- non-English --------------------------------------------------------------------
    def latin_foreign(self, words: list[str]) -> str:
        rng = self.rng
        paragraphs: list[str] = []
        while len(paragraphs) < 2 or sum(len(p) + 1 for p in paragraphs) < MIN_TEXT:
            sentences = []
            for _ in range(rng.randint(3, 6)):
                ws = [rng.choice(words) for _ in range(rng.randint(6, 14))]
                sentences.append(" ".join(ws).capitalize() + rng.choice([".", ".", "!", "?"]))
            paragraphs.append(" ".join(sentences))
        return "\n".join(paragraphs)

    def chinese(self) -> str:
        rng = self.rng
        paragraphs: list[str] = []
        while len(paragraphs) < 2 or sum(len(p) + 1 for p in paragraphs) < MIN_TEXT:
            sentences = []
            for _ in range(rng.randint(4, 8)):
                clauses = [
                    "".join(rng.choice(CHINESE_CHARS) for _ in range(rng.randint(4, 12)))
                    for _ in range(rng.randint(1, 3))
                ]
                sentences.append("\uff0c".join(clauses) + "\u3002")
            paragraphs.append("".join(sentences))
        return "\n".join(paragraphs)

    # -- dirt ---------------------------------------------------------------------------
    def spam(self, mixed: bool) -> str:
        rng = self.rng
        reps = rng.randint(12, 40)
        stuffed = " ".join(rng.choice(SPAM_PHRASES) for _ in range(reps))
        stuffed = "BUY CHEAP VIAGRA CASINO BONUS CLICK HERE " + stuffed + " click here!!!"
        if mixed:
            return self.paragraph(2, 3) + "\n" + stuffed + "\n" + stuffed.lower()
        lines = [stuffed]
        for _ in range(rng.randint(1, 4)):
            lines.append(" ".join(rng.choice(SPAM_PHRASES) for _ in range(rng.randint(6, 14))))
        return "\n".join(lines)

    def boilerplate(self, kind: str) -> str:
        rng = self.rng
        nav = " | ".join(
            rng.sample(
                ["Home", "About", "Contact", "Blog", "Login", "Shop", "Careers", "Help", "Sitemap"],
                5,
            )
        )
        if kind == "cookies":
            lines = [
                nav,
                "We use cookies to improve your experience on our site. By continuing to "
                "browse you agree to our use of cookies.",
                "Accept cookies",
                rng.choice(["Manage preferences", "Reject all", "Cookie settings"]),
                self.sentence(),
                "Privacy Policy | Terms of Use",
                f"\u00a9 {rng.randrange(2005, 2024)} All rights reserved.",
            ]
        elif kind == "newsletter":
            lines = [
                "Subscribe to our newsletter",
                "Get the latest "
                + _plural(rng.choice(NOUNS))
                + " and "
                + _plural(rng.choice(NOUNS))
                + " delivered to your inbox every week.",
                "Enter your email address",
                "Subscribe",
                self.sentence(),
                "Privacy Policy | Terms of Use",
                nav,
            ]
        elif kind == "lorem":
            lines = []
            for _ in range(rng.randint(2, 4)):
                ws = [rng.choice(LOREM) for _ in range(rng.randint(25, 60))]
                lines.append(" ".join(ws).capitalize() + ".")
            lines[0] = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " + lines[0]
        else:
            lines = [
                "JavaScript is required to view this page.",
                "Please enable JavaScript in your browser settings and reload the page.",
                "You need to enable JavaScript to run this app.",
                self.sentence(),
                nav,
            ]
        return "\n".join(lines)

    def near_duplicate(self, text: str, variant: str) -> str:
        """Return a copy of ``text`` that differs from it in a few words or at the end."""
        rng = self.rng
        if variant == "trailing_ws":
            return text + rng.choice(["  ", "\n", " \n", "\t"])
        if variant == "punct":
            if text.endswith((".", "?", "!")):
                return text[:-1] + rng.choice(["!", "...", "!!", ""])
            return text + "."
        words = text.split(" ")
        # Only touch plain words, so line breaks (tokens containing "\n") survive.
        plain = [j for j in range(1, len(words) - 1) if "\n" not in words[j]]
        edits = sorted(rng.sample(plain, rng.randint(2, 3)), reverse=True)
        for j in edits:
            if variant == "substitute":
                old = words[j]
                while words[j] == old:
                    words[j] = rng.choice(ADJECTIVES + NOUNS)
            elif variant == "insert":
                words.insert(j, rng.choice(ADVERBS + ADJECTIVES))
            else:
                del words[j]
        return " ".join(words)


# --------------------------------------------------------------------------------------
# Corpus assembly
# --------------------------------------------------------------------------------------


def _url(rng: random.Random, prefix: str, n: int) -> str:
    domain = rng.choice(DOMAINS[prefix])
    slug = "-".join(rng.choice(NOUNS + ADJECTIVES) for _ in range(rng.randint(2, 5)))
    if prefix == "forum":
        return f"https://{domain}/t/{slug}/{1000 + n * 7}"
    if prefix == "books":
        return f"https://{domain}/books/{slug}/ch{n % 40 + 1}"
    return f"https://{domain}/{rng.randrange(2015, 2025)}/{rng.randrange(1, 13):02d}/{slug}"


TEXT_SPECIALS = frozenset(
    {
        "blank_line_before",
        "crlf",
        "invalid_utf8",
        "malformed_json",
        "missing_text",
        "numeric_text",
        "null_text",
    }
)


def _produce(
    maker: TextMaker,
    *,
    prefix: str,
    role: str,
    n: int,
    k: int,
    note: dict[str, object],
    pool: dict[str, list[tuple[int, str]]],
) -> str:
    """Make the text of record ``n`` (the ``k``-th of its role in the file) of ``prefix``."""
    rng = maker.rng
    if role == "clean" or role in TEXT_SPECIALS:
        return maker.doc_for(prefix)
    if role in ("exact_dup", "near_dup"):
        sources = DUP_SOURCES[prefix]
        src_prefix = sources[k % len(sources)]
        src_n, src_text = rng.choice(pool[src_prefix])
        note["source_id"] = f"{src_prefix}-{src_n}"
        if role == "exact_dup":
            return src_text
        variant = NEAR_VARIANTS[k % len(NEAR_VARIANTS)]
        note["variant"] = variant
        return maker.near_duplicate(src_text, variant)
    if role == "spam":
        return maker.spam(mixed=(n % 100 == 67))
    if role == "boilerplate":
        kind = BOILERPLATE_KINDS[k % len(BOILERPLATE_KINDS)]
        note["kind"] = kind
        return maker.boilerplate(kind)
    if role == "french":
        return maker.latin_foreign(FRENCH)
    if role == "spanish":
        return maker.latin_foreign(SPANISH)
    if role == "chinese":
        return maker.chinese()
    if role == "empty":
        return ""
    if role.startswith("whitespace"):
        note["role"] = "whitespace"
        return WHITESPACE_FRACTIONS[int(role[-1])][1]
    raise AssertionError(role)  # layout and this chain are kept in sync


def build(seed: int = 7, scale: float = 1.0) -> tuple[dict[str, list[Record]], list[dict]]:
    """Build all records in memory.

    Returns ``(records, layout)``: records per file prefix (dicts; web_a/web_b specials
    carry a private ``_special`` key used by the writers) and one layout entry per
    record that is not a clean unique document. Apart from the intended exact duplicates
    (and the empty / whitespace-only texts), every text in the corpus is unique.
    """
    if scale <= 0:
        raise ValueError("scale must be positive")
    rng = random.Random(seed)
    maker = TextMaker(rng)
    clean_pool: dict[str, list[tuple[int, str]]] = {p: [] for p in PROCESSING_ORDER}
    seen: set[str] = set()
    records: dict[str, list[Record]] = {}
    layout: list[dict] = []

    for prefix in PROCESSING_ORDER:
        n_records = max(40, round(BASE_COUNTS[prefix] * scale))
        roles = _layout(prefix, n_records)
        out: list[Record] = []
        counters = {"exact_dup": 0, "near_dup": 0, "boilerplate": 0}
        for n, role in enumerate(roles):
            rid = f"{prefix}-{n}"
            url = _url(rng, prefix, n)
            note: dict[str, object] = {"file": FILE_NAMES[prefix], "id": rid, "role": role}
            k = counters.get(role, 0)
            if role in counters:
                counters[role] += 1

            args = {"prefix": prefix, "role": role, "n": n, "k": k, "note": note}
            text = _produce(maker, pool=clean_pool, **args)
            if role != "exact_dup" and text.strip():
                while text in seen:  # rare; keeps every non-duplicate text unique
                    text = _produce(maker, pool=clean_pool, **args)
                seen.add(text)
            if role == "clean":
                clean_pool[prefix].append((n, text))
            rec: Record = {"id": rid, "text": text, "url": url, "source": prefix}
            if role in TEXT_SPECIALS:
                rec["_special"] = role
            out.append(rec)
            if role != "clean":
                if note["role"] == "whitespace":
                    note["text"] = text
                layout.append(note)
        records[prefix] = out
    return records, layout


def _jsonl_line(rec: Record) -> bytes:
    """Serialise one record, applying its ``_special`` dirt if any."""
    special = rec.get("_special")
    body: dict[str, object] = {k: v for k, v in rec.items() if k != "_special"}
    text = str(body["text"])
    if special == "malformed_json":
        snippet = text[:120].replace("\n", " ").replace('"', "'")
        return f'{{"id": "{body["id"]}", "text": "unterminated {snippet}\n'.encode()
    if special == "missing_text":
        del body["text"]
    elif special == "numeric_text":
        body["text"] = 31415926
    elif special == "null_text":
        body["text"] = None
    elif special == "invalid_utf8":
        cut = text.find(" ", len(text) // 2)
        body["text"] = text[:cut] + " " + BAD_BYTES_TOKEN + text[cut:]
    line = json.dumps(body, ensure_ascii=False).encode("utf-8")
    if special == "invalid_utf8":
        line = line.replace(BAD_BYTES_TOKEN.encode(), b"\xff\xfe")
    eol = b"\r\n" if special == "crlf" else b"\n"
    if special == "blank_line_before":
        return b"\n" + line + eol
    return line + eol


def _jsonl_bytes(records: list[Record], prefix: str) -> bytes:
    parts = []
    for rec in records:
        if prefix == "web_b" and rec.get("_special") == "malformed_json":
            body = {k: v for k, v in rec.items() if k != "_special"}
            parts.append(json.dumps(body, ensure_ascii=False).encode("utf-8")[:-1] + b"\n")
        else:
            parts.append(_jsonl_line(rec))
    return b"".join(parts)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def _zstd_bytes(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3, threads=0).compress(data)


def _parquet_bytes(records: list[Record]) -> bytes:
    cols = ("id", "text", "url", "source")
    table = pa.table({c: pa.array([str(r[c]) for r in records], type=pa.string()) for c in cols})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=PARQUET_ROW_GROUP, compression="zstd")
    return buf.getvalue()


def generate(out_dir: Path, seed: int = 7, scale: float = 1.0) -> list[Path]:
    """Write the four corpus files into ``out_dir`` and return their paths (sorted)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records, _ = build(seed, scale)
    payloads = {
        "books": _parquet_bytes(records["books"]),
        "forum": _zstd_bytes(_jsonl_bytes(records["forum"], "forum")),
        "web_a": _jsonl_bytes(records["web_a"], "web_a"),
        "web_b": _gzip_bytes(_jsonl_bytes(records["web_b"], "web_b")),
    }
    paths = []
    for prefix in PROCESSING_ORDER:
        path = out_dir / FILE_NAMES[prefix]
        _write_atomic(path, payloads[prefix])
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Generate lakecurate's deterministic dirty example corpus "
        "(web_a.jsonl, web_b.jsonl.gz, forum.jsonl.zst, books.parquet).",
    )
    parser.add_argument("out_dir", type=Path, help="directory to write the corpus files into")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default: 7)")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply record counts by this factor (default: 1.0, about 1.7 MB in total)",
    )
    parser.add_argument(
        "--print-layout",
        action="store_true",
        help="also print one JSON line per dirty record (file, id, role, source_id, ...)",
    )
    args = parser.parse_args(argv)
    for path in generate(args.out_dir, seed=args.seed, scale=args.scale):
        print(f"{path}\t{path.stat().st_size} bytes", file=sys.stderr)
    if args.print_layout:
        for note in build(args.seed, args.scale)[1]:
            print(json.dumps(note, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
