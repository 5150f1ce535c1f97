"""What nbval, the book and Colab need from every chapter notebook, and that _toc.yml matches book/."""

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
SETUP_CELL = (BOOK / "_setup_cell.py").read_text()
MAX_EXEMPT_FRACTION = 0.10
# The book's code column shows 75 characters at 1280 px and 87 at 1440 px: longer lines are cut off there.
MAX_CODE_LINE = 80
MAX_NOTEBOOK_BYTES = 2_000_000
# What a chapter may output. plotly's own type is there for JupyterLab (the book shows the HTML beside it, and
# _config.yml silences myst-nb's warning about that type only because nothing else unusual can get through).
ALLOWED_MIME_TYPES = {"text/plain", "text/html", "image/png", "application/vnd.plotly.v1+json"}


def text_outputs(cell: dict) -> str:
    """What a code cell prints, as the book shows it: streams, and the plain text of results without HTML."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out["text"]))
        elif "text/html" not in out.get("data", {}) and "text/plain" in out.get("data", {}):
            parts.append("".join(out["data"]["text/plain"]))
    return "\n".join(parts)


def toc_files(node) -> list[str]:
    """Every `root:` / `file:` entry of a jb-book toc, in order."""
    found = []
    if isinstance(node, dict):
        found += [node[key] for key in ("root", "file") if key in node]
        for value in node.values():
            found += toc_files(value)
    elif isinstance(node, list):
        for value in node:
            found += toc_files(value)
    return found


TOC = toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))


def code_cells(notebook: Path) -> list[dict]:
    cells = json.loads(notebook.read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def source(cell: dict) -> str:
    return "".join(cell["source"])


@pytest.mark.parametrize("entry", TOC)
def test_toc_entry_exists(entry):
    candidates = [ROOT / f"{entry}{suffix}" for suffix in (".md", ".ipynb")]
    assert any(path.exists() for path in candidates), f"_toc.yml lists {entry!r}, but no .md/.ipynb exists"


def test_toc_has_no_duplicates():
    assert len(TOC) == len(set(TOC))


def test_every_notebook_is_in_toc():
    missing = [nb.name for nb in NOTEBOOKS if nb.relative_to(ROOT).with_suffix("").as_posix() not in TOC]
    assert missing == [], f"add these to _toc.yml (one `- file: book/NAME` line each): {missing}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
class TestNotebook:
    def test_valid_json_with_code(self, notebook):
        assert code_cells(notebook), "a chapter needs code cells"

    def test_executed_top_to_bottom_in_fresh_kernel(self, notebook):
        counts = [c.get("execution_count") for c in code_cells(notebook)]
        assert counts == list(range(1, len(counts) + 1)), (
            f"execution counts {counts}: run `python scripts/refresh_notebooks.py {notebook.relative_to(ROOT)}`"
        )

    def test_no_error_outputs(self, notebook):
        errors = [o.get("ename") for c in code_cells(notebook) for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        assert errors == []

    def test_first_code_cell_is_setup_cell(self, notebook):
        assert source(code_cells(notebook)[0]).strip() == SETUP_CELL.strip(), (
            "the first code cell must be book/_setup_cell.py, verbatim"
        )

    def test_code_lines_fit_the_book_column(self, notebook):
        wide = [line for c in code_cells(notebook) for line in source(c).splitlines() if len(line) > MAX_CODE_LINE]
        assert wide == [], (f"{len(wide)} code lines wider than {MAX_CODE_LINE} characters (cut off in the book): "
                            f"write a shorter statement or name, or split it where a person would; never by a "
                            f"formatter, which leaves comments dangling: {wide[:3]}")

    def test_printed_lines_fit_the_book_column(self, notebook):
        wide = [line for c in code_cells(notebook) for line in text_outputs(c).splitlines()
                if len(line) > MAX_CODE_LINE]
        assert wide == [], (f"{len(wide)} printed lines wider than {MAX_CODE_LINE} characters (cut off in the "
                            f"book): {wide[:3]}")

    def test_small_enough(self, notebook):
        size = notebook.stat().st_size
        assert size <= MAX_NOTEBOOK_BYTES, f"{size:,} bytes; keep a chapter under {MAX_NOTEBOOK_BYTES:,}"

    def test_outputs_use_known_mime_types(self, notebook):
        found = {mime for c in code_cells(notebook) for out in c.get("outputs", []) for mime in out.get("data", {})}
        assert found <= ALLOWED_MIME_TYPES, f"unexpected output types {found - ALLOWED_MIME_TYPES}"

    def test_never_sets_mplbackend(self, notebook):
        assert "MPLBACKEND" not in notebook.read_text(), "MPLBACKEND hides plots from the book"

    def test_few_cells_exempt_from_nbval(self, notebook):
        cells = code_cells(notebook)
        exempt = [c for c in cells if "NBVAL_IGNORE_OUTPUT" in source(c) or "NBVAL_SKIP" in source(c)]
        assert len(exempt) <= MAX_EXEMPT_FRACTION * len(cells), (
            f"{len(exempt)}/{len(cells)} code cells exempt from nbval; make their outputs deterministic"
        )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_stored_output_names_a_local_path(notebook):
    """A path of this machine in an output (a warning's file name, say) differs on every other machine."""
    for cell in code_cells(notebook):
        text = json.dumps(cell.get("outputs", []))
        for marker in ("site-packages", "/work/", "/tmp/", "/home/", "/root/"):
            assert marker not in text, f"{notebook.name}: an output names a local path ({marker}): {source(cell)[:80]}"
