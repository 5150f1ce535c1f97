"""Interactive figures for the chapters: heatmaps that show a cell's value under the pointer, and
step-throughs with Prev and Next buttons. Built with plotly, whose wheel ships plotly.js.

One output serves every reader:
- JupyterLab (and VS Code) render the `application/vnd.plotly.v1+json` part with plotly's own extension,
  installed with the wheel: offline, and in an untrusted notebook too;
- the book and Colab render the `text/html` part. It draws with the page's plotly.js when there is one (the
  book serves its own copy, see `_ext/plotly_offline.py`) and loads the pinned version from plotly's CDN
  otherwise (Colab, which is online);
- nbval compares both parts, so they hold only rounded numbers and a fixed element id.

Prev and Next are plain plotly buttons: every frame carries its own pair, aimed at its neighbours, so
stepping needs no code outside the figure.
"""

from __future__ import annotations

import json
import re

import numpy as np

from ..validate import check_int

_NAME = re.compile(r"[a-z][a-z0-9-]*\Z")
PREV, NEXT = "◀ Prev", "Next ▶"
# Fixed size, not autosize: JupyterLab's plotly renderer resizes an autosized figure to its container, which
# has no height of its own, and a step-through collapsed to its buttons after the first Next. 680 px fits the
# book's column (688 px at a 1280 px window).
WIDTH = 680


class Figure:
    """A plotly figure that displays as the mime bundle described above. `name` becomes its element id
    (`ts-<name>`), so it must be unique on its page and the stored output stays the same run after run."""

    def __init__(self, figure, name: str, *, height: int):
        import plotly.graph_objects as go

        if not isinstance(figure, go.Figure):
            raise TypeError(f"figure must be a plotly.graph_objects.Figure, got {type(figure).__name__}")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"name must be lower-case letters, digits and '-', starting with a letter; got {name!r}")
        self.figure, self.name = figure, name
        self.height = check_int("height", height, 100, 2000)
        figure.update_layout(height=self.height, width=WIDTH, autosize=False)

    @property
    def element_id(self) -> str:
        return f"ts-{self.name}"

    def spec(self) -> dict:
        """data, layout, frames and config as plain JSON (no typed arrays, so the stored output is readable)."""
        spec = json.loads(self.figure.to_json(engine="json"))
        spec = _plain(spec)
        spec["config"] = {"displaylogo": False, "responsive": False, "scrollZoom": False}
        return spec

    def _repr_mimebundle_(self, include=None, exclude=None):
        spec = self.spec()
        return {
            "application/vnd.plotly.v1+json": spec,
            "text/html": _html(self.element_id, spec, self.height),
            "text/plain": f"<interactive figure {self.name!r}: "
                          f"{'step through it and hover it' if spec.get('frames') else 'hover it'} "
                          "in the book, Colab or JupyterLab>",
        }


def _plain(value):
    """plotly writes numpy arrays as base64 'bdata'; decode them back to nested lists."""
    if isinstance(value, dict):
        if set(value) >= {"dtype", "bdata"}:
            import base64

            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
            if "shape" in value:
                array = array.reshape([int(n) for n in str(value["shape"]).split(",")])
            return array.tolist()
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _html(element_id: str, spec: dict, height: int) -> str:
    import plotly.offline

    cdn = f"https://cdn.plot.ly/plotly-{plotly.offline.get_plotlyjs_version()}.min.js"
    # json.dumps escapes nothing HTML-special; "</" would end the script element early.
    payload = json.dumps(spec, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    return (
        f'<div id="{element_id}" class="plotly-graph-div ts-figure" style="height:{height}px; width:100%;"></div>\n'
        '<script type="text/javascript">\n'
        "(function () {\n"
        f"  var spec = {payload};\n"
        "  function draw() {\n"
        f'    Plotly.newPlot("{element_id}", spec.data, spec.layout, spec.config).then(function (gd) {{\n'
        "      if (spec.frames) { return Plotly.addFrames(gd, spec.frames); }\n"
        "    });\n"
        "  }\n"
        "  if (window.Plotly) { draw(); return; }\n"
        "  // No plotly.js on this page (Colab): the pinned version from plotly's CDN.\n"
        '  var script = document.createElement("script");\n'
        f'  script.src = "{cdn}";\n'
        "  script.onload = draw;\n"
        "  document.head.appendChild(script);\n"
        "})();\n"
        "</script>"
    )


def rounded(matrix, decimals: int = 4) -> list:
    """A matrix (tensor or array) as nested lists of rounded floats: the digits every CPU agrees on, no -0.0."""
    a = np.asarray(matrix.detach().cpu().double() if hasattr(matrix, "detach") else matrix, dtype=np.float64)
    return (np.round(a, decimals) + 0.0).tolist()


def heatmap(matrix, *, name: str, x_title: str, y_title: str, title: str, hover: str, decimals: int = 3,
            colorscale: str = "RdBu_r", zmid: float | None = 0.0, height: int = 420, x=None, y=None) -> Figure:
    """A heatmap whose cells show `hover` under the pointer. hover is a plotly template over %{x}, %{y} and
    %{z}; write the value as %{z:.3f} (say) so it shows the digits the chapter trusts. Row 0 is at the top,
    as in a printed matrix."""
    import plotly.graph_objects as go

    z = rounded(matrix, decimals)
    if not z or not isinstance(z[0], list):
        raise ValueError(f"heatmap needs a 2-d matrix, got shape {np.shape(z)}")
    trace = go.Heatmap(z=z, x=x, y=y, colorscale=colorscale, zmid=zmid,
                       hovertemplate=hover + "<extra></extra>", colorbar={"thickness": 14})
    fig = go.Figure(trace, layout={"template": "none", "title": {"text": title},
                                   "xaxis": {"title": {"text": x_title}},
                                   "yaxis": {"title": {"text": y_title}, "autorange": "reversed"},
                                   "margin": {"l": 70, "r": 20, "t": 60, "b": 60}})
    return Figure(fig, name, height=height)


def _buttons(k: int, n: int) -> list:
    def go_to(i):
        return [[f"step {i + 1}"], {"mode": "immediate", "frame": {"duration": 0, "redraw": True},
                                    "transition": {"duration": 0}}]

    return [{"type": "buttons", "direction": "left", "showactive": False, "x": 0.0, "xanchor": "left",
             "y": 1.02, "yanchor": "bottom", "pad": {"r": 6, "t": 0},
             "buttons": [{"label": PREV, "method": "animate", "args": go_to(max(k - 1, 0))},
                         {"label": NEXT, "method": "animate", "args": go_to(min(k + 1, n - 1))}]}]


def stepper(frames: list[dict], *, name: str, layout: dict | None = None, height: int = 480) -> Figure:
    """A figure to step through with Prev and Next. frames: one dict per step with `data` (a list of traces,
    the same traces in the same order in every step) and optionally `layout` (what changes in that step:
    its title, the shapes that highlight a stage). The figure opens on step 1; each step's title should
    say which step it is, so the reader (and the tests) can tell them apart."""
    import plotly.graph_objects as go

    if not isinstance(frames, list):
        raise TypeError(f"frames must be a list of dicts, got {type(frames).__name__}")
    if not frames:
        raise ValueError("stepper needs at least one frame")
    for k, frame in enumerate(frames):
        if not isinstance(frame, dict) or "data" not in frame:
            raise TypeError(f"frame {k} must be a dict with 'data' (and optionally 'layout')")
    n = len(frames)
    steps = [go.Frame(name=f"step {k + 1}", data=f["data"],
                      layout={**f.get("layout", {}), "updatemenus": _buttons(k, n)})
             for k, f in enumerate(frames)]
    base = {"template": "none", "margin": {"l": 60, "r": 20, "t": 90, "b": 40}, **(layout or {})}
    fig = go.Figure(data=frames[0]["data"], layout={**base, **frames[0].get("layout", {}),
                                                    "updatemenus": _buttons(0, n)}, frames=steps)
    return Figure(fig, name, height=height)
