"""Render the report's document (a list of blocks) to Markdown and to self-contained HTML.

One document model, two renderers, so report.md and report.html never disagree (DESIGN §8).
The HTML embeds every figure as a base64 PNG data URI and has no script and no external
resource, so it opens offline and from a file.
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
class Heading:
    level: int
    text: str


@dataclass
class Para:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Fig:
    info: FigureInfo


@dataclass
class Details:
    summary: str
    body: str
    """Preformatted text (JSON)."""


Block = Heading | Para | Bullets | Table | Fig | Details


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document, figures_rel: str = "figures") -> str:
    out: list[str] = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * (b.level + 1)} {b.text}", ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {it}" for it in b.items] + [""]
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
            out.append(f"<h{lvl}>{e(b.text)}</h{lvl}>")
        elif isinstance(b, Para):
            out.append(f"<p>{e(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{e(it)}</li>" for it in b.items) + "</ul>")
        elif isinstance(b, Table):
            rows = ["<tr>" + "".join(f"<th>{e(h)}</th>" for h in b.header) + "</tr>"]
            for r in b.rows:
                cells = []
                for c in r:
                    cls = _CELL_CLASS.get(c)
                    cells.append(f'<td class="{cls}">{e(c)}</td>' if cls else f"<td>{e(c)}</td>")
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
    out.append("</body></html>")
    return "\n".join(out) + "\n"


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
