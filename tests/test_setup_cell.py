"""The Colab setup cell (book/_setup_cell.py) installs the package only in Colab and never fails elsewhere."""

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

SETUP_CELL = (Path(__file__).resolve().parents[1] / "book" / "_setup_cell.py").read_text()


@pytest.fixture
def pip_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kwargs: calls.append(cmd))
    return calls


def run_setup_cell() -> dict:
    namespace: dict = {}
    exec(SETUP_CELL, namespace)  # noqa: S102  (running the notebook cell is the test)
    return namespace


def pretend_colab(monkeypatch, *, package_installed: bool):
    google = types.ModuleType("google")
    google.colab = types.ModuleType("google.colab")
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", google.colab)
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "transformer_steps":
            return object() if package_installed else None  # any non-None spec means "importable"
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_no_op_outside_colab(monkeypatch, pip_calls):
    # `google` may be absent or be an unrelated namespace package (protobuf); neither is Colab.
    monkeypatch.setitem(sys.modules, "google.colab", None)
    namespace = run_setup_cell()
    assert namespace["IN_COLAB"] is False
    assert pip_calls == []


def test_installs_from_repository_in_colab(monkeypatch, pip_calls):
    monkeypatch.delenv("TRANSFORMER_STEPS_SOURCE", raising=False)
    pretend_colab(monkeypatch, package_installed=False)
    namespace = run_setup_cell()
    assert namespace["IN_COLAB"] is True
    assert pip_calls == [[sys.executable, "-m", "pip", "install", "--quiet", f"git+{namespace['REPO_URL']}"]]


def test_install_source_can_be_redirected(monkeypatch, pip_calls, tmp_path):
    monkeypatch.setenv("TRANSFORMER_STEPS_SOURCE", str(tmp_path))
    pretend_colab(monkeypatch, package_installed=False)
    run_setup_cell()
    assert pip_calls == [[sys.executable, "-m", "pip", "install", "--quiet", str(tmp_path)]]


def test_no_install_when_package_present_in_colab(monkeypatch, pip_calls):
    pretend_colab(monkeypatch, package_installed=True)
    assert run_setup_cell()["IN_COLAB"] is True
    assert pip_calls == []
