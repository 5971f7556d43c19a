"""The goal-guided visit of the tiny presets: the table rows that match the visit's goal come first (docs/tools.md,
"The goal-guided visit").

The paper's ``visit(url, goal)`` returns an LLM's summary of the page written for the ``goal``, so the agent
reads what it asked for at the top of its observation. A tiny model cannot afford a second model in the loop,
and a model of a few million parameters reads a page badly by meaning: asked for "the year of X", it copies a
value from the wrong row (docs/training.md, "Where b3 fails, agent by agent"; moving the answering row to the
top lifted held-out exact answers from 22-41 to 63-67 of 111 in a micro-experiment). :func:`focus_rows` is a
deterministic stand-in for that summary: the page as it is, with the table rows (``| label | value`` lines,
:mod:`harness.tools.html_text`) whose label best matches the goal's words moved to the top, just under the
title line (``# title``) when the page has one.

Matching knows nothing of any world: lower-case words, minus a few stop words and the words of the page's
title (the entity the page is about, named in the goal too); a goal word and a label word score 2 when equal
and 1 when they share their first :data:`STEM` letters; a row's score is the sum over the goal's words of their
best score against its label. The rows with the highest score (at least 1) move, in page order; nothing moves
when no label matches. :data:`IRREGULAR` maps the few English words whose forms share no prefix with the label's
word (``born`` and ``birth``; ``work`` and ``employer``; ``kind`` and ``category``), and :data:`IDIOMS` the word pairs that name one label
together (``city`` + ``born`` = ``birthplace``), so that a question works as a goal as well as a phrase does.

With ``tools.visit_links`` as well, a page on which no row matches the goal (a site's home page, a list of
products) gets its links ordered instead (:func:`focus_links`): inside each menu line (``A [url] | B [url]``) and
each run of list items (``- A [url] ...``), the links whose text or whose linked page matches the goal come
first. The linked page is read through the same tool without the goal (``peek``) and scored by the goal words its
row labels and listed links' texts contain (:func:`page_score`), so "How many years of warranty does X give on the Y?" puts ``Products`` first
on the home page (the products page lists Y) and ``Y`` first on the products page. It stands in for what a
summariser knows about where a site keeps what; a tiny model cannot choose a menu item by meaning
(docs/training.md, "Build b7").

Deliberate deviations from the paper: no summary and no model; only rows, and with ``visit_links`` links inside
their own line or list, move (prose and every other line stay where they are, so the page keeps everything it
had); the look-ahead reads each linked page once more (one level, never further); the text is identical in every
backend (the world toolbox, direct HTTP, Chromium) because each applies these functions to the same page text
and peeks through the same fetch as its visits.
"""

from __future__ import annotations

import re
from typing import Callable

STEM = 4
"""Letters two words must share at their start to count as the same stem ("founded" ~ "founding")."""

STOP_WORDS = frozenset({
    "a", "an", "and", "are", "at", "by", "did", "do", "does", "find", "for", "from", "give", "has", "how", "in", "is",
    "it", "its", "of", "on", "or", "page", "that", "the", "this", "to", "was", "what", "when", "where", "which",
    "who", "with", "website",
})
"""Words of a goal that say nothing about which row answers it."""

IRREGULAR = {"born": "birth", "work": "employer", "kind": "category"}
"""Word forms that share no prefix with their stem's other forms (or with the row label they ask for), mapped to
one of them ("Which organisation does X work for?" asks for the employer, "What kind of product is X?" for the
category)."""

IDIOMS = {frozenset({"city", "birth"}): "birthplace"}
"""Goal words that ask for one label together, replaced by it ("In which city was X born?" asks for the
birthplace, not the birth year)."""

_WORD = re.compile(r"[a-z]+")


def _words(text: str) -> list[str]:
    return [IRREGULAR.get(w, w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def _match(goal_word: str, label_word: str) -> int:
    if goal_word == label_word:
        return 2
    return 1 if len(goal_word) >= STEM and goal_word[:STEM] == label_word[:STEM] else 0


def row_label(line: str) -> str | None:
    """The first cell of a table row (``| label | value``), or None for any other line."""
    if not line.startswith("| "):
        return None
    return line.split("|")[1].strip()


def goal_keys(text: str, goal: str) -> list[str]:
    """The words of ``goal`` that can point at a part of the page ``text``: minus stop words and the words of the
    page's title line, with :data:`IRREGULAR` forms and :data:`IDIOMS` applied."""
    lines = text.split("\n", 1)
    title = set(_words(lines[0][2:])) if lines and lines[0].startswith("# ") else set()
    keys = [w for w in _words(goal) if w not in title]
    for pair, word in IDIOMS.items():
        if pair <= set(keys):
            keys = [k for k in keys if k not in pair] + [word]
    return keys


def label_score(label: str, keys: list[str]) -> int:
    """How well a row label or a link text matches the goal's ``keys`` (the sum over the keys of their best
    match with a word of ``label``)."""
    label_words = _words(label)
    return sum(max((_match(k, w) for w in label_words), default=0) for k in keys)


def row_scores(text: str, goal: str) -> list[int]:
    """Per line of ``text``, how well it answers ``goal`` (0 for lines that are not table rows)."""
    keys = goal_keys(text, goal)
    scores = []
    for line in text.split("\n"):
        label = row_label(line)
        scores.append(label_score(label, keys) if label else 0)
    return scores


def focus_rows(text: str, goal: str) -> str:
    """``text`` with the table rows that best match ``goal`` first (in page order; under the title line if any);
    unchanged when none match."""
    if not goal.strip():
        return text
    scores = row_scores(text, goal)
    best = max(scores, default=0)
    if best < 1:
        return text
    lines = text.split("\n")
    head = lines[:1] if lines[0].startswith("# ") else []  # a title line is never a row: it stays on top
    first = [line for line, s in zip(lines, scores) if s == best]
    rest = [line for line, s in zip(lines[len(head):], scores[len(head):]) if s != best]
    return "\n".join(head + first + rest)


# --- links (tools.visit_links) ------------------------------------------------------------------------------------

_LINK = re.compile(r"([^\[\]|\n]+?) \[([^\]\s]+)\]")
"""A link as :mod:`harness.tools.html_text` writes it: ``text [absolute url]``."""
_MENU_SEP = " | "


def _menu_items(line: str) -> list[tuple[str, str]] | None:
    """The links of a menu line (two or more ``text [url]`` joined by `` | `` and nothing else), else None."""
    items = line.split(_MENU_SEP)
    if len(items) < 2:
        return None
    links = [_LINK.fullmatch(item) for item in items]
    return [(m.group(1), m.group(2)) for m in links] if all(links) else None  # type: ignore[union-attr]


def _list_link(line: str) -> tuple[str, str] | None:
    """The first link of a list item (``- text [url] ...``), else None."""
    if not line.startswith("- "):
        return None
    m = _LINK.search(line, 2)
    return (m.group(1), m.group(2)) if m else None


def page_score(text: str, keys: list[str]) -> int:
    """How well a linked page matches the goal's ``keys``: the most goal words (2 points each) that one of its row
    labels or list items' link texts contains exactly. Exact words only, and no links inside rows or prose: a
    page that merely mentions the entity (a chief executive's row on an about page, "X launches Y" in the news)
    should not outrank the page that lists it (docs/tools.md)."""
    lines = text.split("\n")
    candidates = [label for label in map(row_label, lines) if label]
    candidates += [link[0] for link in map(_list_link, lines) if link]
    return max((2 * len(set(keys) & set(_words(c))) for c in candidates), default=0)


def focus_links(text: str, goal: str, peek: Callable[[str], str | None] | None = None) -> str:
    """``text`` with the links that best match ``goal`` first inside each menu line and each run of list items
    (a stable sort by score; nothing else moves). A link's score is its text's :func:`label_score`, or with
    ``peek`` (url -> the linked page's text, or None when it cannot be read) the linked page's
    :func:`page_score` when that is higher. Unchanged when no link scores at least 1."""
    if not goal.strip():
        return text
    keys = goal_keys(text, goal)
    if not keys:
        return text
    peeked: dict[str, int] = {}

    def score(link_text: str, url: str) -> int:
        own = label_score(link_text, keys)
        if peek is None:
            return own
        if url not in peeked:
            page = peek(url)
            peeked[url] = page_score(page, keys) if page else 0
        return max(own, peeked[url])

    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        menu = _menu_items(lines[i])
        if menu is not None:
            scores = [score(t, u) for t, u in menu]
            order = sorted(range(len(menu)), key=lambda j: -scores[j])  # stable: ties keep page order
            out.append(_MENU_SEP.join(lines[i].split(_MENU_SEP)[j] for j in order))
            i += 1
            continue
        run = []
        while i < len(lines) and _list_link(lines[i]) is not None:
            run.append(lines[i])
            i += 1
        if run:
            scores = [score(*_list_link(line)) for line in run]  # type: ignore[misc]
            out.extend(run[j] for j in sorted(range(len(run)), key=lambda j: -scores[j]))
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def focus_page(text: str, goal: str, links: bool = False, peek: Callable[[str], str | None] | None = None) -> str:
    """The goal-guided visit: :func:`focus_rows`; with ``links``, when no row matches, :func:`focus_links`
    (``peek`` reads a linked page, without the goal)."""
    if not goal.strip():
        return text
    if not links or max(row_scores(text, goal), default=0) >= 1:
        return focus_rows(text, goal)
    return focus_links(text, goal, peek)
