"""Re-execute chapter notebooks in place, each top to bottom in a fresh kernel, so stored outputs match the code.

Usage: python scripts/refresh_notebooks.py [NOTEBOOK ...]     (default: every book/*.ipynb)
Exits non-zero if any notebook raises; a failing notebook is left unchanged on disk.
"""

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]


def refresh(path: Path, timeout: int) -> None:
    notebook = nbformat.read(path, as_version=4)
    # The kernel runs in the notebook's folder (book/), as nbval and Jupyter do. No timing metadata: clean diffs.
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    nbformat.write(notebook, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to refresh (default: book/*.ipynb)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "book").glob("*.ipynb"))
    if not notebooks:
        print("no notebooks to refresh")
        return 0
    failed = []
    for path in notebooks:
        if path.suffix != ".ipynb" or not path.is_file():
            parser.error(f"{path} is not a notebook file (.ipynb)")
        start = time.perf_counter()
        try:
            refresh(path, args.timeout)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as error:
            failed.append(path)
            print(f"FAILED {path} after {time.perf_counter() - start:.1f} s (left unchanged):\n{error}", flush=True)
            continue
        print(f"{time.perf_counter() - start:7.1f} s  {path}", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
