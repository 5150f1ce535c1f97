"""Every chapter, English and Chinese, in the pinned JupyterLab (what `make lab` opens), in headless Chromium: each
Markdown cell renders, no raw MyST syntax shows, every solution stays folded, every CJK character has a glyph. A screenshot of chapter 1 lands next to the
book's, in _build/screenshots/."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import lab_browser
import pytest
from book_browser import _chromium
from figure_browser import stored_figures

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def _require(ok: bool, why: str):
    if not ok:  # in CI a missing prerequisite is a failure, not a skip
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    _require(importlib.util.find_spec("playwright") is not None, "playwright is not installed")
    _require(importlib.util.find_spec("jupyterlab") is not None, "jupyterlab is not installed")
    try:
        _chromium()
    except FileNotFoundError as e:
        _require(False, str(e))
    work = tmp_path_factory.mktemp("lab")
    served = work / "root"
    shutil.copytree(ROOT / "book", served / "book")  # a copy: opening a notebook must not touch the repository
    lab_browser._ROOTS[:] = [served]
    with lab_browser.jupyterlab(served, work) as (base, token):
        yield base, token, served


def read_every_chapter(lab, folder: str, shot: str, glyphs: bool):
    """Open every notebook of book/ or book/zh/ in JupyterLab; every interactive figure drawn by plotly's
    JupyterLab extension, hovered, and stepped if it steps."""
    base, token, _ = lab
    shots = ROOT / "_build" / "screenshots"
    operated: list[str] = []
    names = [f"{folder}/{p.name}" for p in NOTEBOOKS]
    problems = lab_browser.check_notebooks(base, token, names, operated=operated, glyphs=glyphs,
                                           screenshot={names[0]: shots / shot})
    print("\n".join(operated))
    assert not problems, "\n".join(problems)
    figures = stored_figures(ROOT / folder)
    for notebook in {fig.notebook for fig in figures}:
        mine = [(fig.steps, fig.hovers) for fig in figures if fig.notebook == notebook]
        hovered = [n for n in operated if n.startswith(f"{folder}/{notebook}:") and ": hover shows" in n]
        stepped = [n for n in operated if n.startswith(f"{folder}/{notebook}:") and ": Next" in n]
        assert (len(stepped), len(hovered)) == tuple(map(sum, zip(*mine))), (notebook, operated)
    assert (shots / shot).is_file()


@pytest.mark.slow
def test_every_chapter_reads_in_jupyterlab(lab):
    read_every_chapter(lab, "book", f"jupyterlab_{NOTEBOOKS[0].stem}.png", glyphs=False)


@pytest.mark.slow
def test_every_chinese_chapter_reads_in_jupyterlab(lab):
    """The Chinese notebooks (book/zh/) as `make lab` opens them: the same checks, and every CJK character drawn
    with a real glyph."""
    read_every_chapter(lab, "book/zh", f"jupyterlab_zh_{NOTEBOOKS[0].stem}.png", glyphs=True)


@pytest.mark.slow
def test_checker_catches_raw_myst_and_an_open_solution(lab):
    base, token, served = lab
    nb = json.loads(NOTEBOOKS[0].read_text())
    md = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    md["source"] = ["A {term}`token <Token>` and a citation {cite}`vaswani2017attention`.\n\n",
                    ":::{admonition} Solution\n:class: dropdown\nx = 3\n:::\n\n",
                    "<details open><summary>Solution</summary>\n\nx = 3\n\n</details>\n"]
    (served / "book" / "broken.ipynb").write_text(json.dumps(nb))
    problems = "\n".join(lab_browser.check_notebooks(base, token, ["book/broken.ipynb"]))
    for expected in ("{term}", "{cite}", ":::", ":class:", "solutions are open"):
        assert expected in problems, f"not caught: {expected}\n{problems}"
    # characters no font has (unassigned code points) show as boxes
    md["source"] = ["中文 \u2fe0\u2fe1\u2fe2\u2fe3"]
    (served / "book" / "tofu.ipynb").write_text(json.dumps(nb))
    problems = "\n".join(lab_browser.check_notebooks(base, token, ["book/tofu.ipynb"], glyphs=True))
    assert "book/tofu.ipynb: 4 characters drawn as boxes or not at all" in problems, problems
