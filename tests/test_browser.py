"""The rendered book, both editions, opened in headless Chromium: formulas typeset, images load, links resolve,
Colab buttons point at each chapter's notebook, every page links to the same page in the other edition, every
character has a glyph, nothing local fails to load and nothing is fetched from the web."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest
from book_browser import _chromium, check_book, site_settings
from figure_browser import stored_figures

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"


def _require(ok: bool, why: str):
    if not ok:  # in CI a missing prerequisite is a failure, not a skip
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)


@pytest.fixture(scope="module")
def site():
    _require((HTML / "index.html").is_file(), "the book is not built: run `make book` first")
    _require(importlib.util.find_spec("playwright") is not None, "playwright is not installed")
    try:
        _chromium()
    except FileNotFoundError as e:
        _require(False, str(e))
    return site_settings(ROOT)


def test_built_book_reads_offline(site):
    url, branch, notebooks = site
    shots = ROOT / "_build" / "screenshots"
    problems, notes = check_book(HTML, url, branch, notebooks, screenshot_dir=shots)
    for note in notes:
        print(note)
    assert not problems, "\n".join(problems)
    assert {p.stem for p in shots.glob("*.png")} >= {Path(n).stem for n in notebooks}
    # every interactive figure was drawn and operated: hovered, and stepped with Next and Prev if it steps
    for fig in stored_figures(ROOT / "book"):
        assert not fig.hovers or any(f"{fig.element}: hover shows" in n for n in notes), f"{fig.element} not hovered"
        assert not fig.steps or any(f"{fig.element}: Next" in n for n in notes), f"{fig.element} not stepped"


def test_chinese_edition_reads_offline(site):
    """The same checks on every page of the Chinese edition (zh/), and its CJK text drawn with real glyphs."""
    url, branch, notebooks = site
    shots = ROOT / "_build" / "screenshots"
    zh_notebooks = {"zh/" + n.removeprefix("book/") for n in notebooks}
    problems, notes = check_book(HTML, url, branch, zh_notebooks, screenshot_dir=shots, edition="zh")
    for note in notes:
        print(note)
    assert not problems, "\n".join(problems)
    assert {p.stem for p in shots.glob("zh_*.png")} >= {"zh_" + Path(n).stem for n in notebooks}
    for fig in stored_figures(ROOT / "book" / "zh"):
        assert not fig.hovers or any(f"{fig.element}: hover shows" in n for n in notes), f"{fig.element} not hovered"
        assert not fig.steps or any(f"{fig.element}: Next" in n for n in notes), f"{fig.element} not stepped"
    html = (HTML / "zh" / "intro.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN"' in html


def chinese_search_terms(index_js: str) -> list[str]:
    """The Chinese words in a Sphinx search index (searchindex.js: Search.setIndex({...}))."""
    import json

    index = json.loads(index_js[index_js.index("(") + 1: index_js.rindex(")")])
    return [term for term in index["terms"] if re.search(r"[\u4e00-\u9fff]", term)]


def test_chinese_search_finds_chinese_words(site):
    """Sphinx splits Chinese text into words with jieba; without it a paragraph is one long term."""
    terms = chinese_search_terms((HTML / "zh" / "searchindex.js").read_text(encoding="utf-8"))
    assert {"注意力", "残差", "位置", "矩阵"} <= set(terms), terms[:50]
    assert max(map(len, terms)) <= 8, sorted(terms, key=len)[-5:]
    unsegmented = 'Search.setIndex({"terms": {"本课程通过实际计算来构建一个模型": [0]}})'
    assert max(map(len, chinese_search_terms(unsegmented))) > 8


def _inject(page: Path, html: str):
    text = page.read_text(encoding="utf-8")
    assert "</main>" in text
    page.write_text(text.replace("</main>", html + "</main>", 1), encoding="utf-8")


def test_checker_catches_a_broken_page(site, tmp_path):
    """A deliberately broken copy of the book: every kind of breakage must be reported.

    The $...$ paragraph stands for a formula MyST never turned into math (dollarmath switched off, say):
    MathJax only typesets what Sphinx marks, so the reader would see the TeX."""
    url, branch, notebooks = site
    copy = tmp_path / "html"
    shutil.copytree(HTML, copy)
    chapter = min(notebooks) if notebooks else None
    intro = "book/intro.html"

    _inject(copy / intro, '<img src="no-such-figure.png" alt="broken"><p>Energy: $E = mc^2$</p>'
                          '<a href="no-such-page.html">dead link</a>'
                          '<span class="math notranslate nohighlight">\\(x^2\\)</span>')
    if chapter:
        page = copy / chapter
        page.write_text(page.read_text(encoding="utf-8").replace(
            "colab.research.google.com/github/", "colab.research.google.com/github/someone-else/"),
            encoding="utf-8")
        # a page whose MathJax script is gone leaves its formulas as raw TeX
        page = copy / chapter
        page.write_text(re.sub(r'<script[^>]*mathjax/tex-mml-chtml\.js[^>]*></script>', "",
                               page.read_text(encoding="utf-8")), encoding="utf-8")
        _inject(page, '<span class="math notranslate nohighlight">\\(y^2\\)</span>')

    # a figure whose JavaScript fails to load: the page's plotly.js is missing (and the CDN is blocked)
    figure_page = next((str(p.relative_to(copy)) for p in sorted(copy.glob("book/*.html"))
                        if "ts-figure" in p.read_text(encoding="utf-8")), None)
    assert figure_page, "no chapter page holds an interactive figure"
    page = copy / figure_page
    page.write_text(page.read_text(encoding="utf-8").replace("_static/plotly.min.js", "_static/no-plotly.js"),
                    encoding="utf-8")

    # characters no font has (unassigned code points) are drawn as boxes; a page without its language switch
    _inject(copy / "book/notation.html", "<p>\u2fe0\u2fe1\u2fe2\u2fe3</p>")
    notation = copy / "book/notation.html"
    notation.write_text(re.sub(r'<p class="ts-edition-switch".*?</p>', "", notation.read_text(encoding="utf-8")),
                        encoding="utf-8")

    # the broken pages, and one left intact: the whole book is checked by the tests above
    intact = "book/references.html"
    problems, _ = check_book(copy, url, branch, notebooks,
                             only={intro, chapter, figure_page, "book/notation.html", intact} - {None})
    report = "\n".join(problems)
    assert "book/notation.html: 4 characters drawn as boxes or not at all" in report, report
    assert "book/notation.html: link to the other edition is missing" in report, report
    assert f"{figure_page}: failed request for a local resource" in report
    assert re.search(re.escape(figure_page) + r": \d+ of \d+ interactive figures not drawn", report), report
    assert f"{intro}: image did not load: no-such-figure.png" in report
    assert f"{intro}: raw TeX in the text" in report and "Energy: $E = mc^2$" in report
    assert f"{intro}: broken internal link 'no-such-page.html'" in report
    assert f"{intro}: failed request for a local resource" in report
    if chapter:
        assert f"{chapter}: Colab button points to" in report
        assert f"{chapter}: formula not typeset" in report or f"{chapter}: 1 formulas but MathJax" in report
    assert not [p for p in problems if p.startswith(intact)]
