"""The HTML report in a real browser (docs/report.md): headless Chromium through Playwright shows every
figure, with no console error, and the figures' screen regions are not blank."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from harness.report import Options, build_report
from harness.tools.browser import DEFAULT_ARGS, DEFAULT_CHROMIUM
from tests.support.records_factory import make_experiment

pytestmark = pytest.mark.browser

CHROMIUM = DEFAULT_CHROMIUM
ARGS = list(DEFAULT_ARGS)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    make_experiment(root / "runs", steps=30, eval_every=10, benchmarks=("local_gaia", "local_webwalkerqa"),
                    n_tasks=20, overrides={("mgrpo", 1): {"state": "failed", "steps": 20}})
    return build_report(Options(runs_dir=root / "runs", out_dir=root / "out", n_boot=500))


def test_html_report_renders_every_figure_without_console_errors(report, tmp_path: Path):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian chromium is required (see scripts/sysdeps.sh)"
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
            page.goto(report.html.resolve().as_uri(), wait_until="load")
            assert page.title() == "M-GRPO comparison report"
            imgs = page.locator("img.report-figure")
            assert imgs.count() == len(report.figures) == 5
            dims = page.eval_on_selector_all(
                "img.report-figure",
                "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight, e.alt])")
            for complete, w, h, alt in dims:
                assert complete and w > 0 and h > 0, alt
                assert alt  # alt text names the panels
            for i, f in enumerate(report.figures):
                el = imgs.nth(i)
                el.scroll_into_view_if_needed()
                shot = Image.open(io.BytesIO(el.screenshot())).convert("L")
                lo, hi = shot.getextrema()
                assert hi - lo > 100, f"{f.name} looks blank on screen"
                hist = shot.histogram()
                # a rendered plot has many grey levels, not a flat or two-tone box
                assert sum(1 for c in hist if c) > 20, f.name
                assert shot.width > 300 and shot.height > 150
            # verdicts and the failed run are visible text
            body = page.inner_text("body")
            assert "The paper's claims" in body and "Fig. 7" in body
            failed = page.locator("td.s-failed")
            # the failed mgrpo run: in the runs table and in the sub-agent training table
            assert failed.count() == 2 and all(failed.nth(i).is_visible() for i in range(2))
            full = tmp_path / "report.png"
            page.screenshot(path=str(full), full_page=True)
            assert Image.open(full).height > 2000
        finally:
            browser.close()
    assert errors == []


def test_accuracy_row_link_opens_its_examples_with_a_readable_transcript(report):
    """Issue 15: the accuracy table's link leads to the examples page at the row's trainer; an example
    opens to show its transcript's turns; no console error, no failed request."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
            page.goto(report.html.resolve().as_uri(), wait_until="load")
            links = page.locator('a[href^="examples-"]')
            assert links.count() == len(report.analysis.accuracy)
            mgrpo = page.locator('a[href$="#arm-mgrpo"]').first  # a multi-agent row: sub-agent turns
            target = mgrpo.get_attribute("href")
            mgrpo.click()
            page.wait_for_load_state("load")
            assert page.url.endswith(target) and page.title().startswith("Examples: ")
            anchor = target.split("#", 1)[1]
            assert page.locator(f"h2#{anchor}").is_visible()
            example = page.locator(f"h2#{anchor} ~ details.example").first  # the row's trainer's first example
            turn = example.locator("div.turn").first
            assert not turn.is_visible()  # closed until asked
            example.locator("summary").click()
            assert turn.is_visible() and turn.inner_text().strip()
            assert example.locator("div.turn.nested").count() > 0  # sub-agent turns, indented
        finally:
            browser.close()
    assert errors == []
