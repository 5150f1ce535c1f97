"""The interactive figures as Colab shows a stored or fresh output: its HTML alone in a page without plotly.js
(Colab renders each output in its own frame), so the figure's script loads plotly.js from plotly's CDN. This
machine is offline, so the CDN request is answered with the wheel's copy of that same file; the figure must
then draw, show a cell's value on hover, and step with Next and Prev. With the CDN unreachable it must not draw
(the check can fail)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from book_browser import CHROMIUM_ARGS, _chromium
from figure_browser import operate_figures, stored_figures

ROOT = Path(__file__).resolve().parents[1]
FIGURES = stored_figures(ROOT / "book")
# the Chinese notebooks' copies: Colab opens book/zh/*.ipynb with these outputs
ZH_FIGURES = stored_figures(ROOT / "book" / "zh")


@pytest.fixture(scope="module")
def browser():
    if importlib.util.find_spec("playwright") is None or importlib.util.find_spec("plotly") is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("playwright and plotly are needed")
    import plotly.offline
    from playwright.sync_api import sync_playwright

    plotly_js = plotly.offline.get_plotlyjs()
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        yield chromium, plotly_js
        chromium.close()


def open_output(browser, html: str, cdn_reachable: bool):
    chromium, plotly_js = browser
    page = chromium.new_page(viewport={"width": 900, "height": 700})  # about Colab's output width
    requested = []

    def route(r):
        requested.append(r.request.url)
        if cdn_reachable and r.request.url.startswith("https://cdn.plot.ly/"):
            r.fulfill(status=200, content_type="application/javascript", body=plotly_js)
        else:
            r.abort()

    page.route("**/*", route)
    page.set_content(f"<!doctype html><html><head></head><body>{html}</body></html>", wait_until="load")
    return page, requested


def test_every_chapter_with_a_figure_is_covered():
    assert {fig.notebook for fig in FIGURES} >= {"01_attention_by_hand.ipynb", "02_block_by_hand.ipynb",
                                                "04_positional_encoding.ipynb", "08_kv_cache.ipynb"}


def test_the_chinese_notebooks_hold_the_same_figures():
    """Colab shows a zh chapter's figure from the same output HTML, byte for byte, as the English one, so the
    checks below cover both (opening the copies again would take half a minute of CI to learn nothing)."""
    assert ZH_FIGURES == FIGURES


@pytest.mark.parametrize("fig", FIGURES, ids=[fig.element for fig in FIGURES])
def test_figure_draws_and_responds_without_the_books_plotly(browser, fig):
    page, requested = open_output(browser, fig.html, cdn_reachable=True)
    problems, done = operate_figures(page, fig.element)
    page.close()
    assert not problems, "\n".join(problems)
    assert len([d for d in done if ": hover shows" in d]) == fig.hovers
    assert len([d for d in done if ": Next" in d]) == fig.steps
    import plotly.offline

    assert requested == [f"https://cdn.plot.ly/plotly-{plotly.offline.get_plotlyjs_version()}.min.js"]


def test_without_the_cdn_the_figure_is_reported_not_drawn(browser):
    page, _ = open_output(browser, FIGURES[0].html, cdn_reachable=False)
    problems, _ = operate_figures(page, FIGURES[0].element, timeout_ms=3000)
    page.close()
    assert any("not drawn" in p for p in problems), problems
