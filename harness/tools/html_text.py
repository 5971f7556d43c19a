"""HTML to agent-readable text: the one conversion both ``visit`` backends use (docs/tools.md).

The Playwright backend renders the page in Chromium and passes the rendered DOM's HTML here;
the direct backend passes the fetched HTML. On the offline world (static pages, no scripts)
both therefore yield the same text.

Rules: ``<script>``, ``<style>``, ``<noscript>``, ``<template>``, ``<head>`` content (except
the title) and ``<nav>`` are dropped; block elements start new lines; links are kept as
``text [url]`` so an agent can follow them; runs of whitespace collapse; the title, if any,
is the first line prefixed ``# ``.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

_SKIP = {"script", "style", "noscript", "template", "head", "nav", "svg"}
_BLOCK = {
    "p", "div", "section", "article", "main", "header", "footer", "aside", "li", "ul", "ol",
    "table", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "br", "hr", "dl", "dt", "dd",
    "blockquote", "pre", "figure", "figcaption", "body", "html",
}
_WS = re.compile(r"[ \t\r\f\v\u00a0]+")


class _Extractor(HTMLParser):
    def __init__(self, base_url: str | None) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip_depth = 0
        self._in_title = False
        self._href_stack: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if tag in _SKIP:
            self._skip_depth += 1
            return
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")
        if tag in ("td", "th"):
            self.parts.append(" | ")
        if tag == "a":
            href = dict(attrs).get("href")
            if href and self.base_url:
                href = urljoin(self.base_url, href)
            self._href_stack.append(href)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if tag in _SKIP:
            self._skip_depth = max(0, self._skip_depth - 1)
            return
        if tag == "a" and self._href_stack:
            href = self._href_stack.pop()
            if href and self._skip_depth == 0:
                self.parts.append(f" [{href}]")
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif self._skip_depth == 0:
            self.parts.append(data)


def html_to_text(html: str, base_url: str | None = None) -> str:
    """Main text of an HTML document; relative links resolved against ``base_url``."""
    parser = _Extractor(base_url)
    parser.feed(html)
    parser.close()
    lines = []
    for raw in "".join(parser.parts).split("\n"):
        line = _WS.sub(" ", raw).strip()
        if line:
            lines.append(line)
    title = _WS.sub(" ", "".join(parser.title)).strip()
    if title:
        lines.insert(0, f"# {title}")
    return "\n".join(lines)
