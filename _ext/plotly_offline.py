"""Sphinx extension: serve plotly.js from the book, as MathJax is, so interactive figures work offline.

The file comes from the installed plotly wheel (not committed: it is 4.8 MB). Only the pages that hold a
figure load it; a figure's own script draws with it (see transformer_steps/course/interactive.py)."""

from __future__ import annotations

from pathlib import Path

FILE = "plotly.min.js"


def _write_plotly_js(app, exception):
    if exception is None and app.builder.format == "html":
        import plotly.offline

        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        (static / FILE).write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")


def _add_to_figure_pages(app, pagename, templatename, context, doctree):
    if "ts-figure" in context.get("body", ""):
        app.add_js_file(FILE, priority=100)  # before the page body's figure scripts run


def setup(app):
    app.connect("html-page-context", _add_to_figure_pages)
    app.connect("build-finished", _write_plotly_js)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
