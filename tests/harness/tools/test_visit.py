"""``visit`` on real HTTP, run against both backends with the same expectations (docs/tools.md).

Each test runs once with the direct HTTP backend and once with the Playwright pool (Chromium);
the page server and a "foreign" server (not allowlisted, counting its hits) are real
``http.server`` instances on 127.0.0.1.
"""

from __future__ import annotations

import socket
import time

import pytest

from harness.tools.allowlist import Allowlist
from harness.tools.browser import BrowserConfig, BrowserPool
from harness.tools.visit import TRUNCATION_MARKER, DirectBackend, VisitTool
from tests.support.http_fixtures import Sites, sites  # noqa: F401 - pytest fixture

TIMEOUT = 20.0  # generous: CI boxes with 2 busy cores start pages slowly
MAX_CHARS = 3000

BROWSER = [pytest.mark.browser, pytest.mark.xdist_group("chromium")]


@pytest.fixture(scope="module")
def dead_host():
    """A loopback port that refuses connections (bound, never listening)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture(scope="module", params=["direct", pytest.param("playwright", marks=BROWSER)])
def visit(request, sites: Sites, dead_host: str):  # noqa: F811
    allowlist = Allowlist.for_base_url(sites.site.base_url, [dead_host])
    if request.param == "direct":
        yield VisitTool(DirectBackend(allowlist), allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT)
        return
    with BrowserPool(allowlist, BrowserConfig(max_concurrency=2)) as pool:
        yield VisitTool(pool, allowlist, max_chars=MAX_CHARS, timeout_s=TIMEOUT)


def test_simple_article(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    base = sites.site.base_url
    assert visit(sites.site.url("/article.html"), "founder") == (
        "# Ardent Labs — overview\n"
        "Ardent Labs\n"
        "Ardent Labs is a research company founded in 1987 in Port Verrin by Marlow Vance.\n"
        "Its flagship product is the Quill 9 sensor; revenue in 2019 was 41 million crowns.\n"
        "Café staff call it “the lab”.\n"
        f"See also the company directory [{base}/rich.html]."
    )


def test_nav_links_tables_lists(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    text = visit(sites.site.url("/rich.html"))
    base = sites.site.base_url
    lines = text.splitlines()
    assert lines[0] == "# Company directory"
    assert "Home" not in text and "About" not in text  # <nav> is dropped
    assert f"- Ardent Labs [{base}/article.html] (founded 1987)" in lines
    assert f"- Marlow Vance [{base}/team/marlow.html], chief executive" in lines  # relative link resolved
    assert "- subsidiary: Quill East" in lines
    assert "| Ardent Labs | Port Verrin | 1987" in lines
    assert "External: example [https://example.org/page?x=1&y=2]." in lines
    assert lines[-1] == "© 2026 Directory"


def test_scripts_styles_templates_are_not_text(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    text = visit(sites.site.url("/scripted.html"))
    assert text == "# Scripted page\nVisible paragraph one.\nVisible paragraph two with hidden-by-css text."


def test_declared_charset_is_honoured(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    assert visit(sites.site.url("/latin1.html")) == "# Latin\nŒuvre? No: café, naïve."


def test_plain_text_page(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    assert visit(sites.site.url("/plain.txt")) == "Plain text file.\nIndented <not a tag> & more.\nLast line."


def test_other_content_types_are_refused(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    url = sites.site.url("/doc.pdf")
    assert visit(url) == (f"Error: unsupported content type 'application/pdf' at {url}; "
                          "visit reads HTML and plain-text pages only")


@pytest.mark.parametrize("path", ["/report.csv", "/download.html"])
def test_downloads_are_refused(visit: VisitTool, sites: Sites, path: str) -> None:  # noqa: F811
    url = sites.site.url(path)
    assert visit(url) == f"Error: {url} is a file download (Content-Disposition: attachment); downloads are disabled"


@pytest.mark.parametrize(("path", "status"), [("/error500.html", "500 Internal Server Error"), ("/missing.html", "404 Not Found")])
def test_error_status_is_an_error_observation(visit: VisitTool, sites: Sites, path: str, status: str) -> None:  # noqa: F811
    url = sites.site.url(path)
    assert visit(url) == f"Error: HTTP {status} for {url}"


def test_connection_refused(visit: VisitTool, dead_host: str) -> None:
    out = visit(f"http://{dead_host}/page.html")
    assert out.startswith(f"Error: could not load http://{dead_host}/page.html: ")
    assert "REFUSED" in out.upper()


def test_page_that_never_finishes_times_out_within_bound(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    short = VisitTool(visit.backend, visit.allowlist, max_chars=MAX_CHARS, timeout_s=2.0)
    url = sites.site.url("/slow.html")
    start = time.monotonic()
    out = short(url)
    elapsed = time.monotonic() - start
    assert out == f"Error: timed out after 2 s loading {url}"
    # A correctness bound, not a performance assertion: the slack covers a loaded CI box.
    assert 1.9 <= elapsed < 2.0 + 8.0


def test_huge_page_is_capped_and_marked(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    text = visit(sites.site.url("/huge.html"))
    body, marker = text.rsplit("\n", 1)
    assert marker == TRUNCATION_MARKER
    assert len(body) <= MAX_CHARS
    assert body.startswith("# Huge page\nParagraph 0: the quick brown fox")
    assert "Paragraph 15999" not in text


def test_same_host_redirects_are_followed(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    direct = visit(sites.site.url("/article.html"))
    assert visit(sites.site.url("/redirect-local")) == direct
    assert visit(sites.site.url("/redirect-chain")) == direct


def test_redirect_loop(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    url = sites.site.url("/redirect-loop")
    assert visit(url) == f"Error: too many redirects starting at {url}"


def test_redirect_to_foreign_host_is_refused_and_never_contacted(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    url = sites.site.url("/redirect-offsite")
    before = sites.foreign.total_hits()
    assert visit(url) == (f"Error: URL not allowed: host '{sites.foreign.host}' is not in the allowlist; "
                          f"allowed hosts: {sites.site.host}, {visit.allowlist.hosts[1]} (redirected from {url})")
    assert sites.foreign.total_hits() == before == 0


def test_redirect_to_file_scheme_is_refused(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    out = visit(sites.site.url("/redirect-file"))
    assert out.startswith("Error: URL not allowed: ")
    assert "refused" in out and out.endswith(f"(redirected from {sites.site.url('/redirect-file')})")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "scheme 'file' is refused"),
        ("data:text/html,<p>hello</p>", "scheme 'data' is refused"),
        ("chrome://settings", "scheme 'chrome' is refused"),
        ("javascript:alert(1)", "scheme 'javascript' is refused"),
        ("about:blank", "scheme 'about' is refused"),
    ],
)
def test_refused_schemes(visit: VisitTool, sites: Sites, url: str, reason: str) -> None:  # noqa: F811
    hosts = ", ".join(visit.allowlist.hosts)
    assert visit(url) == f"Error: URL not allowed: {reason}; allowed hosts: {hosts}"


def test_foreign_host_is_refused_before_any_request(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    out = visit(sites.foreign.url("/article.html"))
    assert out.startswith(f"Error: URL not allowed: host '{sites.foreign.host}' is not in the allowlist")
    assert sites.foreign.total_hits() == 0


@pytest.mark.parametrize("url", ["", "   ", "http://", "http://[broken", "127.0.0.1/article.html", "http://127.0.0.1:99999/"])
def test_malformed_urls_give_error_text(visit: VisitTool, url: str) -> None:
    out = visit(url)
    assert out.startswith("Error: URL not allowed: ")


def test_fetch_result_reports_final_url(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    result = visit.backend.fetch(sites.site.url("/redirect-chain"), TIMEOUT)
    assert result.final_url == sites.site.url("/article.html")
    assert result.status == 200 and result.content_type == "text/html"
    assert "<title>Ardent Labs — overview</title>" in result.html
    assert not result.html_truncated
    huge = visit.backend.fetch(sites.site.url("/huge.html"), TIMEOUT)
    assert huge.html_truncated and len(huge.html) <= 1_000_000


def test_huge_page_text_equals_full_conversion(visit: VisitTool, sites: Sites) -> None:  # noqa: F811
    """The prefix-wise conversion of a huge page gives exactly what converting it whole gives."""
    from harness.tools.html_text import html_to_text
    from harness.tools.visit import page_text, truncate_text

    result = visit.backend.fetch(sites.site.url("/huge.html"), TIMEOUT)
    full = truncate_text(html_to_text(result.html, base_url=result.final_url), MAX_CHARS)
    assert page_text(result.html, result.final_url, MAX_CHARS) == full == visit(sites.site.url("/huge.html"))
    for budget in (100, 5000, 70_000):  # budgets that need one, two and three prefix sizes
        assert page_text(result.html, result.final_url, budget) == truncate_text(
            html_to_text(result.html, base_url=result.final_url), budget)
