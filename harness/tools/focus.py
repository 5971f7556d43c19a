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

Deliberate deviations from the paper: no summary and no model; only rows move (prose, lists and links stay
where they are, so the page keeps everything it had); the text is identical in every backend (the world
toolbox, direct HTTP, Chromium) because each applies this one function to the same page text.
"""

from __future__ import annotations

import re

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


def row_scores(text: str, goal: str) -> list[int]:
    """Per line of ``text``, how well it answers ``goal`` (0 for lines that are not table rows)."""
    lines = text.split("\n")
    title = set(_words(lines[0][2:])) if lines and lines[0].startswith("# ") else set()
    keys = [w for w in _words(goal) if w not in title]
    for pair, word in IDIOMS.items():
        if pair <= set(keys):
            keys = [k for k in keys if k not in pair] + [word]
    scores = []
    for line in lines:
        label = row_label(line)
        label_words = _words(label) if label else []
        scores.append(sum(max((_match(k, w) for w in label_words), default=0) for k in keys))
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
