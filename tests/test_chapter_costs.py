"""Every chapter says on its first screen, in both editions, about how long it runs and its peak memory, and
the figures are within 2x of those scripts/chapter_costs.py recorded (book/chapter_costs.json)."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from chapter_costs import CELL_ID, END, PAGE, RECORD, START, table

CHAPTERS = sorted((ROOT / "book").glob("[0-9]*.ipynb"))
STATED = {"en": re.compile(r"about (\d+) (seconds|minutes) top to bottom .*? peak memory of ([\d.]+) GB",
                           re.DOTALL),
          "zh": re.compile(r"运行约 (\d+) (秒|分钟).*?内存峰值 ([\d.]+) GB", re.DOTALL)}
SECONDS = {"seconds": 1, "minutes": 60, "秒": 1, "分钟": 60}


def stated(path: Path, lang: str) -> tuple[float, float]:
    """(seconds, GB) as the chapter's cost cell states them; the cell must be on the first screen."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert cells[1]["id"] == CELL_ID, f"{path.name}: the cost cell is not right after the title"
    match = STATED[lang].search("".join(cells[1]["source"]))
    assert match, f"{path.name}: the cost cell does not state the time and the peak memory"
    return int(match[1]) * SECONDS[match[2]], float(match[3])


def within_twice(said: float, measured: float) -> bool:
    return measured / 2 <= said <= measured * 2


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_chapter_states_its_cost(path, lang):
    recorded = json.loads(RECORD.read_text())[path.stem]
    seconds, gb = stated(path if lang == "en" else ROOT / "book" / "zh" / path.name, lang)
    assert within_twice(seconds, recorded["seconds"]), (seconds, recorded)
    assert within_twice(gb, max(recorded["peak_gb"], 0.1)), (gb, recorded)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_run_it_yourself_has_the_table(lang):
    page = ROOT / "book" / (PAGE if lang == "en" else f"zh/{PAGE}")
    text = page.read_text(encoding="utf-8")
    record = json.loads(RECORD.read_text())
    assert set(record) == {p.stem for p in CHAPTERS}
    assert text.split(START)[1].split(END)[0].strip() == table(record, lang)


def test_a_wrong_figure_is_caught():
    assert within_twice(60, 40) and not within_twice(60, 25) and not within_twice(60, 130)
