"""The interactive-figure helpers: one deterministic output for every reader, Prev/Next wired frame by frame,
hover templates that show the value, clear errors. In the browser: tests/test_browser.py, tests/test_jupyterlab.py."""

import json

import numpy as np
import pytest
import torch

go = pytest.importorskip("plotly.graph_objects")
from transformer_steps.course import interactive

PE = torch.sin(torch.arange(16.0)[:, None] / (1 + torch.arange(32.0)[None, :]))


def bundle(fig):
    return fig._repr_mimebundle_()


def heatmap(**kw):
    args = {"name": "pe", "x_title": "dimension", "y_title": "position", "title": "PE",
            "hover": "position %{y}<br>value %{z:.3f}"} | kw
    return interactive.heatmap(PE, **args)


def test_one_output_for_jupyterlab_the_book_and_colab():
    out = bundle(heatmap())
    assert set(out) == {"application/vnd.plotly.v1+json", "text/html", "text/plain"}
    html = out["text/html"]
    assert html.startswith('<div id="ts-pe" class="plotly-graph-div ts-figure"')
    assert "if (window.Plotly) { draw(); return; }" in html  # the book's own copy first, the CDN only without it
    spec = out["application/vnd.plotly.v1+json"]
    assert json.loads(html.split("var spec = ", 1)[1].split(";\n", 1)[0]) == spec  # the same figure in both


def test_output_is_the_same_run_after_run_and_holds_rounded_numbers_only():
    first, second = bundle(heatmap()), bundle(heatmap())
    assert first == second
    z = first["application/vnd.plotly.v1+json"]["data"][0]["z"]
    assert np.shape(z) == (16, 32)
    assert all(round(v, 3) == v for row in z for v in row)
    assert "bdata" not in json.dumps(first["application/vnd.plotly.v1+json"])  # plain lists, readable in a diff
    assert "-0.0," not in first["text/html"] and "-0.0]" not in first["text/html"]


def test_rounded_turns_negative_zero_into_zero():
    assert interactive.rounded(torch.tensor([[-0.00001, 0.12346]]), 4) == [[0.0, 0.1235]]
    assert str(interactive.rounded(np.array([-1e-9]), 3)[0]) == "0.0"


def test_heatmap_reads_like_a_printed_matrix_and_hovers_its_values():
    spec = heatmap().spec()
    assert spec["layout"]["yaxis"]["autorange"] == "reversed"  # row 0 on top
    trace = spec["data"][0]
    assert trace["hovertemplate"] == "position %{y}<br>value %{z:.3f}<extra></extra>"
    assert trace["zmid"] == 0.0


def frames(n):
    return [{"data": [go.Heatmap(z=[[k, k], [k, k]])], "layout": {"title": {"text": f"step {k + 1}"}}}
            for k in range(n)]


def targets(menu):
    return [button["args"][0][0] for button in menu[0]["buttons"]]


# where Prev and Next point, in the opening view and in each of four steps
WIRED = (["step 1", "step 2"], [["step 1", "step 2"], ["step 1", "step 3"], ["step 2", "step 4"], ["step 3", "step 4"]])


def wiring(spec):
    return targets(spec["layout"]["updatemenus"]), [targets(f["layout"]["updatemenus"]) for f in spec["frames"]]


def test_each_frame_aims_prev_and_next_at_its_neighbours():
    spec = interactive.stepper(frames(4), name="steps").spec()
    assert [f["name"] for f in spec["frames"]] == ["step 1", "step 2", "step 3", "step 4"]
    assert [b["label"] for b in spec["layout"]["updatemenus"][0]["buttons"]] == [interactive.PREV, interactive.NEXT]
    assert wiring(spec) == WIRED  # opens on step 1
    assert spec["layout"]["title"]["text"] == "step 1"
    assert [f["layout"]["title"]["text"] for f in spec["frames"]] == ["step 1", "step 2", "step 3", "step 4"]


@pytest.mark.parametrize("broken_next", [lambda k, n: min(k + 2, n - 1), lambda k, n: k])
def test_a_real_stepper_with_a_broken_next_fails_the_wiring_check(monkeypatch, broken_next):
    """The check above can fail: the real stepper, its Next aimed two steps on, or at its own step."""
    real = interactive._buttons

    def buttons(k, n):
        menu = real(k, n)
        menu[0]["buttons"][1]["args"][0] = [f"step {broken_next(k, n) + 1}"]
        return menu

    monkeypatch.setattr(interactive, "_buttons", buttons)
    assert wiring(interactive.stepper(frames(4), name="steps").spec()) != WIRED


@pytest.mark.parametrize("name", ["Has Space", "1starts-with-digit", "under_score", ""])
def test_a_name_that_cannot_be_an_element_id_is_a_value_error(name):
    with pytest.raises(ValueError, match="name must be"):
        interactive.Figure(go.Figure(), name, height=300)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(TypeError, match="plotly.graph_objects.Figure"):
        interactive.Figure({"data": []}, "x", height=300)
    with pytest.raises(TypeError, match="height must be an int"):
        interactive.Figure(go.Figure(), "x", height=300.0)
    with pytest.raises(ValueError, match=r"height must be in \[100, 2000\]"):
        interactive.Figure(go.Figure(), "x", height=20)
    with pytest.raises(ValueError, match="2-d matrix"):
        interactive.heatmap(torch.ones(3), name="x", x_title="", y_title="", title="", hover="")
    with pytest.raises(ValueError, match="at least one frame"):
        interactive.stepper([], name="x")
    with pytest.raises(TypeError, match="frames must be a list"):
        interactive.stepper(({"data": []},), name="x")
    with pytest.raises(TypeError, match="frame 1 must be a dict with 'data'"):
        interactive.stepper([{"data": []}, {"layout": {}}], name="x")


def test_html_cannot_close_its_script_early():
    fig = heatmap(title="</script><b>bold</b>")
    html = bundle(fig)["text/html"]
    assert html.count("</script>") == 1 and "<\\/script>" in html
