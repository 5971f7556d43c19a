"""BM25 search over every page of the offline world (docs/world.md), with ``bm25s``.

``SearchIndex.build(world)`` indexes each page's title (weighted x3) and its text
(:func:`harness.tools.html_text.html_to_text`); ``index.search(query, k, base_url)`` returns
:class:`harness.protocol.SearchHit` with absolute URLs and a snippet: the page sentence
sharing the most query words (first ~200 characters, link markers removed).

Deliberate decisions: tokens are lower-cased alphanumeric runs (no stemming, no stop words:
names are invented, so stemming only adds collisions); a page whose title equals the query
(case and spacing ignored) is ranked first, as real engines do for exact title matches -- BM25
alone almost always agrees, the rule makes "exact title query -> that page first" a guarantee
the tiny model can rely on (docs/models.md). More generally, pages whose whole title occurs in the
query as a phrase come first, the longest title first (an exact match is the longest there can be),
so that a query that is a whole task sentence ("Find the industry of Briozeath Systems.") finds the
entity's page as its name alone would (docs/world.md, "Search"). Pages with score 0 are never returned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import bm25s
import numpy as np

from harness.protocol import SearchHit
from harness.tools.html_text import html_to_text
from harness.world.generator import World

_TOKEN = re.compile(r"[a-z0-9]+")
_LINK = re.compile(r" \[[^\]\s]*\]")
_SENT = re.compile(r"(?<=[.!?])\s+")
SNIPPET_CHARS = 200
TITLE_WEIGHT = 3


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens (the index's and the queries' tokenizer)."""
    return _TOKEN.findall(text.lower())


@dataclass
class _Doc:
    path: str
    title: str
    sentences: list[tuple[str, frozenset[str]]]


class SearchIndex:
    """A BM25 index over the pages of one world."""

    def __init__(self, docs: list[_Doc], retriever: bm25s.BM25) -> None:
        self._docs = docs
        self._bm25 = retriever
        self._by_title = {" ".join(tokenize(d.title)): i for i, d in enumerate(docs)}
        self._longest_title = max((len(tokenize(d.title)) for d in docs), default=0)

    @classmethod
    def build(cls, world: World) -> SearchIndex:
        """Index every page of ``world`` (the portal and index pages included)."""
        docs, corpus = [], []
        for page in world.pages.values():
            text = html_to_text(page.html)
            lines = text.split("\n")[1:]  # line 0 is "# title"
            sentences = []
            for line in lines:
                clean = _LINK.sub("", line).strip(" |-")
                for s in _SENT.split(clean):
                    if s:
                        sentences.append((s, frozenset(tokenize(s))))
            docs.append(_Doc(page.path, page.title, sentences))
            corpus.append(tokenize(page.title) * TITLE_WEIGHT + tokenize("\n".join(lines)))
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        return cls(docs, retriever)

    def __len__(self) -> int:
        return len(self._docs)

    def search(self, query: str, k: int = 5, base_url: str = "") -> list[SearchHit]:
        """Top-``k`` hits for ``query``; URLs are ``base_url`` + page path (path only if empty)."""
        if k < 1:
            raise ValueError(f"SearchIndex.search: k must be >= 1, got {k}")
        qtok = tokenize(query)
        if not qtok:
            return []
        scores = self._bm25.get_scores(qtok)
        n = min(k, len(scores))
        top = np.argpartition(-scores, n - 1)[:n] if n < len(scores) else np.arange(len(scores))
        order = sorted((int(i) for i in top if scores[i] > 0), key=lambda i: (-float(scores[i]), i))
        named = self._titles_in(qtok)
        if named:
            order = named + [i for i in order if i not in named]
            order = order[:k]
        base = base_url.rstrip("/")
        qset = set(qtok)
        return [SearchHit(self._docs[i].title, base + self._docs[i].path, self._snippet(i, qset)) for i in order]

    def _titles_in(self, qtok: list[str]) -> list[int]:
        """Pages whose whole title is a run of the query's tokens, longest title first (then in page order)."""
        found: dict[int, int] = {}
        for n in range(min(len(qtok), self._longest_title), 0, -1):
            for start in range(len(qtok) - n + 1):
                i = self._by_title.get(" ".join(qtok[start:start + n]))
                if i is not None and i not in found:
                    found[i] = n
        return sorted(found, key=lambda i: (-found[i], i))

    def _snippet(self, i: int, qset: set[str]) -> str:
        best, best_n = "", -1
        doc = self._docs[i]
        for s, toks in doc.sentences:
            n = len(qset & toks) - (s == doc.title)  # the heading repeats the title: prefer real text
            if n > best_n:
                best, best_n = s, n
        if len(best) > SNIPPET_CHARS:
            best = best[: SNIPPET_CHARS - 3].rstrip() + "..."
        return best
