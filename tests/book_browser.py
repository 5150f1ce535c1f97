"""Open every page of the built book in headless Chromium and list what a reader would see broken.

Used by tests/test_browser.py; also runnable: `python tests/book_browser.py _build/html`.
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
import urllib.parse
from pathlib import Path

from figure_browser import operate_figures

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"]

# Text a reader sees, with code, scripts and typeset formulas removed: no TeX may be left in it.
VISIBLE_TEXT_JS = """() => {
  const body = document.querySelector('main') || document.body;
  const copy = body.cloneNode(true);
  copy.querySelectorAll('pre, code, script, style, mjx-container, .highlight, textarea').forEach(e => e.remove());
  return copy.innerText;
}"""

PAGE_STATE_JS = """async () => {
  // MathJax is deferred: on a page that also loads plotly.js (4.8 MB) it can start after the network is idle
  for (let k = 0; k < 50 && document.querySelector('.math') && !(window.MathJax && MathJax.startup); k++) {
    await new Promise(r => setTimeout(r, 100));
  }
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const maths = [...document.querySelectorAll('.math')];
  const imgs = [...document.images].filter(i => i.getAttribute('src'));
  return {
    mathjax: !!(window.MathJax && MathJax.startup),
    maths: maths.length,
    untypeset: maths.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 60)),
    broken_images: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
    // at the book's column width: a figure shrunk more than 1.5x, a formula or a code block wider than its box
    shrunk: imgs.filter(i => i.closest('main') && i.clientWidth && i.naturalWidth / i.clientWidth > 1.5)
               .map(i => `${i.getAttribute('src').slice(-40)} (${i.naturalWidth} px shown at ${i.clientWidth})`),
    wide_math: [...document.querySelectorAll('mjx-container[display="true"]')]
               .filter(m => m.scrollWidth > m.clientWidth + 1).map(m => m.textContent.slice(0, 60)),
  };
}"""

# Code and printed output wider than their box (they would scroll sideways). Checked at 1440 px, where the code
# column holds 87 characters: lines are kept to 80 (tests/test_notebook_hygiene.py), which fit from there up.
WIDE_CODE_JS = """() => [...document.querySelectorAll('main pre')].filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => p.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), ''))"""

RAW_TEX = re.compile(r"\$\$|\\begin\{|\\frac|\\mathbf|\\\(|\\\[|\$[^$\n]*[\\^_{][^$\n]*\$")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(root: Path):
    """Serve root on a free localhost port in a daemon thread; returns (server, base_url)."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def book_pages(root: Path, edition: str = "en") -> list[str]:
    """The pages of one edition: English at the site's root, Chinese under zh/."""
    skip = {"genindex.html", "search.html"}
    pages = [p.relative_to(root) for p in root.rglob("*.html") if p.name not in skip]
    if edition == "zh":
        pages = [p for p in pages if p.parts[0] == "zh" and not p.parts[1].startswith("_")]
    else:
        pages = [p for p in pages if not p.parts[0].startswith("_") and p.parts[0] != "zh"]
    return sorted(map(str, pages))


def expected_colab_url(repository_url: str, branch: str, page: str) -> str:
    """Where a chapter's Colab button must point: its notebook on GitHub via Colab (zh/X.html: book/zh/X.ipynb)."""
    repo = urllib.parse.urlparse(repository_url).path.strip("/")
    notebook = page[: -len(".html")] + ".ipynb"
    if notebook.startswith("zh/"):
        notebook = "book/" + notebook
    return f"https://colab.research.google.com/github/{repo}/blob/{branch}/{notebook}"


def counterpart(page: str) -> str:
    """The same page in the other edition: book/X.html <-> zh/X.html."""
    return f"book/{page[3:]}" if page.startswith("zh/") else f"zh/{page.removeprefix('book/')}"


# Characters no installed font has are drawn as one and the same box ("tofu"), or not at all. Every distinct
# CJK character of the page is drawn in the page's own font on a canvas: a bitmap shared by three or more
# distinct characters, or an empty one, is a glyph the reader does not see.
MISSING_GLYPHS_JS = """() => {
  const main = document.querySelector('main') || document.body;
  const chars = [...new Set([...main.innerText].filter(c => c.codePointAt(0) >= 0x2e80 && !/\\s/.test(c)))];
  if (!chars.length) return [];
  const family = getComputedStyle(main.querySelector('p') || main).fontFamily;
  const canvas = document.createElement('canvas');
  canvas.width = 48; canvas.height = 48;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  ctx.font = `32px ${family}`;
  const seen = new Map(), empty = [];
  for (const c of chars) {
    ctx.clearRect(0, 0, 48, 48);
    ctx.fillText(c, 4, 36);
    const d = ctx.getImageData(0, 0, 48, 48).data;
    let h = 0, ink = 0;
    for (let i = 3; i < d.length; i += 4) { h = (Math.imul(h, 31) + d[i]) | 0; ink += d[i]; }
    if (!ink) { empty.push(c); continue; }
    seen.set(h, (seen.get(h) || []).concat([c]));
  }
  const boxes = [...seen.values()].filter(cs => cs.length >= 3).flat();
  return boxes.concat(empty);
}"""


def missing_glyphs(page) -> list[str]:
    """Characters on an open page that the reader would see as boxes or not at all."""
    return page.evaluate(MISSING_GLYPHS_JS)


def check_book(root: Path, repository_url: str, branch: str, notebooks: set[str],
               screenshot_dir: Path | None = None, edition: str = "en",
               only: set[str] | None = None) -> tuple[list[str], list[str]]:
    """Return (problems, notes) for the pages of one edition ('en' or 'zh'), or only those named. notebooks:
    page paths like 'book/01_x.html' or 'zh/01_x.html' that come from .ipynb files."""
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    operated: list[str] = []
    external: set[str] = set()
    server, base = serve(root)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            # playwright's 30 s default: a page with figures and MathJax took longer to go idle on a 2-core
            # machine whose other core ran a test worker and its kernel, and one took over 90 s with that
            # machine's load at 8 (a clean-clone run beside seven editors' kernels)
            context.set_default_timeout(180_000)

            def route(r):  # the book must read offline: nothing may come from outside
                if r.request.url.startswith(base) or r.request.url.startswith("data:"):
                    r.continue_()
                else:
                    external.add(r.request.url)
                    r.abort()

            context.route("**/*", route)
            for path in book_pages(root, edition):
                if only is not None and path not in only:
                    continue
                page = context.new_page()  # one page each, so a late event cannot land on the next page
                failed: list[str] = []
                page.on("requestfailed", lambda req, failed=failed: req.url.startswith(base)
                        and failed.append(req.url))
                page.on("response", lambda res, failed=failed: res.url.startswith(base) and res.status >= 400
                        and failed.append(f"{res.url} ({res.status})"))
                page.goto(base + path, wait_until="load")  # every script ran, deferred ones (MathJax) too
                page.wait_for_load_state("networkidle")
                rel = urllib.parse.unquote(page.url[len(base):].split("#")[0])  # after redirects
                if rel != path:
                    page.close()
                    continue  # a redirect (index.html -> the intro): its target is checked on its own
                state = page.evaluate(PAGE_STATE_JS)
                text = page.evaluate(VISIBLE_TEXT_JS)
                if state["maths"] and not state["mathjax"]:
                    problems.append(f"{rel}: {state['maths']} formulas but MathJax did not load")
                for m in state["untypeset"]:
                    problems.append(f"{rel}: formula not typeset: {m!r}")
                for m in RAW_TEX.finditer(text):
                    problems.append(f"{rel}: raw TeX in the text: {text[max(0, m.start() - 30):m.end() + 30]!r}")
                for src in state["shrunk"]:
                    problems.append(f"{rel}: figure shrunk by more than 1.5x: {src}")
                for m in state["wide_math"]:
                    problems.append(f"{rel}: formula wider than the column: {m!r}")
                for src in state["broken_images"]:
                    problems.append(f"{rel}: image did not load: {src}")
                for url in failed:
                    problems.append(f"{rel}: failed request for a local resource: {url}")
                problems += _check_links(root, rel, state["links"])
                page.set_viewport_size({"width": 1440, "height": 800})
                for line in page.evaluate(WIDE_CODE_JS):
                    problems.append(f"{rel}: code or output wider than the column at 1440 px: {line[:90]!r}")
                page.set_viewport_size({"width": 1280, "height": 800})
                boxes = missing_glyphs(page)
                if boxes:
                    problems.append(f"{rel}: {len(boxes)} characters drawn as boxes or not at all: "
                                    f"{''.join(boxes[:20])!r}")
                switch = page.eval_on_selector_all(".ts-edition-switch a", "as => as.map(a => a.href)")
                want = base + counterpart(rel)
                if [urllib.parse.unquote(h) for h in switch] != [want]:
                    problems.append(f"{rel}: link to the other edition is {switch or 'missing'}, expected {want}")
                figure_problems, actions = operate_figures(page, rel)
                problems += figure_problems
                operated += actions
                if rel in notebooks:
                    want = expected_colab_url(repository_url, branch, rel)
                    colab = [h for h in state["links"] if "colab.research.google.com" in h]
                    if colab != [want]:
                        problems.append(f"{rel}: Colab button points to {colab or 'nothing'}, expected {want}")
                    if screenshot_dir is not None:
                        screenshot_dir.mkdir(parents=True, exist_ok=True)
                        prefix = "zh_" if edition == "zh" else ""
                        page.screenshot(path=str(screenshot_dir / (prefix + Path(rel).stem + ".png")))
                page.close()
            browser.close()
    finally:
        server.shutdown()
    notes = [f"blocked external request: {u}" for u in sorted(external)] + operated
    return problems, notes


def _check_links(root: Path, rel: str, hrefs: list[str]) -> list[str]:
    """Every internal link resolves to a file, and its #fragment to an id in that file."""
    problems = []
    here = (root / rel).parent
    for href in hrefs:
        parsed = urllib.parse.urlparse(href)
        if parsed.scheme or href.startswith(("//", "mailto:", "javascript:")):
            continue
        target = (root / rel) if not parsed.path else (here / urllib.parse.unquote(parsed.path)).resolve()
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            problems.append(f"{rel}: broken internal link {href!r}")
            continue
        frag = urllib.parse.unquote(parsed.fragment)
        if frag and target.suffix == ".html":
            html = target.read_text(encoding="utf-8", errors="replace")
            if f'id="{frag}"' not in html and f"id='{frag}'" not in html:
                problems.append(f"{rel}: link {href!r}: no id {frag!r} in {target.name}")
    return problems


def _chromium() -> str:
    import shutil

    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise FileNotFoundError("no Chromium found: install Debian's `chromium` package (apt-get install chromium)")


def site_settings(repo_root: Path) -> tuple[str, str, set[str]]:
    """(repository URL, branch, pages built from notebooks) from _config.yml and _toc.yml."""
    import yaml

    repo = yaml.safe_load((repo_root / "_config.yml").read_text())["repository"]
    toc = yaml.safe_load((repo_root / "_toc.yml").read_text())

    def notebook_pages(node) -> set[str]:
        if isinstance(node, list):
            return set().union(*map(notebook_pages, node)) if node else set()
        if not isinstance(node, dict):
            return set()
        found = {f"{node['file']}.html"} if (repo_root / f"{node.get('file', '')}.ipynb").is_file() else set()
        return found.union(*(notebook_pages(v) for v in node.values() if isinstance(v, (list, dict))))

    return repo["url"], repo.get("branch", "main"), notebook_pages(toc)


if __name__ == "__main__":
    import sys

    url, branch, notebooks = site_settings(Path("."))
    found, info = check_book(Path(sys.argv[1] if len(sys.argv) > 1 else "_build/html"), url, branch, notebooks,
                             Path("_build/screenshots"))
    print("\n".join(info + found) or "no problems")
    sys.exit(1 if found else 0)
