"""Are a chapter's static (matplotlib) figures readable at the book's column width? Checked while the chapter
runs (the simulated Colab run, tests/test_colab.py, executes every chapter anyway): a cell put after the setup
cell wraps matplotlib's print_figure, which the inline backend calls for every figure it shows, and a last cell
prints what it found. Both cells are removed again before the outputs are compared with the stored ones.

The rules: the book shows a figure at most 688 px wide (its column at a 1280 px window) and shrinks wider
ones (by at most 1.5x: tests/test_browser.py measures that in the built book), so
- every text is at least 8 px on screen after that shrink;
- an axes with more than one line has a legend;
- images compared in one figure share one colour scale, unless each has its own colour bar."""

from __future__ import annotations

import json

import nbformat

COLUMN_PX = 688
MIN_TEXT_PX = 8.0
MARK = "FIGURE-AUDIT:"

INSTALL = f'''
import io as _io, struct as _struct
import matplotlib.backend_bases as _backend_bases
import matplotlib.text as _mtext
from matplotlib.image import AxesImage as _AxesImage

_FIGURE_AUDIT = []
_print_figure = _backend_bases.FigureCanvasBase.print_figure


def _audit(fig, png, dpi):
    width = _struct.unpack(">I", png[16:20])[0]
    shrink = max(1.0, width / {COLUMN_PX})
    found = []
    small = sorted({{(round(t.get_fontsize() * dpi / 72 / shrink, 1), t.get_text().strip()[:30])
                    for t in fig.findobj(_mtext.Text) if t.get_visible() and t.get_text().strip()}})
    small = [s for s in small if s[0] < {MIN_TEXT_PX}]
    if small:
        found.append(f"text below {MIN_TEXT_PX:g} px on screen: {{small[:4]}}")
    for ax in fig.axes:
        lines = [l for l in ax.get_lines() if l.get_visible() and len(l.get_xdata()) > 2]
        if len(lines) > 1 and ax.get_legend() is None and not fig.legends:
            found.append(f"axes {{ax.get_title()!r}}: {{len(lines)}} lines and no legend")
    images = [im for ax in fig.axes for im in ax.get_children() if isinstance(im, _AxesImage)]
    scales = {{tuple(round(v, 6) for v in im.get_clim()) for im in images}}
    if len(scales) > 1 and not all(im.colorbar is not None for im in images):
        found.append(f"{{len(images)}} images on {{len(scales)}} colour scales and not one colour bar each")
    if found:
        _FIGURE_AUDIT.append((fig.get_suptitle() or (fig.axes[0].get_title() if fig.axes else ""), found))


def _audited_print_figure(self, filename, *args, **kwargs):
    result = _print_figure(self, filename, *args, **kwargs)
    png = filename.getvalue() if isinstance(filename, _io.BytesIO) else b""
    if png[:8] == b"\\x89PNG\\r\\n\\x1a\\n":
        _audit(self.figure, png, kwargs.get("dpi") or self.figure.dpi)
    return result


_backend_bases.FigureCanvasBase.print_figure = _audited_print_figure
'''

REPORT = f'import json as _json\nprint("{MARK}" + _json.dumps(_FIGURE_AUDIT))'


def instrument(nb) -> None:
    """Put the audit after the setup cell (the first code cell) and its report at the end."""
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first + 1, nbformat.v4.new_code_cell(INSTALL))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))


def findings(nb) -> list[str]:
    """Take the audit's two cells out of an executed, instrumented notebook; return what it found."""
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    assert nb.cells[first + 1].source == INSTALL and nb.cells[-1].source == REPORT
    report = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    del nb.cells[-1], nb.cells[first + 1]
    audit = json.loads(report.split(MARK, 1)[1])
    return [f"figure {title!r}: {problem}" for title, problems in audit for problem in problems]
