"""The cost card (book/cost_card.md and its Chinese twin): its worked numbers are the cost model's, they agree
with the chapters that compute them, every formula links to the chapter that derives it, and the numbers its
prose quotes are in its tables (the inputs: the models' sizes and the chip's figures; the worked numbers); its
tokens/s formula is the one the module computes, and its glossary links name terms the glossary defines."""

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
def test_the_card_holds_its_inputs(lang):
    """The models' sizes and the H100 figures, as the module's configs give them, before the worked numbers."""
    text = PAGES[lang].read_text(encoding="utf-8")
    assert cost_card.inputs(lang) in text
    assert text.index(cost_card.inputs(lang)) < text.index(cost_card.HEADER[lang])


def test_the_inputs_are_the_configs():
    gpt2, llama = (cost_card.sizes(cfg) for cfg, _ in cost_card.MODELS.values())
    assert gpt2 == ["12", "768", "12", "12", "64", "3,072", "GELU", "50,257", "yes", "2"]
    assert llama == ["32", "4,096", "32", "8", "128", "14,336", "SwiGLU", "128,256", "no", "2"]
    assert "| ridge, peak / bandwidth | 295 FLOP/byte |" in cost_card.inputs("en")


@pytest.mark.parametrize("cfg, context", cost_card.MODELS.values())
def test_the_bound_is_the_cards_formula(cfg, context):
    """tokens/s = B / max(B F / peak, (P b + B C) / bandwidth), from the sizes on the page, is the module's bound;
    F = 2P + 4 L n_h d_h T and C = 2 L n_kv d_h T b, with P from its formula."""
    L, d, n_h, n_kv, d_h, d_ff, V = (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.head_dim,
                                     cfg.ffn_dim, cfg.vocab_size)
    b, T, peak, bandwidth = cost_card.BYTES, context, H100_SXM.peak_flops, H100_SXM.bandwidth
    P = L * (2 * d * n_h * d_h + 2 * d * n_kv * d_h + (3 if cfg.ffn == "swiglu" else 2) * d * d_ff) + d * V
    F, C = 2 * P + 4 * L * n_h * d_h * T, 2 * L * n_kv * d_h * T * b
    row = {name: i for i, name in enumerate(cost_card.ROWS["en"])}
    worked = cost_card.worked_numbers(cfg, context)
    for B, name in ((1, "H100 tokens/s bound, batch 1"),
                    (cost_card.BATCH, f"H100 tokens/s bound, batch {cost_card.BATCH}, all {cost_card.BATCH} sequences")):
        assert f"{B / max(B * F / peak, (P * b + B * C) / bandwidth):,.0f}" == worked[row[name]]
    assert f"{F / 1e9:.3f} GFLOP" == worked[row["decode FLOPs per token, $F$"]]
    assert f"{C / 2**30:.3f} GiB" == worked[row["KV cache of the context, $C$"]]
    # prefill: the blocks at every position, the LM head at the last one, token t attending to t keys
    prefill = 2 * (P - d * V) * T + 2 * d * V + 4 * L * n_h * d_h * T * (T + 1) // 2
    assert f"{prefill / 1e12:.3f} TFLOP" == worked[row["prefill FLOPs of the context"]]


def glossary_anchors(glossary: Path) -> set[str]:
    """The anchors Sphinx gives the glossary's terms: term-, then the term with its spaces and commas as dashes."""
    block = glossary.read_text(encoding="utf-8").split("```{glossary}")[1].split("```")[0]
    terms = [line for line in block.splitlines() if line and not line[0].isspace()]
    return {"term-" + re.sub(r"[^A-Za-z0-9]+", "-", t).strip("-") for t in terms}


@pytest.mark.parametrize("lang", PAGES)
def test_the_card_is_read_after_chapter_8_and_links_the_glossary(lang):
    text = PAGES[lang].read_text(encoding="utf-8")
    assert text.splitlines()[2].startswith({"en": "*Read after chapter 8", "zh": "*读完第 8 章"}[lang])
    anchors = re.findall(r"\]\(glossary\.md#([\w-]+)\)", text)
    assert {"term-KV-cache", "term-Prefill", "term-Decode", "term-Arithmetic-intensity",
            "term-Grouped-query-attention", "term-Mixture-of-experts"} <= set(anchors)
    defined = glossary_anchors(PAGES[lang].parent / "glossary.md")
    assert set(anchors) <= defined, set(anchors) - defined


@pytest.mark.parametrize("lang", PAGES)
def test_the_prose_quotes_the_table(lang):
    text = PAGES[lang].read_text(encoding="utf-8")
    in_table = set(re.findall(NUMBER, cost_card.table(lang) + cost_card.inputs(lang)))
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
