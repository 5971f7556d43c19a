"""A GAIA attachment as the text an agent reads (docs/evaluation.md §Real benchmarks).

GAIA hands some questions a file (a spreadsheet, a PDF, a document, source code, a picture, audio). The
agents here read text only, so :func:`attachment_text` turns the file into text, and
:meth:`benchmarks.gaia.Gaia.prompt` appends it to the question as ``\\nAttached file <name>:\\n<text>``, the
phrasing of the offline world's ``local_gaia`` tasks (so a warm start saw the same form).

* text files (``.txt .csv .tsv .json .jsonl .jsonld .md .py .xml .yaml .yml .pdb .log .tex .sql``):
  decoded as UTF-8 (undecodable bytes replaced);
* ``.html``/``.htm``: the ``simple`` page extractor's text (:mod:`harness.tools.extract`);
* ``.pdf``: the text of each page (pypdf); ``.xlsx``: every sheet as ``|``-separated rows (openpyxl,
  computed values); ``.docx``/``.pptx``: the paragraphs' text read from the Office XML;
* anything else (images, audio, archives): one line saying what the file is and that its content cannot
  be shown as text, so the agent knows a file exists rather than being silently handed nothing.

Deliberate limits: the text is cut to :data:`MAX_ATTACHMENT_CHARS` characters (a ``[truncated]`` line says
so); the file's path on disk is never shown (only its name); a file that cannot be read becomes a line
naming the problem, never an exception, so one bad attachment is that task's difficulty, not a crash.
"""

from __future__ import annotations

import html
import re
import zipfile
from pathlib import Path

from harness.tools.extract import simple_text
from harness.tools.visit import truncate_text

#: The most characters of one attachment put into a prompt.
MAX_ATTACHMENT_CHARS = 20_000

TEXT_SUFFIXES = frozenset({".txt", ".csv", ".tsv", ".json", ".jsonl", ".jsonld", ".md", ".py", ".xml", ".yaml",
                           ".yml", ".pdb", ".log", ".tex", ".sql"})
_OFFICE_TEXT = {".docx": ("word/document.xml", "w:p", "w:t"), ".pptx": ("ppt/slides/", "a:p", "a:t")}


def attachment_text(path: Path, max_chars: int = MAX_ATTACHMENT_CHARS) -> str:
    """The text of the attachment at ``path`` (see the module docstring), at most ``max_chars`` characters."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix in TEXT_SUFFIXES:
            text = path.read_bytes()[: 4 * max_chars + 4].decode("utf-8", errors="replace")
        elif suffix in (".html", ".htm"):
            text = simple_text(path.read_text(encoding="utf-8", errors="replace"), "", max_chars)
        elif suffix == ".pdf":
            text = _pdf_text(path, max_chars)
        elif suffix == ".xlsx":
            text = _xlsx_text(path, max_chars)
        elif suffix in _OFFICE_TEXT:
            text = _office_text(path, *_OFFICE_TEXT[suffix])
        else:
            size = path.stat().st_size
            return f"(a {suffix.lstrip('.') or 'binary'} file of {size:,} bytes; its content cannot be shown as text)"
    except Exception as exc:  # noqa: BLE001 - a broken attachment is the task's problem, not the suite's
        return f"(the file could not be read as {suffix.lstrip('.') or 'text'}: {type(exc).__name__})"
    text = text.strip()
    return truncate_text(text, max_chars) if text else "(the file holds no text)"


def _pdf_text(path: Path, max_chars: int) -> str:
    from pypdf import PdfReader  # lazy: only a PDF attachment needs it

    parts: list[str] = []
    for page in PdfReader(str(path)).pages:
        parts.append(page.extract_text() or "")
        if sum(map(len, parts)) > max_chars:
            break
    return "\n".join(parts)


def _xlsx_text(path: Path, max_chars: int) -> str:
    from openpyxl import load_workbook  # lazy: only a spreadsheet attachment needs it

    book = load_workbook(str(path), read_only=True, data_only=True)
    lines: list[str] = []
    size = 0
    try:
        for sheet in book.worksheets:
            lines.append(f"Sheet {sheet.title}:")
            for row in sheet.iter_rows(values_only=True):
                cells = ["" if v is None else str(v) for v in row]
                while cells and not cells[-1]:
                    cells.pop()
                if cells:
                    lines.append("| " + " | ".join(cells) + " |")
                    size += len(lines[-1])
                if size > max_chars:
                    return "\n".join(lines)
    finally:
        book.close()
    return "\n".join(lines)


def _office_text(path: Path, member: str, para: str, run: str) -> str:
    """The text runs of an Office Open XML file, one line per paragraph (stdlib only)."""
    para_re = re.compile(rf"<{para}[ >].*?</{para}>", re.S)
    run_re = re.compile(rf"<{run}(?: [^>]*)?>([^<]*)</{run}>")
    lines: list[str] = []
    with zipfile.ZipFile(path) as zf:
        # slide2.xml before slide10.xml
        names = sorted((n for n in zf.namelist() if n.startswith(member) and n.endswith(".xml")),
                       key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)])
        for name in names:
            xml = zf.read(name).decode("utf-8", errors="replace")
            for p in para_re.findall(xml):
                line = "".join(run_re.findall(p))
                if line.strip():
                    lines.append(line)
    return html.unescape("\n".join(lines))
