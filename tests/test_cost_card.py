"""The cost card (book/cost_card.md and its Chinese twin): its worked numbers are the cost model's, and the
numbers its prose quotes are in its table."""

import re
from pathlib import Path

import pytest

from transformer_steps.course import cost_card
from transformer_steps.course.roofline import H100_SXM

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"en": ROOT / "book" / "cost_card.md", "zh": ROOT / "book" / "zh" / "cost_card.md"}


def page_table(text: str, lang: str = "en") -> str:
    """The worked-numbers table: the page's Markdown table that starts with the card's header."""
    start = text.index(cost_card.HEADER[lang])
    return "\n".join(line for line in text[start:].splitlines() if line.startswith("|"))


@pytest.mark.parametrize("lang", PAGES)
def test_the_card_holds_the_cost_models_numbers(lang):
    assert page_table(PAGES[lang].read_text(encoding="utf-8"), lang) == cost_card.table(lang)


@pytest.mark.parametrize("lang", PAGES)
def test_the_prose_quotes_the_table(lang):
    text = PAGES[lang].read_text(encoding="utf-8")
    table = cost_card.table(lang)
    prose = text[text.index(table) + len(table):]
    quoted = re.findall(r"\d[\d,]*\.?\d*", re.sub(r"<!--.*?-->", "", prose, flags=re.DOTALL))
    # besides the table's numbers: the batch, the chip's figures and its ridge (989 / 3.35)
    assert round(H100_SXM.ridge) == 295
    allowed = {str(cost_card.BATCH), "989", "3.35", "295", "1"}
    missing = [n for n in quoted if n not in allowed and n not in table]
    assert missing == [], f"numbers in the prose that the table does not hold: {missing}"


def test_a_changed_number_is_caught():
    text = PAGES["en"].read_text(encoding="utf-8")
    table = cost_card.table("en")
    assert page_table(text.replace(table, table.replace("0.124 B", "0.125 B"))) != table
    assert cost_card.worked_numbers(*cost_card.MODELS["GPT-2 small, 1,024 tokens"])[0] == "0.124 B"
