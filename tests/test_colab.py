"""Colab, simulated: every chapter runs top to bottom in a fresh environment that holds only what Colab
preinstalls and the chapters need, with `google.colab` importable, from a working directory with no repository
files; the setup cell installs the package (from this checkout, via TRANSFORMER_STEPS_SOURCE).

Colab's CPU is not this machine's, so the kernel runs on an older CPU, emulated: ATen's generic kernels
instead of its AVX2/AVX-512 ones, MKL held to SSE4.2. Every output must still equal the stored one (as
nbval compares them), so this is also the check that the book's numbers reproduce on another CPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import figure_audit
import nbformat
import pytest
from nbclient import NotebookClient
from stored_outputs import differences

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
# Preinstalled on Colab and used by the chapters; pinned to this environment's versions so pip reuses them.
COLAB_PACKAGES = [f"{name}=={version(name)}" for name in ("torch", "numpy", "matplotlib", "ipykernel",
                                                           "ipywidgets", "transformers", "plotly")]
OLDER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
# An exercise: a visible answer cell `answer_N = None  # your turn: ...`, a check that prints "Correct!" for a
# right answer, and a folded solution that gives the value as `answer_N = <expression>`, or a ```python block
# that assigns answer_N (pasted in whole, as a reader would).
ANSWER_LINE = re.compile(r"^(answer_\w+) = None\b.*$", re.MULTILINE)
SOLUTION = re.compile(r"(?<!`)`(answer_\w+) = ([^`]+)`")
SOLUTION_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
ASSIGNED = re.compile(r"^(answer_\w+)\s*=", re.MULTILINE)
NOT_ATTEMPTED = re.compile(r"^Not attempted yet: set `\w+` and run this cell again\.$", re.MULTILINE)


def fill_in_solutions(nb) -> list[str]:
    """Put each folded solution's value into its answer cell, as a reader who solved the exercise would; the
    names filled in. Every answer cell needs a solution that states its value."""
    solutions = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "<details>" in cell.source:
            for block in SOLUTION_BLOCK.findall(cell.source):
                solutions.update((name, block.rstrip()) for name in ASSIGNED.findall(block))
            solutions.update((name, f"{name} = {value}") for name, value in SOLUTION.findall(cell.source))
    filled = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for name in ANSWER_LINE.findall(cell.source):
            assert name in solutions, f"no folded solution states `{name} = ...`"
            line = re.search(rf"^{name} = None\b.*$", cell.source, flags=re.MULTILINE)
            cell.source = cell.source[:line.start()] + solutions[name] + cell.source[line.end():]
            filled.append(name)
    return filled


def expect_correct(stored):
    """The stored outputs as they read once every answer is filled in: "Correct!" where a check said the
    exercise was not attempted yet."""
    for cell in stored.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                output["text"] = NOT_ATTEMPTED.sub("Correct!", output["text"])


@pytest.fixture(scope="module")
def colab_kernel(tmp_path_factory):
    base = tmp_path_factory.mktemp("colab")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # --no-compile: byte-compiling torch's Python files took half of this install (72 s against 149 s)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                    *COLAB_PACKAGES], check=True)
    stub = base / "stub" / "google" / "colab"
    stub.mkdir(parents=True)
    (stub.parent / "__init__.py").write_text("")
    (stub / "__init__.py").write_text('"""Stand-in for Colab\'s module: its presence is what the setup cell '
                                      'looks for."""\n')
    spec = base / "jupyter" / "kernels" / "colab-sim"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab (simulated)", "language": "python",
        "env": {"PYTHONPATH": str(base / "stub"), "TRANSFORMER_STEPS_SOURCE": str(ROOT),
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", **OLDER_CPU},
    }))
    workdir = base / "content"  # Colab's /content: nothing from the repository is here
    workdir.mkdir()
    # before any chapter's setup cell has installed the package: the modules the simulated Colab lacks
    # (each worker of `pytest -n 2` builds its own, and runs chapters in any order)
    importable = {module: subprocess.run([str(python), "-c", f"import {module}"], check=False,
                                         capture_output=True).returncode == 0
                  for module in ("transformer_steps", "myst_nb", "nbval", "tiktoken")}
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(base / "jupyter")
    yield python, workdir, importable
    if old is None:
        os.environ.pop("JUPYTER_PATH")
    else:
        os.environ["JUPYTER_PATH"] = old


def test_colab_environment_lacks_the_package_and_the_book_tools(colab_kernel):
    _, _, importable = colab_kernel
    assert set(importable) == {"transformer_steps", "myst_nb", "nbval", "tiktoken"}
    preinstalled = [module for module, found in importable.items() if found]
    assert preinstalled == [], f"{preinstalled} must not be preinstalled in the simulated Colab"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_chapter_runs_in_colab_and_reproduces_its_outputs(colab_kernel, path):
    python, workdir, _ = colab_kernel
    stored = nbformat.read(path, as_version=4)
    nb = nbformat.read(path, as_version=4)
    figure_audit.instrument(nb)  # the static figures are audited on the way (tests/figure_audit.py)
    # a reader who solved every exercise: each check must then say "Correct!", and nothing else may change
    if fill_in_solutions(nb):
        expect_correct(stored)
    start = time.perf_counter()
    NotebookClient(nb, kernel_name="colab-sim", timeout=600,
                   resources={"metadata": {"path": str(workdir)}}).execute()
    print(f"{path.name}: {time.perf_counter() - start:.1f} s in simulated Colab")
    unreadable = figure_audit.findings(nb)
    diffs = differences(stored, nb)
    assert not diffs, (f"{path.name} on an older CPU (generic kernels), every exercise answered with its solution, "
                       "prints other outputs than the stored ones (a check not saying Correct! included):\n"
                       + "\n".join(diffs))
    assert not unreadable, f"{path.name}: figures not readable at the book's column width:\n" + "\n".join(unreadable)
    installed = subprocess.run([str(python), "-c", "import transformer_steps, sys; print(transformer_steps.__file__)"],
                               capture_output=True, text=True, check=True).stdout
    assert str(ROOT / "src") not in installed, "the package must come from the setup cell's pip install"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_exercise_states_its_answer_in_its_solution(path):
    nb = nbformat.read(path, as_version=4)
    names = fill_in_solutions(nb)
    assert names, f"{path.name} has no exercise with an answer cell `answer_N = None  # your turn: ...`"
    assert not any(ANSWER_LINE.search(c.source) for c in nb.cells if c.cell_type == "code")


def test_filling_in_solutions_fails_on_a_mutated_chapter():
    exercise = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("answer_1 = None  # your turn: 2 + 2\ncheck(answer_1, 4, name='answer_1')"),
        nbformat.v4.new_markdown_cell("<details><summary>Solution</summary>\n\n`answer_1 = 2 + 2`\n\n</details>")])
    assert fill_in_solutions(exercise) == ["answer_1"]
    assert exercise.cells[0].source.splitlines()[0] == "answer_1 = 2 + 2"
    exercise.cells[0].source = "answer_1 = None  # your turn"
    exercise.cells[1].source = "<details>\n\n```python\nx = 2\nanswer_1 = x + x\n```\n\n</details>"
    assert fill_in_solutions(exercise) == ["answer_1"]
    assert exercise.cells[0].source == "x = 2\nanswer_1 = x + x"
    exercise.cells[1].source = "<details><summary>Solution</summary>\n\nFour.\n\n</details>"
    exercise.cells[0].source = "answer_1 = None  # your turn"
    with pytest.raises(AssertionError, match="no folded solution states `answer_1 = ...`"):
        fill_in_solutions(exercise)
    stored = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("check(answer_1, 4)")])
    stored.cells[0].outputs = [nbformat.v4.new_output(
        "stream", name="stdout", text="Not attempted yet: set `answer_1` and run this cell again.\n")]
    expect_correct(stored)
    assert stored.cells[0].outputs[0]["text"] == "Correct!\n"
