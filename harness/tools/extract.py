"""Page extractors: how a visited page's HTML becomes the text the agent reads (docs/tools.md §Page text).

Registered by name (:func:`register_extractor`, :func:`get_extractor`); ``tools.extractor`` picks one:

* ``simple`` (default): :func:`harness.tools.visit.page_text`, the project's own small streaming
  HTML-to-text converter (:mod:`harness.tools.html_text`). Made for the offline world's static pages:
  every line of a page is kept, ``<nav>`` is dropped, links read ``text [url]``.
* ``web``: for the open web, where a page is mostly menus, banners, cookie notices and footers around
  an article. The main content comes from **trafilatura** (a maintained extractor built for web pages:
  boilerplate removal, tables kept), with its links rewritten to the same ``text [url]`` form (resolved
  against the page's URL); then a ``Links on this page:`` section lists the page's other links (menus
  included, absolute URLs, at most :data:`MAX_LINKS`), because navigating a site (WebWalkerQA) needs exactly
  the menus that main-content extraction removes. When trafilatura finds no main content (a near-empty
  page) the ``simple`` text stands in for it.

An extractor is ``extract(html, base_url, max_chars) -> str``; its result is cut to ``max_chars`` with a
``[truncated]`` line (:func:`harness.tools.visit.truncate_text`).
"""

from __future__ import annotations

import html as html_lib
import re
from html.parser import HTMLParser
from typing import Callable
from urllib.parse import urljoin, urlsplit

from harness.tools.visit import page_text, truncate_text

Extractor = Callable[[str, str, int], str]
EXTRACTORS: dict[str, Extractor] = {}

#: The most links the ``web`` extractor lists after the main text.
MAX_LINKS = 60

_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_MD_LINK = re.compile(r"!?\[([^\]\n]*)\]\((\S+?)\)")


def register_extractor(name: str) -> Callable[[Extractor], Extractor]:
    """Register ``extract(html, base_url, max_chars) -> str`` under ``name`` (a ``tools.extractor`` value)."""
    def deco(fn: Extractor) -> Extractor:
        EXTRACTORS[name] = fn
        return fn
    return deco


def get_extractor(name: str) -> Extractor:
    """The extractor registered as ``name``; ``KeyError`` names the registered ones."""
    try:
        return EXTRACTORS[name]
    except KeyError:
        raise KeyError(f"unknown page extractor {name!r}; registered: {', '.join(sorted(EXTRACTORS))}") from None


@register_extractor("simple")
def simple_text(html: str, base_url: str, max_chars: int) -> str:
    return page_text(html, base_url, max_chars)


class _Links(HTMLParser):
    """``(text, absolute url)`` of every ``<a href>`` with an http(s) target, in document order."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            self._href = urljoin(self.base_url, href.strip()) if href else None
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            text = " ".join("".join(self._text).split())
            if urlsplit(self._href).scheme in ("http", "https"):
                self.links.append((text, self._href.split("#", 1)[0]))
            self._href = None


def page_links(html: str, base_url: str) -> list[tuple[str, str]]:
    """The page's links as ``(anchor text, absolute URL)``, fragments dropped, each URL once."""
    parser = _Links(base_url)
    parser.feed(html)
    parser.close()
    seen: dict[str, str] = {}
    for text, url in parser.links:
        if url and (url not in seen or (not seen[url] and text)):
            seen[url] = text
    return [(t, u) for u, t in seen.items()]


@register_extractor("web")
def web_text(html: str, base_url: str, max_chars: int) -> str:
    import trafilatura  # lazy: lxml and friends load only when the web extractor is used

    # no url= : trafilatura would resolve relative links against the site's root, not the page
    main = trafilatura.extract(html, output_format="markdown", include_links=True, include_tables=True,
                               include_comments=False, favor_recall=True) or ""
    main = _MD_LINK.sub(lambda m: f"{m.group(1)} [{urljoin(base_url, m.group(2)).split('#', 1)[0]}]".strip(),
                        main.strip())
    if not main:  # no main content found: every line of the page, as the simple extractor reads it
        main = page_text(html, base_url, 1 << 62)
    extra = [(t, u) for t, u in page_links(html, base_url) if f"[{u}]" not in main][:MAX_LINKS]
    title = _TITLE.search(html[:65536])
    title_text = " ".join(html_lib.unescape(title.group(1)).split()) if title else ""
    text = f"# {title_text}\n{main}" if title_text and not main.startswith("# ") else main
    if extra:
        text += "\n\nLinks on this page:\n" + "\n".join(f"{t or u} [{u}]" for t, u in extra)
    return truncate_text(text.strip(), max_chars)
