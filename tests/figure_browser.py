"""Operate every interactive (plotly) figure on an open page, as a reader would, and list what fails:
the figure must be drawn; a step-through must change its frame on Next and come back on Prev; a heatmap must
show a cell's value under the pointer. Used by the book's and JupyterLab's browser tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

# plotly marks every graph it draws with .js-plotly-plot; the book's figure containers carry .ts-figure.
FIGURES_JS = """() => {
  const expected = document.querySelectorAll('.ts-figure, .jp-RenderedPlotly').length;
  const graphs = [...document.querySelectorAll('.js-plotly-plot')];
  return {expected, drawn: graphs.filter(g => g.querySelector('.main-svg') && g._fullLayout).length,
          ids: graphs.map(g => g.id || '')};
}"""

TITLE_JS = "(i) => { const g = document.querySelectorAll('.js-plotly-plot')[i]; " \
           "return (g._fullLayout.title && g._fullLayout.title.text) || ''; }"

HEIGHT_JS = "(i) => document.querySelectorAll('.js-plotly-plot')[i].offsetHeight"

# The screen position of the middle cell of the figure's first heatmap, and its value.
HOVER_TARGET_JS = """(i) => {
  const g = document.querySelectorAll('.js-plotly-plot')[i];
  const t = g._fullData.findIndex(d => d.type === 'heatmap' && d.visible !== false);
  if (t < 0) return null;
  const d = g._fullData[t], z = d.z, r = Math.floor(z.length / 2), c = Math.floor(z[0].length / 2);
  const xa = g._fullLayout[d.xaxis.replace('x', 'xaxis')], ya = g._fullLayout[d.yaxis.replace('y', 'yaxis')];
  const xv = d.x ? d.x[c] : c, yv = d.y ? d.y[r] : r;
  const box = g.getBoundingClientRect();
  return {x: box.left + xa._offset + xa.d2p(xv), y: box.top + ya._offset + ya.d2p(yv), z: z[r][c]};
}"""

HOVER_TEXT_JS = "(i) => [...document.querySelectorAll('.js-plotly-plot')[i]" \
                ".querySelectorAll('.hoverlayer .hovertext')].map(h => h.textContent).join(' ')"

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class StoredFigure(NamedTuple):
    notebook: str  # file name
    element: str  # its element id in the book, ts-<name>
    steps: bool  # has frames to step through
    hovers: bool  # has a heatmap to hover
    html: str  # the output the book and Colab show


def stored_figures(book: Path) -> list[StoredFigure]:
    """Every interactive figure the chapters store."""
    found = []
    for path in sorted(book.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                spec = out.get("data", {}).get("application/vnd.plotly.v1+json")
                if spec:
                    html = "".join(out["data"]["text/html"])
                    element = re.search(r'<div id="(ts-[a-z0-9-]+)"', html).group(1)
                    hovers = any(trace.get("type") == "heatmap" for trace in spec["data"])
                    found.append(StoredFigure(path.name, element, bool(spec.get("frames")), hovers, html))
    return found


def _button(page, i: int, label: str):
    return page.locator(".js-plotly-plot").nth(i).locator(".updatemenu-button", has_text=label)


def operate_figures(page, where: str, timeout_ms: int = 15_000) -> tuple[list[str], list[str]]:
    """(problems, actions done) for every plotly figure on the page; where names the page in messages."""
    from transformer_steps.course.interactive import NEXT, PREV

    problems, done = [], []
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("() => [...document.querySelectorAll('.ts-figure, .jp-RenderedPlotly')].every("
                               "f => f.querySelector('.main-svg'))", timeout=timeout_ms)
    except PlaywrightTimeout:
        problems.append(f"{where}: interactive figures still not drawn after {timeout_ms / 1000:g} s")
    state = page.evaluate(FIGURES_JS)
    if state["drawn"] < state["expected"]:
        problems.append(f"{where}: {state['expected'] - state['drawn']} of {state['expected']} interactive "
                        "figures not drawn (plotly.js did not load?)")
    for i in range(len(state["ids"])):
        name = state["ids"][i] or f"figure {i + 1}"
        # to the middle of the window, clear of toolbars and notices at its edges (JupyterLab's news toast)
        page.evaluate("(i) => document.querySelectorAll('.js-plotly-plot')[i].scrollIntoView({block: 'center'})", i)
        page.wait_for_timeout(200)
        target = page.evaluate(HOVER_TARGET_JS, i)
        if target is not None:
            text = ""
            for dx in (0, 1, 2):  # plotly shows the label on a mouse move; nudge once or twice if it is late
                page.mouse.move(target["x"] + dx, target["y"])
                page.wait_for_timeout(300)
                text = page.evaluate(HOVER_TEXT_JS, i)
                if text:
                    break
            values = [float(v) for v in NUMBER.findall(text)]
            if not any(abs(v - target["z"]) <= 0.0051 for v in values):
                problems.append(f"{where}: {name}: hovering a cell of value {target['z']} shows {text!r}")
            else:
                done.append(f"{where}: {name}: hover shows {text!r}")
            page.mouse.move(0, 0)
        if _button(page, i, NEXT).count():
            before = page.evaluate(TITLE_JS, i)
            height = page.evaluate(HEIGHT_JS, i)
            _button(page, i, NEXT).first.click()
            page.wait_for_timeout(300)
            after = page.evaluate(TITLE_JS, i)
            if page.evaluate(HEIGHT_JS, i) < 0.9 * height:  # JupyterLab once shrank an autosized figure to its buttons
                problems.append(f"{where}: {name}: the figure shrank from {height} px to "
                                f"{page.evaluate(HEIGHT_JS, i)} px on Next")
            _button(page, i, PREV).first.click()
            page.wait_for_timeout(300)
            back = page.evaluate(TITLE_JS, i)
            if after == before:
                problems.append(f"{where}: {name}: Next did not change the frame (title stays {before!r})")
            elif back != before:
                problems.append(f"{where}: {name}: Prev after Next shows {back!r}, not {before!r}")
            else:
                done.append(f"{where}: {name}: Next {before!r} -> {after!r}, Prev back")
    return problems, done
