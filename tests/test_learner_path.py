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
from learner_path import MAX_PLOT_LINES, fold, is_folded, main_line, measure, plot_lines, source

NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
# the book before the learner's-path rework had 5,218 visible code lines: at most 70% of them in view; and the
# checks only grow (274 assert lines before that rework, 389 before the teach-first rewrite of issue 31)
MAX_VISIBLE_LINES = 3650
MIN_ASSERT_LINES = 389
MAX_DANGLING = 10
# the main line's prose (before Going further, outside <details>) says what the reader sees: verification
# stays in folded checks, and the package is named where the reader uses it (chapter 7 builds the model that
# the package holds, and compares the two)
MAX_MAIN_ASSERT_WORDS = 1
MAX_MAIN_PACKAGE_WORDS = {"07_tiny_gpt": 12}
MAX_MAIN_PACKAGE_WORDS_DEFAULT = 6


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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_main_line_reports_results_not_verification(path):
    row = measure(path)
    limit = MAX_MAIN_PACKAGE_WORDS.get(path.stem, MAX_MAIN_PACKAGE_WORDS_DEFAULT)
    assert row["main: assert"] <= MAX_MAIN_ASSERT_WORDS, (
        f"the main line says 'assert…' {row['main: assert']} times (at most {MAX_MAIN_ASSERT_WORDS}): "
        "say what the reader sees, and keep the proof in a folded 'Check: …' cell")
    assert row["main: package"] <= limit, (
        f"the main line names the package {row['main: package']} times (at most {limit})")


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
    prose = [{"cell_type": "markdown", "source": ["The package asserts this (asserted).\n"]},
             {"cell_type": "markdown", "source": ["<details>assert</details> transformer_steps\n",
                                                  "## Going further\n", "assert package\n"]}]
    assert main_line(prose).count("assert") == 2 and "Going further" not in main_line(prose)
    row = measure_cells(prose)
    assert (row["main: assert"], row["main: package"]) == (2, 2)


def measure_cells(cells, tmp=ROOT / "_build"):
    tmp.mkdir(exist_ok=True)
    path = tmp / "learner_path_probe.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    try:
        return measure(path)
    finally:
        path.unlink()
