"""The cost card (book/cost_card.md and its Chinese twin): its worked numbers are the cost model's, they agree
with the chapters that compute them, every formula links to the chapter that derives it, and the numbers its
prose quotes are in its table."""

import json
import re
from pathlib import Path

import pytest

from transformer_steps.course import cost_card
from transformer_steps.course.roofline import H100_SXM

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"en": ROOT / "book" / "cost_card.md", "zh": ROOT / "book" / "zh" / "cost_card.md"}
# a number, not the digits of a name such as bf16 or H100
NUMBER = r"(?<![A-Za-z\d.,])\d+(?:,\d{3})*(?:\.\d+)?"
GPT2, LLAMA = cost_card.MODELS.values()


def page_table(text: str, lang: str = "en") -> str:
    """The worked-numbers table: the page's Markdown table that starts with the card's header."""
    start = text.index(cost_card.HEADER[lang])
    return "\n".join(line for line in text[start:].splitlines() if line.startswith("|"))


def formula_rows(text: str) -> list[str]:
    """The rows of the formulas table: the first table on the page, less its header and rule."""
    first = text[text.index("\n|"):].split("\n\n")[0]
    return [line for line in first.splitlines() if line.startswith("|")][2:]


def quoted_numbers(text: str, lang: str) -> list[str]:
    """The numbers of the prose: the page without its tables, comments, mathematics, code and chapter numbers."""
    prose = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    for pattern in (r"<!--.*?-->", r"\$[^$]*\$", r"`[^`]*`", r"\]\([^)]*\)", r"chapter \d+", r"第 \d+ 章"):
        prose = re.sub(pattern, " ", prose, flags=re.DOTALL)
    return re.findall(NUMBER, prose)


def chapter_text(stem: str) -> str:
    """A chapter's Markdown, code and printed outputs, as one text."""
    cells = json.loads((ROOT / "book" / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
    parts = ["".join(c["source"]) for c in cells]
    parts += ["".join(o.get("text", "")) for c in cells for o in c.get("outputs", [])]
    return "\n".join(parts)


@pytest.mark.parametrize("lang", PAGES)
def test_the_card_holds_the_cost_models_numbers(lang):
    assert page_table(PAGES[lang].read_text(encoding="utf-8"), lang) == cost_card.table(lang)


@pytest.mark.parametrize("lang", PAGES)
def test_the_prose_quotes_the_table(lang):
    text = PAGES[lang].read_text(encoding="utf-8")
    in_table = set(re.findall(NUMBER, cost_card.table(lang)))
    # besides the table's numbers: the chip's figures and its ridge (989 / 3.35)
    assert round(H100_SXM.ridge) == 295
    allowed = {"989", "3.35", "295"}
    missing = [n for n in quoted_numbers(text, lang) if n not in allowed | in_table]
    assert missing == [], f"numbers in the prose that the table does not hold: {missing}"


@pytest.mark.parametrize("lang", PAGES)
def test_every_formula_links_to_the_chapter_that_derives_it(lang):
    rows = formula_rows(PAGES[lang].read_text(encoding="utf-8"))
    assert len(rows) == 14
    for row in rows:
        chapters = re.findall(r"\]\((\d\d_\w+\.ipynb)\)", row.split("|")[-2])
        assert chapters, f"a formula without its chapter: {row}"
        assert all((PAGES[lang].parent / c).exists() for c in chapters), row


def test_the_new_rows_are_the_chapters_numbers():
    ch6, ch8 = chapter_text("06_ffn_as_memory"), chapter_text("08_kv_cache")
    gpt2, llama = cost_card.worked_numbers(*GPT2), cost_card.worked_numbers(*LLAMA)
    row = {name: i for i, name in enumerate(cost_card.ROWS["en"])}
    # a decode step's bytes, in chapter 8's decimal MB
    assert f"MFLOP, {gpt2[row['bytes a decode step reads, batch 1']]}, 1.00 FLOP/byte" in ch8
    # exercise 2's limit, GPT-2 small at its full context; the prefill's intensity, without activations
    assert f"F / C \\approx {gpt2[row['decode intensity as the batch grows, $F / C$']].split()[0]}" in ch8
    prefill = gpt2[row["prefill intensity of the context (weights and cache, no activations)"]]
    assert f"prefill of 1024 tokens:           193.4 GFLOP, 284.8 MB, {prefill}" in ch8
    # chapter 8's sequences that fit, the Llama shape with and without GQA
    fit = [llama[i] for name, i in row.items() if "fit beside" in name or "per query head" in name]
    assert f"-> {fit[0]} sequences;" in ch8 and f"(MHA) -> {fit[1]}\n" in ch8
    # chapter 6's mixture of experts, full-size experts, top 2 of 8
    stored, active = gpt2[-1].split(" / ")
    assert f"in memory:       {stored} x" in ch6 and f"FLOPs per token: {active} x" in ch6


def test_a_changed_number_is_caught():
    text = PAGES["en"].read_text(encoding="utf-8")
    table = cost_card.table("en")
    assert page_table(text.replace(table, table.replace("0.124 B", "0.125 B"))) != table
    assert cost_card.worked_numbers(*GPT2)[0] == "0.124 B"
    # a number in the prose that the table does not hold, and a formula without its chapter
    assert "73,677" in quoted_numbers(text.replace("to 73,676", "to 73,677"), "en")
    assert "73,677" not in re.findall(NUMBER, table)
    unlinked = text.replace("| [chapter 6](06_ffn_as_memory.ipynb) |", "| chapter 6 |")
    assert not re.findall(r"\]\(\d\d_", formula_rows(unlinked)[-1].split("|")[-2])
