"""How much room each timing assertion of a chapter has, over repeated runs (issue 30: no check fails at random).

Usage: python scripts/timing_margins.py NOTEBOOK RUNS 'name=expression' ...

Runs NOTEBOOK top to bottom RUNS times in a fresh kernel, each time evaluating the expressions in its namespace
after the last cell, and prints each one's values and their worst. An expression is written as the margin of
one assertion: measured / limit, so that it must stay above 1 (for `assert a > 3 * b`: `a / (3 * b)`).
Run it with the other core busy (for example a second copy of this script, or the test suite).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def margins(path: Path, expressions: dict[str, str]) -> dict[str, float]:
    nb = nbformat.read(path, as_version=4)
    probe = "import json\nprint(json.dumps({" + ", ".join(f"{k!r}: float({v})" for k, v in expressions.items())
    nb.cells.append(nbformat.v4.new_code_cell(probe + "}))"))
    NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
                   ).execute()
    return json.loads(nb.cells[-1].outputs[0]["text"])


def main(argv: list[str]) -> int:
    path, runs = Path(argv[0]), int(argv[1])
    expressions = dict(arg.split("=", 1) for arg in argv[2:])
    seen: dict[str, list[float]] = {name: [] for name in expressions}
    for run in range(runs):
        for name, value in margins(path, expressions).items():
            seen[name].append(value)
        print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in seen.items()), flush=True)
    for name, values in seen.items():
        print(f"{path.stem} {name}: worst margin {min(values):.2f} over {runs} runs "
              f"(median {sorted(values)[len(values) // 2]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
