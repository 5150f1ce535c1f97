"""What each chapter costs to run, measured, and said on its first screen in both editions.

Usage: python scripts/chapter_costs.py [--write] [NOTEBOOK ...]   (`make chapter-costs`; default: every chapter;
       --write: restate the recorded figures without measuring)

Runs each chapter top to bottom in a fresh kernel, one after another, and
records its wall time and the kernel's peak resident memory in book/chapter_costs.json. Then it writes the
cell `chapter-cost` (right after the title) of the English and the Chinese notebook from those figures, and
records in the Chinese cell which English it translates. tests/test_chapter_costs.py checks that every chapter
states figures within 2x of the recorded ones. Run it on a quiet machine: a busy one inflates the times.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from translations import ZH, load, save, sha256, stamp_page

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "book" / "chapter_costs.json"
PAGE = "run_it_yourself.md"
START, END = "<!-- chapter-costs:start -->", "<!-- chapter-costs:end -->"
CELL_ID = "chapter-cost"
# run in a child process: its RUSAGE_CHILDREN is then the kernel's own peak memory (the kernel is its child)
RUN_ONE = """
import resource, sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def measure(path: Path) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN_ONE, str(path), str(path.parent)], check=True,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    # ru_maxrss is in KiB on Linux
    return {"seconds": round(seconds, 1), "peak_gb": round(int(done.stdout.split()[-1]) / 2**20, 2)}


def duration(seconds: float) -> tuple[int, str]:
    """About how long: fives of seconds under 20 s, tens under 90 s, else whole minutes."""
    if seconds < 20:
        return max(5, round(seconds / 5) * 5), "seconds"
    if seconds < 90:
        return max(10, round(seconds / 10) * 10), "seconds"
    return round(seconds / 60), "minutes"


def statement(cost: dict, lang: str) -> str:
    n, unit = duration(cost["seconds"])
    gb = f"{max(cost['peak_gb'], 0.1):.1f}"
    constants = f"<!-- constants: 2 {n} {gb} -->"
    if lang == "en":
        return (f"**Running it:** about {n} {unit} top to bottom on the 2-core CPU that built this page (Colab's free "
                f"tier also has 2 cores), with a peak memory of {gb} GB.\n{constants}")
    zh_unit = {"seconds": "秒", "minutes": "分钟"}[unit]
    return (f"**运行成本：** 在构建本页的 2 核 CPU 上，从头到尾运行约 {n} {zh_unit}（Colab 免费版也是 2 核），"
            f"内存峰值 {gb} GB。\n{constants}")


def write_cells(english_path: Path, cost: dict) -> None:
    english = load(english_path)
    text = statement(cost, "en")
    cells = english["cells"]
    cell = next((c for c in cells if c["id"] == CELL_ID), None)
    if cell is None:
        cell = {"cell_type": "markdown", "id": CELL_ID, "metadata": {}, "source": []}
        cells.insert(1, cell)
    cell["source"] = text.splitlines(keepends=True)
    english_path.write_text(json.dumps(english, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    zh_path = ZH / english_path.name
    chinese = load(zh_path)
    zh_cells = chinese["cells"]
    zh_cell = next((c for c in zh_cells if c["id"] == CELL_ID), None)
    if zh_cell is None:
        zh_cell = {"cell_type": "markdown", "id": CELL_ID, "metadata": {}, "source": []}
        zh_cells.insert(1, zh_cell)
    zh_cell["source"] = statement(cost, "zh").splitlines(keepends=True)
    zh_cell["metadata"]["translation"] = {"source_sha256": sha256(text)}
    save(zh_path, chinese)


def table(record: dict, lang: str) -> str:
    """The chapters' costs as a Markdown table, for run_it_yourself.md."""
    head = ("| chapter | time, top to bottom | peak memory |" if lang == "en" else "| 章节 | 从头到尾的运行时间 | 内存峰值 |")
    rows = [head, "| --- | ---: | ---: |"]
    for stem, cost in sorted(record.items()):
        n, unit = duration(cost["seconds"])
        unit = unit if lang == "en" else {"seconds": "秒", "minutes": "分钟"}[unit]
        rows.append(f"| [{stem}]({stem}.ipynb) | {n} {unit} | {max(cost['peak_gb'], 0.1):.1f} GB |")
    return "\n".join(rows)


def write_tables(record: dict) -> None:
    """The table between the markers of run_it_yourself.md, in both editions (the zh page stamped current:
    only its generated table changed)."""
    for lang, path in (("en", ROOT / "book" / PAGE), ("zh", ZH / PAGE)):
        text = path.read_text(encoding="utf-8")
        before, rest = text.split(START)
        after = rest.split(END)[1]
        path.write_text(f"{before}{START}\n{table(record, lang)}\n{END}{after}", encoding="utf-8")
    stamp_page(ZH / PAGE)


def main(argv: list[str]) -> int:
    # --write: only write the statements from the record (after a wording change), measuring nothing
    write_only = "--write" in argv
    paths = [Path(a).resolve() for a in argv if a != "--write"] or sorted((ROOT / "book").glob("[0-9]*.ipynb"))
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    for path in [] if write_only else paths:
        cost = measure(path)
        record[path.stem] = cost
        print(f"{path.stem:28s} {cost['seconds']:7.1f} s  peak {cost['peak_gb']:.2f} GB", flush=True)
        RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    for path in paths:
        write_cells(path, record[path.stem])
    write_tables(record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
