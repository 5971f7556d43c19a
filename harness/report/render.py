"""Render the report's document (a list of blocks) to Markdown and to self-contained HTML.

One document model, two renderers, so report.md and report.html never disagree (docs/report.md).
The HTML embeds every figure as a base64 PNG data URI and has no script and no external
resource, so it opens offline and from a file. Its only links are relative: to the examples pages
written next to it (``examples-<benchmark>.html``, :mod:`harness.report.examples`) and anchors.
"""

from __future__ import annotations

import base64
import html
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.report.figures import FigureInfo


@dataclass
class Link:
    """A relative link (a table cell or a bullet item)."""

    text: str
    href: str


@dataclass
class Heading:
    level: int
    text: str
    anchor: str | None = None
    """``id`` of the HTML heading (a link target); Markdown ignores it."""


@dataclass
class Para:
    text: str


@dataclass
class Bullets:
    items: list[str | Link]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str | Link]]


@dataclass
class Fig:
    info: FigureInfo


@dataclass
class Details:
    summary: str
    body: str
    """Preformatted text (JSON)."""


@dataclass
class Turn:
    """One turn of an example's transcript, ready to show."""

    label: str
    text: str
    role: str
    """CSS class: assistant | tool | user."""
    nested: bool = False
    """A sub-agent's turn (indented under the planner's)."""


@dataclass
class Example:
    """One evaluated task: a summary line, its fields, notes on its transcript and the turns."""

    summary: str
    fields: list[tuple[str, str | Link]]
    notes: list[str]
    turns: list[Turn]


Block = Heading | Para | Bullets | Table | Fig | Details | Example


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


def _md_cell(s: str | Link) -> str:
    if isinstance(s, Link):
        return f"[{_md_cell(s.text)}]({s.href})"
    return s.replace("|", "\\|").replace("\n", " ")


def _md_fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def to_markdown(doc: Document, figures_rel: str = "figures") -> str:
    out: list[str] = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * (b.level + 1)} {b.text}", ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {_md_cell(it) if isinstance(it, Link) else it}" for it in b.items] + [""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            out.append("|" + "|".join("---" for _ in b.header) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows]
            out.append("")
        elif isinstance(b, Fig):
            out += [f"![{b.info.title}]({figures_rel}/{b.info.filename})", "",
                    f"*{b.info.caption}*", ""]
        elif isinstance(b, Details):
            out += [f"<details><summary>{html.escape(b.summary)}</summary>", "", "```json",
                    b.body, "```", "", "</details>", ""]
        elif isinstance(b, Example):
            out += [f"<details><summary>{html.escape(b.summary)}</summary>", ""]
            out += [f"- {k}: {_md_cell(v)}" for k, v in b.fields] + [""]
            out += [f"*{n}*" for n in b.notes] + ([""] if b.notes else [])
            for t in b.turns:
                fence = _md_fence(t.text)
                lines = [f"**{t.label}**", "", fence, *t.text.split("\n"), fence]
                out += ([f"> {ln}".rstrip() for ln in lines] if t.nested else lines) + [""]
            out += ["</details>", ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1400px;
padding:0 1em;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.88em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f2f2f2} tr:nth-child(even) td{background:#fafafa}
figure{margin:1em 0 2em} figure img{max-width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:0.88em;color:#444;margin-top:0.3em}
pre{background:#f6f6f6;padding:0.6em;overflow:auto;font-size:0.8em}
td.v-supported{background:#d9f2d9!important} td.v-not-supported{background:#f8d7d7!important}
td.v-inconclusive{background:#fff3cd!important} td.v-not-run{background:#e9e9e9!important}
td.s-failed{background:#f8d7d7!important}
details.example{border:1px solid #ddd;margin:0.4em 0;padding:0.3em 0.6em}
details.example summary{cursor:pointer} p.t-note{font-size:0.88em;color:#555;margin:0.3em 0}
div.turn{margin:0.4em 0} div.turn.nested{margin-left:2em;border-left:3px solid #c9d3e6;padding-left:0.6em}
div.turn .who{font-size:0.8em;color:#555} div.turn pre{white-space:pre-wrap;margin:0.1em 0}
div.turn.assistant pre{background:#eef3fb}
""".strip()

_CELL_CLASS = {"supported": "v-supported", "not supported": "v-not-supported",
               "inconclusive": "v-inconclusive", "not run": "v-not-run", "failed": "s-failed"}


def to_html(doc: Document) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(doc.title)}</title>", f"<style>{_CSS}</style></head><body>",
           f"<h1>{e(doc.title)}</h1>"]
    for b in doc.blocks:
        if isinstance(b, Heading):
            lvl = min(b.level + 1, 6)
            anchor = f' id="{e(b.anchor)}"' if b.anchor else ""
            out.append(f"<h{lvl}{anchor}>{e(b.text)}</h{lvl}>")
        elif isinstance(b, Para):
            out.append(f"<p>{e(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_html_inline(it)}</li>" for it in b.items) + "</ul>")
        elif isinstance(b, Table):
            rows = ["<tr>" + "".join(f"<th>{e(h)}</th>" for h in b.header) + "</tr>"]
            for r in b.rows:
                cells = []
                for c in r:
                    cls = _CELL_CLASS.get(c) if isinstance(c, str) else None
                    cells.append(f'<td class="{cls}">{e(c)}</td>' if cls else f"<td>{_html_inline(c)}</td>")
                rows.append("<tr>" + "".join(cells) + "</tr>")
            out.append("<table>" + "".join(rows) + "</table>")
        elif isinstance(b, Fig):
            data = base64.b64encode(b.info.png).decode("ascii")
            alt = b.info.title + ": " + "; ".join(
                f"{p.title} ({p.xlabel} vs {p.ylabel})" for p in b.info.panels)
            out.append(f'<figure id="fig-{e(b.info.name)}"><img class="report-figure" '
                       f'alt="{e(alt)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{e(b.info.caption)}</figcaption></figure>")
        elif isinstance(b, Details):
            out.append(f"<details><summary>{e(b.summary)}</summary><pre>{e(b.body)}</pre></details>")
        elif isinstance(b, Example):
            fields = "".join(f"<tr><th>{e(k)}</th><td>{_html_inline(v)}</td></tr>" for k, v in b.fields)
            notes = "".join(f'<p class="t-note">{e(n)}</p>' for n in b.notes)
            turns = "".join(
                f'<div class="turn {e(t.role)}{" nested" if t.nested else ""}"><div class="who">{e(t.label)}'
                f"</div><pre>{e(t.text)}</pre></div>" for t in b.turns)
            out.append(f'<details class="example"><summary>{e(b.summary)}</summary><table>{fields}</table>'
                       f"{notes}{turns}</details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _html_inline(c: str | Link) -> str:
    if isinstance(c, Link):
        return f'<a href="{html.escape(c.href)}">{html.escape(c.text)}</a>'
    return html.escape(c)


def write_text_atomic(path: Path, text: str | bytes) -> None:
    """Write via a temp file in the same folder and os.replace (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; a report is meant to be shared
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def pretty_json(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)
