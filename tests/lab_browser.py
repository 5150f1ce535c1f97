"""Open chapters in the pinned JupyterLab, in headless Chromium, as a reader of `make lab` does, and list what
they would see that belongs to another renderer: raw MyST syntax, an unrendered Markdown cell, an open solution.

Used by tests/test_jupyterlab.py."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from book_browser import CHROMIUM_ARGS, _chromium, missing_glyphs
from figure_browser import operate_figures

# What MyST would have turned into something else: roles, fences and directive options, as Lab shows them
RAW_MYST = re.compile(r"\{(?:term|cite|glue(?::\w+)?|ref|doc|numref|eq|math)\}|^\s*:{3,}|\{admonition\}|"
                      r"^\s*:class:|\{bibliography\}|\{glossary\}", re.MULTILINE)

STATE_JS = """() => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-MarkdownCell')];
  return {
    cells: cells.length,
    unrendered: cells.filter(c => !c.classList.contains('jp-mod-rendered')).length,
    text: cells.map(c => (c.querySelector('.jp-RenderedMarkdown') || {innerText: ''}).innerText),
    open: [...document.querySelectorAll('.jp-Notebook details[open]')].length,
    details: [...document.querySelectorAll('.jp-Notebook details')].length,
  };
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyterlab(root_dir: Path, work: Path):
    """The venv's JupyterLab serving root_dir on localhost, every cell rendered up front (no windowing)."""
    settings = work / "settings"
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))  # Lab renders cells lazily otherwise
    port, token = _free_port(), "reader-modes-test"
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(work / "ws"),
           "JUPYTER_CONFIG_DIR": str(work / "config"), "JUPYTER_RUNTIME_DIR": str(work / "runtime")}
    log = (work / "lab.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
                             "--allow-root"],  # CI runs as root
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start: {(work / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def check_notebooks(base: str, token: str, names: list[str], screenshot: dict[str, Path] | None = None,
                    operated: list[str] | None = None, glyphs: bool = False) -> list[str]:
    """Problems a JupyterLab reader would see in each notebook (paths relative to the server's root). Every
    interactive figure is operated too; what was done is appended to `operated`. glyphs: also report characters
    drawn as boxes (book_browser.missing_glyphs)."""
    from playwright.sync_api import sync_playwright

    problems = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name in names:
            page.goto(f"{base}/lab/tree/{name}?token={token}&reset", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-Notebook .jp-MarkdownCell .jp-RenderedMarkdown", timeout=60_000)
            want = sum(c["cell_type"] == "markdown" for c in json.loads(Path(_local(name)).read_text())["cells"])
            deadline = time.monotonic() + 60
            while True:  # until every Markdown cell of the file is in the page and rendered
                state = page.evaluate(STATE_JS)
                if (state["cells"] == want and not state["unrendered"]) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            if state["cells"] != want or state["unrendered"]:
                problems.append(f"{name}: {state['cells'] - state['unrendered']} of {want} Markdown cells rendered")
            for i, text in enumerate(state["text"]):
                for m in RAW_MYST.finditer(text):
                    problems.append(f"{name}: Markdown cell {i} shows raw MyST: {text[max(0, m.start() - 30):m.end() + 30]!r}")
            if glyphs and (boxes := missing_glyphs(page)):
                problems.append(f"{name}: {len(boxes)} characters drawn as boxes or not at all: {''.join(boxes[:20])!r}")
            figure_problems, actions = operate_figures(page, name)
            problems += figure_problems
            if operated is not None:
                operated += actions
            if state["open"]:
                problems.append(f"{name}: {state['open']} of {state['details']} solutions are open")
            if screenshot and name in screenshot:
                page.wait_for_timeout(1000)  # MathJax in Lab typesets after rendering
                screenshot[name].parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot[name]))
        browser.close()
    return problems


_ROOTS: list[Path] = []


def _local(name: str) -> Path:
    for root in _ROOTS:
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(name)
