"""What a learner meets in each chapter, measured, and the one way to fold a cell out of their path.

Usage: python scripts/learner_path.py [NOTEBOOK ...]      (default: every book/*.ipynb)

A folded cell is out of sight in all three readers, and still runs (nbval checks it like any other):
- the book (myst-nb): the tag `hide-input` puts the code behind a "show code" toggle (outputs stay);
- JupyterLab: `metadata.jupyter.source_hidden` collapses the input to a bar that a click opens;
- Colab: `metadata.cellView = "form"` with a first line `# @title ...` shows the title, the code behind
  "Show code".
Solution checks (`remove-cell`, no answer printed above its solution) fold the same way and stay removed in
the book.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK_HIDDEN_TAGS = {"hide-input", "remove-input", "remove-cell", "hide-cell"}
TITLE = re.compile(r"^# @title \S")
# A statement a formatter split around a trailing comment: the comment dangles after a closing bracket.
DANGLING = re.compile(r"^\s*[\)\]\}]+,?\s*#")
# An assertion a reader sees or opens: a plain assert, or a comparison with a reference.
ASSERT_LINE = re.compile(r"\s*(assert\b|torch\.testing\.assert_close|assert_close)")
# A line that draws or lays out a figure (matplotlib or plotly).
PLOT_LINE = re.compile(r"\b(plt|ax|axes|axs|fig|figure|go|px|interactive|heatmap|loss_curves|colorbar|legend"
                       r"|xaxis|yaxis|layout|annotations?|marker|trace|update_\w+|add_\w+|set_\w+)\b")
MAX_PLOT_LINES = 10
# Verification mentioned in the main line's prose, and the package named there (see main_line).
ASSERT_WORD = re.compile(r"\bassert\w*", re.IGNORECASE)
PACKAGE_WORD = re.compile(r"\bpackage\b|transformer_steps", re.IGNORECASE)
GOING_FURTHER = re.compile(r"^#+\s*Going further", re.MULTILINE)


def source(cell: dict) -> str:
    return "".join(cell["source"])


def is_folded(cell: dict) -> bool:
    """Folded in all three readers: the book's tag, JupyterLab's source_hidden, Colab's form title."""
    meta = cell.get("metadata", {})
    return (bool(set(meta.get("tags", [])) & BOOK_HIDDEN_TAGS) and meta.get("jupyter", {}).get("source_hidden")
            is True and meta.get("cellView") == "form" and bool(TITLE.match(source(cell))))


def fold(cell: dict, title: str) -> dict:
    """Fold a code cell in the book, JupyterLab and Colab, under a one-line title that says what it does."""
    if cell["cell_type"] != "code":
        raise ValueError("only code cells fold; prose detours go in <details>")
    if not title or "\n" in title:
        raise ValueError(f"title must be one non-empty line, got {title!r}")
    meta = cell.setdefault("metadata", {})
    tags = meta.setdefault("tags", [])
    if not set(tags) & BOOK_HIDDEN_TAGS:
        tags.append("hide-input")
    meta.setdefault("jupyter", {})["source_hidden"] = True
    meta["cellView"] = "form"
    lines = source(cell).splitlines(keepends=True)
    if lines and TITLE.match(lines[0]):
        lines = lines[1:]
    cell["source"] = [f"# @title {title}\n", *lines]
    return cell


def plot_lines(text: str) -> int:
    return sum(bool(PLOT_LINE.search(line)) for line in text.splitlines() if not line.lstrip().startswith("#"))


def main_line(cells: list[dict]) -> str:
    """The prose a reader follows: Markdown before "Going further", without folded <details> and comments."""
    parts = []
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        text = source(cell)
        heading = GOING_FURTHER.search(text)
        if heading:
            parts.append(text[:heading.start()])
            break
        parts.append(text)
    prose = "\n".join(parts)
    prose = re.sub(r"<details>.*?</details>", " ", prose, flags=re.DOTALL)
    return re.sub(r"<!--.*?-->", " ", prose, flags=re.DOTALL)


def measure(path: Path) -> dict:
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code" and source(c).strip()]
    markdown = [source(c) for c in cells if c["cell_type"] == "markdown"]
    book = [c for c in code if not set(c.get("metadata", {}).get("tags", [])) & BOOK_HIDDEN_TAGS]
    lab = [c for c in code if not c.get("metadata", {}).get("jupyter", {}).get("source_hidden")]
    prose = re.sub(r"<!--.*?-->", " ", "\n".join(markdown), flags=re.DOTALL)
    return {
        "book lines": sum(len(source(c).splitlines()) for c in book),
        "lab lines": sum(len(source(c).splitlines()) for c in lab),
        "prose words": len(re.findall(r"[A-Za-z][\w'-]*", prose)),
        "assert lines": sum(bool(ASSERT_LINE.match(line)) for c in code for line in source(c).splitlines()),
        "dangling": sum(bool(DANGLING.match(line)) for c in code for line in source(c).splitlines()),
        "long plot cells": sum(plot_lines(source(c)) > MAX_PLOT_LINES for c in lab if c in book),
        "half-folded": sum(1 for c in code if (c in book) != (c in lab) and c is not code[0]),
        "main: assert": len(ASSERT_WORD.findall(main_line(cells))),
        "main: package": len(PACKAGE_WORD.findall(main_line(cells))),
    }


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "book").glob("*.ipynb"))
    rows = {p.stem[:24]: measure(p) for p in paths}
    keys = list(next(iter(rows.values())))
    print(f"{'chapter':24}" + "".join(f"{k:>16}" for k in keys))
    for name, row in rows.items():
        print(f"{name:24}" + "".join(f"{row[k]:>16}" for k in keys))
    print(f"{'total':24}" + "".join(f"{sum(r[k] for r in rows.values()):>16}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
