"""Colab, simulated: every chapter runs top to bottom in a fresh environment that holds only what Colab
preinstalls and the chapters need, with `google.colab` importable, from a working directory with no repository
files; the setup cell installs the package (from this checkout, via TRANSFORMER_STEPS_SOURCE).

Colab's CPU is not this machine's, so the kernel runs on an older CPU, emulated: ATen's generic kernels
instead of its AVX2/AVX-512 ones, MKL held to SSE4.2. Every output must still equal the stored one (as
nbval compares them), so this is also the check that the book's numbers reproduce on another CPU."""

from __future__ import annotations

import json
import os
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


@pytest.fixture(scope="module")
def colab_kernel(tmp_path_factory):
    base = tmp_path_factory.mktemp("colab")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
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
    start = time.perf_counter()
    NotebookClient(nb, kernel_name="colab-sim", timeout=600,
                   resources={"metadata": {"path": str(workdir)}}).execute()
    print(f"{path.name}: {time.perf_counter() - start:.1f} s in simulated Colab")
    unreadable = figure_audit.findings(nb)
    diffs = differences(stored, nb)
    assert not diffs, (f"{path.name} on an older CPU (generic kernels) prints other outputs than the stored ones:\n"
                       + "\n".join(diffs))
    assert not unreadable, f"{path.name}: figures not readable at the book's column width:\n" + "\n".join(unreadable)
    installed = subprocess.run([str(python), "-c", "import transformer_steps, sys; print(transformer_steps.__file__)"],
                               capture_output=True, text=True, check=True).stdout
    assert str(ROOT / "src") not in installed, "the package must come from the setup cell's pip install"
