"""The learner's path through every chapter (scripts/learner_path.py measures it): checks and drawing code
folded in all three readers at once, no formatter-split statements, no long drawing cell in view, and the
book-wide limits on visible code and on the number of assertions."""

import copy
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from learner_path import MAX_PLOT_LINES, fold, is_folded, measure, plot_lines, source

NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
# the book before the learner's-path rework had 5,218 visible code lines and 274 assert lines: at most 70% of
# the first in view, and never fewer assertions
MAX_VISIBLE_LINES = 3650
MIN_ASSERT_LINES = 274
MAX_DANGLING = 10


def code_cells(path):
    cells = json.loads(path.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code" and source(c).strip()]


def folding_markers(cell) -> set[str]:
    meta = cell.get("metadata", {})
    found = set()
    if set(meta.get("tags", [])) & {"hide-input", "remove-input", "remove-cell", "hide-cell"}:
        found.add("book")
    if meta.get("jupyter", {}).get("source_hidden"):
        found.add("jupyterlab")
    if meta.get("cellView") == "form":
        found.add("colab")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_folded_cell_is_folded_in_every_reader(path):
    # the first cell, the Colab setup cell, is book/_setup_cell.py verbatim (the book hides it)
    half = [source(c).splitlines()[0] for c in code_cells(path)[1:] if folding_markers(c) and not is_folded(c)]
    assert half == [], f"folded in one reader but not in all three (use learner_path.fold): {half}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_long_drawing_cell_in_view(path):
    long = [source(c).splitlines()[0] for c in code_cells(path) if not folding_markers(c)
            and plot_lines(source(c)) > MAX_PLOT_LINES]
    assert long == [], f"visible cells with more than {MAX_PLOT_LINES} plotting lines (fold them): {long}"


def test_book_wide_limits():
    rows = {p.stem: measure(p) for p in NOTEBOOKS}
    total = {key: sum(row[key] for row in rows.values()) for key in next(iter(rows.values()))}
    assert total["book lines"] <= MAX_VISIBLE_LINES and total["lab lines"] <= MAX_VISIBLE_LINES, total
    assert total["assert lines"] >= MIN_ASSERT_LINES, total
    assert total["dangling"] <= MAX_DANGLING, {name: row["dangling"] for name, row in rows.items()}


def test_the_checks_fail_on_a_mutated_chapter():
    cells = code_cells(NOTEBOOKS[0])
    folded = next(c for c in cells if is_folded(c))
    half = copy.deepcopy(folded)
    half["metadata"]["jupyter"]["source_hidden"] = False
    assert folding_markers(half) and not is_folded(half)
    cell = {"cell_type": "code", "metadata": {}, "source": ["x = f(\n", "    1\n", ")  # a comment\n"]}
    assert measure_cells([cell])["dangling"] == 1
    drawing = {"cell_type": "code", "metadata": {}, "source": [f"ax.plot({i})\n" for i in range(11)]}
    assert plot_lines(source(drawing)) == 11
    assert is_folded(fold(copy.deepcopy(drawing), "Figure: eleven lines"))
    with pytest.raises(ValueError, match="title must be one non-empty line"):
        fold(copy.deepcopy(drawing), "two\nlines")


def measure_cells(cells, tmp=ROOT / "_build"):
    tmp.mkdir(exist_ok=True)
    path = tmp / "learner_path_probe.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    try:
        return measure(path)
    finally:
        path.unlink()
