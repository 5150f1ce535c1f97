"""What every reader of a chapter gets, in the book, in Colab (which opens these very files) and in JupyterLab:
Markdown that all three render, solutions folded, and prose numbers that come out of the code above them."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from prose_numbers import prose_numbers, unbacked_numbers

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))

# Syntax only MyST renders: roles like {term}`x`, {cite}`k`, {glue:text}`n`; ::: and ```{directive} fences;
# directive options. Jupyter and Colab would show all of it raw.
MYST_ONLY = re.compile(r"\{[a-z][\w:-]*\}`|^\s*:{3,}|^\s*`{3,}\s*\{|^\s*:[a-z][\w-]*:\s", re.MULTILINE)


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def myst_only_syntax(markdown: str) -> list[str]:
    return [m.group(0).strip() for m in MYST_ONLY.finditer(markdown)]


def open_or_unfolded_solutions(markdown: str) -> list[str]:
    """Solutions a reader sees without asking: outside <details>, or in a <details open>."""
    problems = [m.group(0) for m in re.finditer(r"<details[^>]*\bopen\b[^>]*>", markdown)]
    folded = re.sub(r"<details>.*?</details>", "", markdown, flags=re.DOTALL)
    problems += re.findall(r"^.*\bSolution\b.*$", folded, re.MULTILINE)
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_is_the_subset_every_renderer_reads(path):
    found = {i: myst_only_syntax(md) for i, md in markdown_cells(path)}
    assert not {i: f for i, f in found.items() if f}, f"MyST-only syntax, raw in Colab and JupyterLab: {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_solution_is_folded(path):
    cells = markdown_cells(path)
    assert any("<details>" in md for _, md in cells), "each chapter has exercises with folded solutions"
    problems = {i: p for i, md in cells if (p := open_or_unfolded_solutions(md))}
    assert not problems, f"solutions a reader sees unasked: {problems}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_prose_numbers_come_from_the_outputs_above(path):
    missing = unbacked_numbers(json.loads(path.read_text()))
    assert not missing, ("numbers in the prose that no output above shows (print them, or declare a constant in "
                         f"an HTML comment, see tests/prose_numbers.py): {missing}")


def test_the_checks_fail_on_a_mutated_chapter():
    """A copy of chapter 1 with a prose number changed, a raw role, an open and an unfolded solution."""
    nb = json.loads(NOTEBOOKS[0].read_text())
    mutated = copy.deepcopy(nb)
    index, cell, number = next((i, c, n) for i, c in enumerate(mutated["cells"]) if c["cell_type"] == "markdown"
                               for n in prose_numbers("".join(c["source"])) if "." in n)
    text = "".join(cell["source"])
    wrong = f"{float(number) + 0.5:.{len(number.split('.')[1])}f}"
    cell["source"] = [text.replace(number, wrong, 1)]
    assert unbacked_numbers(nb) == [] and f"cell {index}: {wrong}" in unbacked_numbers(mutated)
    assert myst_only_syntax("a {term}`token <Token>` and {cite}`k`\n:::{note}\n:::") != []
    assert open_or_unfolded_solutions("<details open><summary>Solution</summary>\n\nx\n\n</details>")
    assert open_or_unfolded_solutions("**Solution.** x = 3")
    assert not open_or_unfolded_solutions("<details><summary>Solution</summary>\n\nx = 3\n\n</details>")
