"""The real-web pieces of the evaluation suite, one at a time (docs/evaluation.md §Real benchmarks on the web):
page extraction for the open web, the allowlist's named exceptions, GAIA attachments as text, how each real
benchmark poses its task, the scripted reader, the unreachable-web tally and the toolbox of a training run
that searches the web. The whole path through pytest and Chromium is tests/benchmarks/test_realweb_suite.py."""

from __future__ import annotations

import json
import zipfile

import pytest

from benchmarks.attachments import MAX_ATTACHMENT_CHARS, attachment_text
from benchmarks.gaia import Gaia
from benchmarks.web import (
    UNREACHABLE_VERDICT,
    ToolTally,
    WebError,
    WebOptions,
    WebReader,
    best_sentence,
    question_of,
)
from benchmarks.webwalkerqa import WebWalkerQA
from harness.config import ConfigError
from harness.tools.allowlist import Allowlist
from harness.tools.extract import get_extractor, page_links
from harness.tools.toolbox import ToolsConfig
from harness.tools.visit import TRUNCATION_MARKER
from tests.support.web_standin import page

ARTICLE = page("Zorvath Bridge", "The Zorvath Bridge is a bridge over the Kell river.",
               "The Zorvath Bridge was completed in 1911.", links=(("Kell river", "/wiki/kell.html"),),
               nav=(("Home", "/"), ("History of bridges", "/wiki/history.html")))


# ------------------------------------------------------------------------------ page text
def test_web_extractor_keeps_the_article_and_the_links_and_drops_the_boilerplate():
    text = get_extractor("web")(ARTICLE, "http://example.org/wiki/zorvath.html", 6000)
    assert "The Zorvath Bridge was completed in 1911." in text
    assert "We use cookies" not in text and "Copyright 2026" not in text  # boilerplate gone
    # the links trafilatura left out of the main text (the menu's: a walk needs them), in the agents' "text [url]"
    links = text.split("Links on this page:\n", 1)[1].splitlines()
    assert links == ["Home [http://example.org/]", "History of bridges [http://example.org/wiki/history.html]",
                     "Kell river [http://example.org/wiki/kell.html]"]
    # the simple extractor of the offline world keeps every line, boilerplate included
    simple = get_extractor("simple")(ARTICLE, "http://example.org/wiki/zorvath.html", 6000)
    assert "We use cookies" in simple and "Copyright 2026" in simple


def test_web_extractor_cuts_at_the_budget_and_falls_back_on_pages_without_an_article():
    long = page("Long", *[f"Paragraph {i} about the history of the Zorvath Bridge and its river." for i in range(400)])
    text = get_extractor("web")(long, "http://example.org/", 500)
    assert len(text) <= 500 + len(TRUNCATION_MARKER) + 1 and text.endswith(TRUNCATION_MARKER)
    # relative links resolve against the page (trafilatura alone would take the site's root); a menu-only page
    # keeps its links
    hub = "<html><body><p>Our offices: <a href='a.html'>A</a> and <a href='../b.html#top'>B</a>.</p></body></html>"
    assert get_extractor("web")(hub, "http://example.org/d/", 500) == (
        "Our offices: A [http://example.org/d/a.html] and B [http://example.org/b.html].")  # fragments dropped
    menu = "<html><body><nav><a href='a.html'>A</a></nav></body></html>"
    assert get_extractor("web")(menu, "http://example.org/d/", 500) == "A [http://example.org/d/a.html]"
    assert page_links(hub, "http://example.org/d/") == [("A", "http://example.org/d/a.html"),
                                                        ("B", "http://example.org/b.html")]


def test_extractor_is_a_validated_tools_setting():
    with pytest.raises(ConfigError, match="tools.extractor 'fancy': use one of simple, web"):
        ToolsConfig(extractor="fancy").validate()
    with pytest.raises(KeyError, match="registered: simple, web"):
        get_extractor("fancy")


# ------------------------------------------------------------------------------ allowlist
def test_open_web_allows_named_local_hosts_and_nothing_else_local():
    resolve = {"example.org": ["93.184.215.14"], "intranet.corp": ["10.1.2.3"]}.__getitem__
    allow = Allowlist.open_web(resolve=resolve, hosts=("127.0.0.1:8888",))
    assert allow.check("http://127.0.0.1:8888/search?q=x") is None  # the named stand-in
    assert allow.check("http://example.org/") is None  # the public web
    for url in ("http://127.0.0.1:8889/", "http://localhost:8888/", "http://10.0.0.1/", "http://intranet.corp/",
                "file:///etc/passwd"):
        assert allow.check(url) is not None, url
    assert "and 127.0.0.1:8888" in allow.check("http://10.0.0.1/")
    # a training run on the web keeps its world server reachable (its base URL is the exception)
    cfg = ToolsConfig(search_backend="realweb", allow_all_hosts=True)
    assert cfg.allowlist("http://127.0.0.1:4100").check("http://127.0.0.1:4100/wiki/a.html") is None
    assert cfg.allowlist("http://127.0.0.1:4100").check("http://127.0.0.1:4101/") is not None


# ------------------------------------------------------------------------------ attachments
def _pdf(text: str) -> bytes:
    """A one-page PDF with ``text`` in Helvetica (hand-written objects, offsets computed)."""
    stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


def test_attachments_become_text(tmp_path):
    from openpyxl import Workbook

    (tmp_path / "notes.txt").write_text("The name of the cat is Miso.\n")
    (tmp_path / "page.html").write_text("<html><body><h1>Menu</h1><p>Soup costs 4 dollars.</p></body></html>")
    book = Workbook()
    book.active.title = "Sales"
    book.active.append(["item", "price"])
    book.active.append(["soup", 4])
    book.save(tmp_path / "sales.xlsx")
    with zipfile.ZipFile(tmp_path / "memo.docx", "w") as zf:
        zf.writestr("word/document.xml", '<w:document xmlns:w="x"><w:body><w:p><w:r><w:t>Meet at</w:t></w:r>'
                                         '<w:r><w:t xml:space="preserve"> noon &amp; bring tea.</w:t></w:r></w:p>'
                                         "</w:body></w:document>")
    (tmp_path / "report.pdf").write_bytes(_pdf("Revenue grew by 12 percent"))
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    (tmp_path / "broken.pdf").write_bytes(b"not a pdf at all")
    (tmp_path / "big.csv").write_text("a,b\n" * 20_000)

    assert attachment_text(tmp_path / "notes.txt") == "The name of the cat is Miso."
    assert attachment_text(tmp_path / "page.html") == "Menu\nSoup costs 4 dollars."
    assert attachment_text(tmp_path / "sales.xlsx") == "Sheet Sales:\n| item | price |\n| soup | 4 |"
    assert attachment_text(tmp_path / "memo.docx") == "Meet at noon & bring tea."
    assert "Revenue grew by 12 percent" in attachment_text(tmp_path / "report.pdf")
    assert attachment_text(tmp_path / "photo.png") == "(a png file of 108 bytes; its content cannot be shown as text)"
    assert attachment_text(tmp_path / "broken.pdf").startswith("(the file could not be read as pdf: ")
    big = attachment_text(tmp_path / "big.csv")
    assert len(big) <= MAX_ATTACHMENT_CHARS + 20 and big.endswith(TRUNCATION_MARKER)


def test_each_real_benchmark_poses_its_task_as_its_offline_twin_does(tmp_path):
    snap = tmp_path / "gaia"
    snap.mkdir()
    (snap / "pets.txt").write_text("The name of the cat is Miso.\n")
    row = {"task_id": "00000000-0000-4000-8000-000000000002", "Question": "What is the cat called?", "Level": 1,
           "Final answer": "Miso", "file_name": "pets.txt"}
    (snap / "metadata.jsonl").write_text(json.dumps(row) + "\n")
    (task,) = Gaia(snapshot=snap).load()
    prompt = Gaia(snapshot=snap).prompt(task)
    assert prompt == "What is the cat called?\n\nAttached file pets.txt:\nThe name of the cat is Miso."
    assert str(snap) not in prompt  # the file's name only, never where it lies
    assert question_of(prompt) == ("What is the cat called?", "pets.txt:\nThe name of the cat is Miso.", None)

    ww = tmp_path / "ww.jsonl"
    ww.write_text(json.dumps({"question": "Who founded it?", "answer": "Lena", "root_url": "https://brask.example/",
                              "info": {"type": "single_source", "difficulty_level": "easy"}}) + "\n")
    bench = WebWalkerQA(path=ww)
    (wtask,) = bench.load()
    assert bench.prompt(wtask) == "Who founded it?\n\nStart from this website: https://brask.example/"
    assert question_of(bench.prompt(wtask)) == ("Who founded it?", "", "https://brask.example/")


# ------------------------------------------------------------------------------ the scripted reader
def test_best_sentence_answers_with_the_words_the_question_lacks():
    text = "The Zorvath Bridge is a bridge over the Kell river. The Zorvath Bridge was completed in 1911."
    assert best_sentence(text, "In which year was the Zorvath Bridge completed?") == (3, "1911")
    assert best_sentence("Nothing relevant here.", "Who designed the Quellstone Tower?") == (0, None)


class _FakeWeb:
    """A toolbox answering from a dict (a pure-logic test of the reader's walk)."""

    def __init__(self, pages: dict[str, str], hits: str = "No results."):
        self.pages, self.hits, self.calls = pages, hits, []

    def call(self, name, arguments):
        self.calls.append((name, arguments.get("url") or arguments.get("query")))
        if name == "search":
            return self.hits
        return self.pages.get(arguments["url"], "Error: could not load " + arguments["url"])


def test_reader_walks_from_the_start_url_along_the_best_matching_link():
    web = _FakeWeb({"http://s/": "Welcome.\nAbout [http://s/about]\nTarsil Conference 2026 [http://s/conf]",
                    "http://s/conf": "The Tarsil Conference 2026 will be held in Ostmark."})
    answer, messages = WebReader(web).run("In which city will the Tarsil Conference 2026 be held?"
                                          "\n\nStart from this website: http://s/")
    assert answer == "Ostmark" and web.calls == [("visit", "http://s/"), ("visit", "http://s/conf")]
    assert messages[-1] == {"role": "assistant", "content": "<answer>Ostmark</answer>"}
    # an attachment that holds the answer needs no web at all
    web = _FakeWeb({})
    assert WebReader(web).run("What is the name of the cat?\n\nAttached file p.txt:\nThe name of the cat is Miso.")[0] == "Miso"
    assert web.calls == []


def test_tally_makes_a_task_whose_every_call_failed_an_error():
    web = ToolTally(_FakeWeb({}, hits="Error: search failed: ConnectionError: refused"))
    before = web.snapshot()
    assert WebReader(web).run("Who designed the Quellstone Tower?")[0] is None
    counts, error = web.verdict(before)
    assert counts == {"web_calls": 1, "web_unreachable": 1}
    assert error.startswith(f"{UNREACHABLE_VERDICT}: all 1 tool call(s)") and "ConnectionError" in error
    ok = ToolTally(_FakeWeb({"http://s/": "A page."}))
    before = ok.snapshot()
    ok.call("visit", {"url": "http://s/"}), ok.call("visit", {"url": "http://s/missing"})
    assert ok.verdict(before) == ({"web_calls": 2, "web_unreachable": 1}, None)  # one page loaded: a result
    before = ok.snapshot()  # the next task's error quotes its own first failure, not an earlier task's
    ok.call("visit", {"url": "http://s/gone"})
    assert ok.verdict(before)[1].endswith("(first: Error: could not load http://s/gone)")


def test_web_options_build_the_open_web_toolbox_settings():
    web = WebOptions("searxng", "http://127.0.0.1:8888", allow_hosts=("127.0.0.1:8888",))
    cfg = web.tools_config({"search_top_k": 3, "max_chars": 900, "visit_backend": "direct", "allowed_hosts": ["x"]})
    assert (cfg.search_top_k, cfg.max_chars) == (3, 900)  # what the model trained with
    assert (cfg.search_backend, cfg.visit_backend, cfg.extractor, cfg.allow_all_hosts, cfg.block_private_networks,
            cfg.allowed_hosts) == ("realweb", "playwright", "web", True, True, ["127.0.0.1:8888"])
    with pytest.raises(WebError, match="json_api provider needs the name of the environment variable"):
        WebOptions("json_api", "https://api.example/search").tools_config()
    with pytest.raises(WebError, match="unknown"):
        WebOptions("searxng", "http://127.0.0.1:8888", search={"no_such_field": 1}).tools_config()
    described = WebOptions("json_api", "https://user:pw@api.example/search?key=abc", key_env="K").describe()
    assert described["endpoint"] == "https://api.example/search" and described["key_env"] == "K"


def test_a_training_run_can_search_the_web(tmp_path):
    """``tools.search_backend: realweb`` in a training config: the roles' toolbox searches the API and visits
    the web and the world's own server."""
    from harness.role.common import build_toolbox
    from harness.train_config import TrainConfig
    from harness.world.generator import generate_world
    from harness.world.server import WorldServer
    from tests.support.web_standin import WebStandIn

    with WebStandIn({"wiki/zorvath.html": ARTICLE}) as standin:
        cfg = TrainConfig()
        cfg.tools = ToolsConfig(search_backend="realweb", visit_backend="direct", allow_all_hosts=True,
                                allowed_hosts=[standin.host], extractor="web")
        cfg.tools.realweb.endpoint = standin.base_url
        server = WorldServer(generate_world(seed=0, size="tiny")).start()
        try:
            toolbox = build_toolbox(cfg, server.base_url)
            hits = toolbox.call("search", {"query": "Zorvath Bridge"})
            assert standin.url("wiki/zorvath.html") in hits
            assert "completed in 1911" in toolbox.call("visit", {"url": standin.url("wiki/zorvath.html")})
            assert not toolbox.call("visit", {"url": server.base_url + "/"}).startswith("Error")
            toolbox.close()
        finally:
            server.stop()
