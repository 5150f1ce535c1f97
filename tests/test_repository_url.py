"""The repository URL lives in _config.yml; pyproject.toml and every notebook's setup cell must agree."""

import json
import re
import shutil
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
REPO_URL_LINE = re.compile(r'^REPO_URL = "([^"]*)"\s*$', re.MULTILINE)


def configured_url(root: Path) -> str:
    return yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"]


def setup_cell_url(source: str) -> str | None:
    match = REPO_URL_LINE.search(source)
    return match.group(1) if match else None


def first_code_cell(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return code[0] if code else ""


def repository_mismatches(root: Path) -> list[str]:
    """Every place whose repository URL differs from _config.yml, as readable messages."""
    expected = configured_url(root)
    problems = []
    urls = tomllib.loads((root / "pyproject.toml").read_text())["project"].get("urls", {})
    if urls.get("Repository") != expected:
        problems.append(f"pyproject.toml [project.urls] Repository = {urls.get('Repository')!r}")
    zh_config = root / "_config_zh.yml"  # the Chinese edition's
    if zh_config.exists() and (found := yaml.safe_load(zh_config.read_text())["repository"]["url"]) != expected:
        problems.append(f"_config_zh.yml repository url = {found!r}")
    sources = {"book/_setup_cell.py": (root / "book" / "_setup_cell.py").read_text()}
    for notebook in sorted((root / "book").glob("*.ipynb")):
        sources[notebook.relative_to(root).as_posix()] = first_code_cell(notebook)
    for name, source in sources.items():
        found = setup_cell_url(source)
        if found != expected:
            problems.append(f"{name}: REPO_URL = {found!r}")
    return [f"{p}, but _config.yml says {expected!r}" for p in problems]


def test_config_url_is_a_github_repository():
    # Colab launch buttons only work for GitHub repositories.
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", configured_url(ROOT))


def test_every_place_agrees_with_config():
    assert repository_mismatches(ROOT) == []


def _copy_of_repo(tmp_path: Path) -> Path:
    for name in ["_config.yml", "_config_zh.yml", "pyproject.toml", "book/_setup_cell.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    setup = (ROOT / "book" / "_setup_cell.py").read_text()
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# A chapter"]},
            {"cell_type": "code", "metadata": {}, "execution_count": 1, "outputs": [], "source": [setup]},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "book" / "99_fixture.ipynb").write_text(json.dumps(notebook))
    return tmp_path


def test_fixture_copy_agrees(tmp_path):
    assert repository_mismatches(_copy_of_repo(tmp_path)) == []


def test_notebook_pointing_elsewhere_is_caught(tmp_path):
    root = _copy_of_repo(tmp_path)
    notebook = root / "book" / "99_fixture.ipynb"
    notebook.write_text(notebook.read_text().replace(configured_url(ROOT), "https://github.com/someone/fork"))
    problems = repository_mismatches(root)
    assert len(problems) == 1 and problems[0].startswith("book/99_fixture.ipynb")


def test_pyproject_pointing_elsewhere_is_caught(tmp_path):
    root = _copy_of_repo(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(configured_url(ROOT), "https://gitlab.com/x/y"))
    problems = repository_mismatches(root)
    assert len(problems) == 1 and problems[0].startswith("pyproject.toml")


def test_config_change_alone_is_caught(tmp_path):
    root = _copy_of_repo(tmp_path)
    config = root / "_config.yml"
    config.write_text(config.read_text().replace(configured_url(ROOT), "https://github.com/new/home"))
    # pyproject, the Chinese edition's config, the setup-cell template and the notebook all name the old URL.
    assert len(repository_mismatches(root)) == 4


def test_chinese_config_pointing_elsewhere_is_caught(tmp_path):
    root = _copy_of_repo(tmp_path)
    config = root / "_config_zh.yml"
    config.write_text(config.read_text().replace(configured_url(ROOT), "https://github.com/new/home"))
    expected = f"_config_zh.yml repository url = 'https://github.com/new/home', but _config.yml says {configured_url(ROOT)!r}"
    assert repository_mismatches(root) == [expected]
