"""The Chinese edition (book/zh/) against the English one: the same code and outputs, every Markdown cell a
translation of today's English text, the same numbers, formulas and links, solutions folded as 答案, and one
Chinese name per term. `make translations` copies code and outputs over and lists what to (re)translate."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
from prose_numbers import _strip, prose_numbers, unbacked_numbers
from test_reader_modes import myst_only_syntax

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("translations", ROOT / "scripts" / "translations.py")
translations = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(translations)

NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
CJK = re.compile(r"[\u4e00-\u9fff]")
MIN_HAN_PER_WORD = 0.9

# One name per term, as the glossary gives it and the source articles write it: (the term in an English
# cell, the name its zh cell must use, names no zh text may use). The source articles keep token, causal mask,
# prefill, decode, KV cache, LayerNorm, FFN, softmax and weight tying in Latin letters.
TERMS = [
    (r"\btokens?\b", "token", ["词元", "令牌"]),
    (r"\bcausal mask", "causal mask", ["因果掩码", "因果遮罩", "因果掩膜"]),
    (r"\bprefill", "prefill", ["预填充"]),
    (None, "decode", ["解码(?!器)"]),
    (r"\bKV cache", "KV cache", ["KV 缓存", "KV缓存", "键值缓存"]),
    (r"\bLayerNorm\b|\blayer normali[sz]ation", "LayerNorm", ["层归一化", "层标准化"]),
    (r"\bFFN\b|\bfeed-forward", "FFN", ["前馈网络", "前馈层"]),
    (r"\bsoftmax", "softmax", ["归一化指数函数", "软最大"]),
    (r"\bweight tying", "weight tying", ["权重绑定", "权重共享", "绑定权重"]),
    (r"\battention\b", "注意力", ["关注机制"]),
    (r"\bresidual connections?\b", "残差连接", ["残差链接", "跳跃连接", "捷径连接"]),
    (r"\bpositional encodings?\b|\bposition encodings?\b", "位置编码", ["位置嵌入"]),
    (None, "FlashAttention", ["闪存注意力"]),
    # issue 32: the seeds' readers' names; one name per concept
    (None, "query/key/value", ["查询", "键向量", "值向量", "键/值", "键和值"]),
    (r"\bprompts?\b", "prompt", ["提示词", "提示文本", "提示语"]),
    (None, "显存", ["GPU 内存", "GPU内存", "显卡内存"]),
    (None, "访存量", ["内存流量"]),
    (None, "Roofline 模型", ["屋顶线"]),
    (None, "采样策略", ["decode 规则", "解码规则"]),
    (None, "配套库 or transformer_steps", ["代码包", "程序包"]),
    (None, "mask", ["掩码", "遮罩", "掩膜"]),
    (None, "分数 (a score) or 损失 (a loss)", ["得分", "打分"]),
    (None, "forward hook", ["前向钩子", "前向 hook"]),
    (None, "单元格", ["代码单元"]),
    (None, "排名", ["名次"]),
    (None, "增益", ["缩放参数"]),
    (None, "转换为", ["上转"]),
    (None, "输出头 (un-embedding, LM head)", ["反嵌入", "解嵌入"]),
    (None, "“”", ["「", "」"]),
    (None, "a result, not 断言", ["断言"]),
]


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def zh_path(path: Path) -> Path:
    return ROOT / "book" / "zh" / path.name


def markdown_pairs(english: dict, chinese: dict) -> list[tuple[str, str, str]]:
    """(cell id, English text, zh text) for each Markdown cell."""
    zh = {c["id"]: translations.source(c) for c in chinese["cells"] if c["cell_type"] == "markdown"}
    return [(c["id"], translations.source(c), zh.get(c["id"], "")) for c in english["cells"]
            if c["cell_type"] == "markdown"]


# --- the same notebook, with its prose translated ---------------------------------------------------------------

def differences_in_code(english: dict, chinese: dict) -> list[str]:
    """What differs other than the Markdown cells' text and their translation record."""
    problems = []
    en_ids = [(c["id"], c["cell_type"]) for c in english["cells"]]
    zh_ids = [(c["id"], c["cell_type"]) for c in chinese["cells"]]
    if en_ids != zh_ids:
        return [f"cells differ: English {en_ids}, zh {zh_ids}"]
    for en, zh in zip(english["cells"], chinese["cells"]):
        if en["cell_type"] == "markdown":
            meta = {k: v for k, v in zh.get("metadata", {}).items() if k != "translation"}
            if meta != en.get("metadata", {}):
                problems.append(f"cell {en['id']}: metadata {meta} instead of {en.get('metadata')}")
            continue
        plain = {**zh, "source": en["source"], "metadata": {k: v for k, v in zh.get("metadata", {}).items()
                                                            if k != "translation"}}
        if plain != en:
            problems.append(f"cell {en['id']}: code, outputs or metadata differ from the English cell")
        elif not translations.same_code(translations.source(en), translations.source(zh)):
            problems.append(f"cell {en['id']}: its code (comments aside) differs from the English cell")
    return problems


def test_every_page_and_chapter_has_a_translation():
    zh = ROOT / "book" / "zh"
    assert sorted(p.name for p in zh.glob("*.ipynb")) == [p.name for p in NOTEBOOKS]
    assert sorted(p.name for p in zh.glob("*.md")) == sorted(translations.PAGES)


def test_the_chinese_toc_lists_the_same_pages():
    import yaml
    from test_notebook_hygiene import toc_files

    english = toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    chinese = toc_files(yaml.safe_load((ROOT / "_toc_zh.yml").read_text(encoding="utf-8")))
    assert chinese == [entry.removeprefix("book/") for entry in english]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_small_enough(path):
    assert zh_path(path).stat().st_size <= 2_000_000


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_and_outputs_are_the_english_ones(path):
    problems = differences_in_code(load(path), load(zh_path(path)))
    assert not problems, "run `make translations` to copy code and outputs from English:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_translates_todays_english(path):
    status = translations.cell_status(load(path), load(zh_path(path)))
    assert not status, (f"book/zh/{path.name}: Markdown cells whose English changed since they were translated, "
                        "or never translated; `make translations` lists them, `python scripts/translations.py "
                        f"export {path.relative_to(ROOT)} --stale` prints their English: {status}")


@pytest.mark.parametrize("page", translations.PAGES)
def test_every_page_translates_todays_english(page):
    state = translations.page_status(ROOT / "book" / "zh" / page)
    assert state is None, (f"book/zh/{page} is {state}: translate the English page's change, then "
                           f"`python scripts/translations.py stamp book/zh/{page}`")


def test_a_changed_english_cell_or_page_is_reported(tmp_path, monkeypatch):
    path = NOTEBOOKS[0]
    english, chinese = load(path), load(zh_path(path))
    assert translations.cell_status(english, chinese) == []
    cell = next(c for c in english["cells"] if c["cell_type"] == "markdown")
    cell["source"] = translations.source(cell) + " One more sentence."
    assert translations.cell_status(english, chinese) == [(cell["id"], "stale")]
    # a page: a copy of the English book with one word changed
    book = tmp_path / "book"
    shutil.copytree(ROOT / "book", book, ignore=shutil.ignore_patterns("*.ipynb"))
    monkeypatch.setattr(translations, "BOOK", book)
    assert translations.page_status(book / "zh" / "intro.md") is None
    (book / "intro.md").write_text((book / "intro.md").read_text(encoding="utf-8") + "\nNew.\n", encoding="utf-8")
    assert translations.page_status(book / "zh" / "intro.md") == "stale"


def test_code_copied_from_english_is_checked():
    path = NOTEBOOKS[0]
    english, chinese = load(path), load(zh_path(path))
    mutated = copy.deepcopy(chinese)
    code = next(c for c in mutated["cells"] if c["cell_type"] == "code" and c.get("outputs"))
    code["outputs"] = []
    assert differences_in_code(english, chinese) == []
    expected = f"cell {code['id']}: code, outputs or metadata differ from the English cell"
    assert differences_in_code(english, mutated) == [expected]
    # translated comments are allowed; a changed token or a dropped nbval directive is not
    path = next(p for p in NOTEBOOKS if "08_" in p.name)
    english, mutated = load(path), load(zh_path(path))
    code = next(c for c in mutated["cells"] if c["cell_type"] == "code" and "# NBVAL_IGNORE_OUTPUT" in
                translations.source(c) and "\n# " in translations.source(c))
    text = translations.source(code)
    code["source"] = re.sub(r"\n# (?!NBVAL).*", "\n# 中文注释", text, count=1)
    assert code["source"] != text and differences_in_code(english, mutated) == []
    for wrong in (text.replace("# NBVAL_IGNORE_OUTPUT", "# 忽略输出"), text.replace("(", "( 1 +", 1)):
        code["source"] = wrong
        assert differences_in_code(english, mutated) == [
            f"cell {code['id']}: its code (comments aside) differs from the English cell"]


MIN_CHINESE_COMMENTS = 0.8


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_comments_are_chinese(path):
    """A Chinese reader meets Chinese comments: at least 80% of a zh notebook's comment lines (the Colab setup
    cell, a verbatim copy of book/_setup_cell.py, aside) hold Han characters; the rest are directives such as
    NBVAL_IGNORE_OUTPUT and noqa, or shapes. `python scripts/translations.py export NB --code --stale` lists
    the cells to translate."""
    chinese = load(zh_path(path))
    cells = chinese["cells"][translations.first_code(chinese) + 1:]
    lines = [line for c in cells if c["cell_type"] == "code" for line in translations.comment_lines(
        translations.source(c))]
    share = sum(bool(CJK.search(line)) for line in lines) / len(lines)
    assert share >= MIN_CHINESE_COMMENTS, f"book/zh/{path.name}: {share:.0%} of its comment lines are Chinese"


def test_translated_comments_are_kept_until_the_english_code_changes():
    path = next(p for p in NOTEBOOKS if "08_" in p.name)
    english, chinese = load(path), load(zh_path(path))
    cells = english["cells"][translations.first_code(english) + 1:]
    cell = next(c for c in cells if c["cell_type"] == "code" and "\n# " in translations.source(c))
    text = translations.source(cell)
    zh = next(c for c in chinese["cells"] if c["id"] == cell["id"])
    zh["source"] = re.sub(r"\n# .*", "\n# 中文注释", text, count=1)
    zh["metadata"]["translation"] = {"source_sha256": translations.sha256(text)}
    kept = next(c for c in translations.synced(english, chinese)["cells"] if c["id"] == cell["id"])
    assert kept["source"] == zh["source"] and cell["id"] not in translations.code_status(english, chinese)
    # the text format of export/import drops a cell's final line breaks: still the same code
    assert translations.same_code(text + "\n\n", text.rstrip("\n"))
    # the English code changes: the English comes back, and the cell is listed for translation
    cell["source"] = text + "\n"
    back = next(c for c in translations.synced(english, chinese)["cells"] if c["id"] == cell["id"])
    assert back["source"] == cell["source"] and cell["id"] in translations.code_status(english, chinese)


# --- the same truths -----------------------------------------------------------------------------------------

def spaced(markdown: str) -> str:
    """A number glued to a Han character is still a number: "有3个" reads as "有 3 个"."""
    return CJK.sub(lambda m: f" {m.group(0)} ", markdown)


def numbers(markdown: str) -> set[str]:
    # and glued to millions or billions: Chinese texts write 124.4M where English says 124.4 million
    return set(prose_numbers(re.sub(r"(?<=\d)(?=[KMB](?![A-Za-z]))", " ", spaced(markdown))))


def formulas_and_links(markdown: str) -> dict[str, set[str]]:
    no_code = re.sub(r"```.*?```", " ", markdown, flags=re.DOTALL)
    display = re.findall(r"\$\$.*?\$\$", no_code, flags=re.DOTALL)
    inline = re.findall(r"(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$", re.sub(r"\$\$.*?\$\$", " ", no_code, flags=re.DOTALL),
                        flags=re.DOTALL)
    # words inside \text{...} are prose, translated with the rest; the mathematics around them is not
    def math(formula: str) -> str:
        return " ".join(re.sub(r"\\text\{[^{}]*\}", r"\\text{}", formula).split())

    return {"display math": {math(d) for d in display},
            "inline math": {math(i) for i in inline},
            "link targets": set(re.findall(r"\]\(([^)\s]+)\)", no_code)),
            "code spans": set(re.findall(r"`[^`\n]+`", no_code))}


def cell_problems(cell_id: str, en: str, zh: str) -> list[str]:
    problems = []
    extra = numbers(zh) - numbers(en)
    if extra:
        problems.append(f"cell {cell_id}: numbers the English cell does not quote: {sorted(extra)}")
    missing = numbers(en) - numbers(zh)
    if missing:
        problems.append(f"cell {cell_id}: numbers of the English cell left out: {sorted(missing)}")
    en_parts, zh_parts = formulas_and_links(en), formulas_and_links(zh)
    for kind in en_parts:
        if en_parts[kind] != zh_parts[kind]:
            problems.append(f"cell {cell_id}: {kind} differ: English only {sorted(en_parts[kind] - zh_parts[kind])}"
                            f", zh only {sorted(zh_parts[kind] - en_parts[kind])}")
    en_words = len(re.findall(r"[A-Za-z]{2,}", _strip(en)))
    if en_words >= 3 and not CJK.search(zh):
        problems.append(f"cell {cell_id}: not translated")
    # a sentence left out shows in the length: the chapters' cells of 20 or more English words have 1.2 to 2.0
    # Han characters per English word
    han, words = len(CJK.findall(_strip(zh))), len(re.findall(r"[A-Za-z']+", _strip(en)))
    if words >= 20 and han < MIN_HAN_PER_WORD * words:
        problems.append(f"cell {cell_id}: {han} Han characters for {words} English words: is a sentence missing?")
    if en.count("<details>") != zh.count("<details>"):
        problems.append(f"cell {cell_id}: {en.count('<details>')} folded parts in English, {zh.count('<details>')} in zh")
    if re.search(r"<details[^>]*\bopen\b", zh):
        problems.append(f"cell {cell_id}: an open <details>")
    for en_summary, zh_summary in zip(re.findall(r"<summary>(.*?)</summary>", en),
                                      re.findall(r"<summary>(.*?)</summary>", zh)):
        if (en_summary == "Solution") != (zh_summary == "答案"):
            problems.append(f"cell {cell_id}: a solution folds as <summary>答案</summary>, not {zh_summary!r}")
    outside = re.sub(r"<details>.*?</details>", "", zh, flags=re.DOTALL)
    if re.search(r"\*\*答案|答案\s*[:：]|^\s*答案", outside, flags=re.MULTILINE) or "Solution" in zh:
        problems.append(f"cell {cell_id}: a solution outside <details>")
    en_heads = re.findall(r"^(#+) ", en, flags=re.MULTILINE)
    zh_heads = re.findall(r"^(#+) ", zh, flags=re.MULTILINE)
    if en_heads != zh_heads:
        problems.append(f"cell {cell_id}: headings {en_heads} in English, {zh_heads} in zh")
    return problems


def term_problems(where: str, en: str, zh: str) -> list[str]:
    problems = []
    en_prose, zh_prose = _strip(en), _strip(zh)
    for english, name, forbidden in TERMS:
        for other in forbidden:
            if re.search(other, zh_prose):
                problems.append(f"{where}: {other!r} instead of {name!r}")
        if english and re.search(english, en_prose, flags=re.IGNORECASE) and name.lower() not in zh_prose.lower():
            problems.append(f"{where}: the English says {re.search(english, en_prose, re.IGNORECASE).group(0)!r}, "
                            f"the zh text never {name!r}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_numbers_formulas_links_and_solutions_are_the_english_ones(path):
    chinese = load(zh_path(path))
    problems = [p for cell_id, en, zh in markdown_pairs(load(path), chinese) for p in cell_problems(cell_id, en, zh)]
    assert not problems, "\n".join(problems)
    # and, as for English, every number the zh prose quotes is printed above it
    readable = copy.deepcopy(chinese)
    for cell in readable["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = spaced(translations.source(cell))
    assert unbacked_numbers(readable) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_chinese_name_per_term(path):
    problems = [p for cell_id, en, zh in markdown_pairs(load(path), load(zh_path(path)))
                for p in term_problems(f"cell {cell_id}", en, zh)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", translations.PAGES)
def test_pages_keep_formulas_links_and_terms(page):
    en = (ROOT / "book" / page).read_text(encoding="utf-8")
    zh = (ROOT / "book" / "zh" / page).read_text(encoding="utf-8")
    problems = term_problems(page, en, zh) if page != "glossary.md" else []
    en_parts, zh_parts = formulas_and_links(en), formulas_and_links(zh)
    problems += [f"{page}: {kind} differ: English only {sorted(en_parts[kind] - zh_parts[kind])}, zh only "
                 f"{sorted(zh_parts[kind] - en_parts[kind])}" for kind in ("display math", "inline math")
                 if en_parts[kind] != zh_parts[kind]]
    han, words = len(CJK.findall(_strip(zh))), len(re.findall(r"[A-Za-z']+", _strip(en)))
    if words >= 20 and han < MIN_HAN_PER_WORD * words:
        problems.append(f"{page}: {han} Han characters for {words} English words: is a sentence missing?")
    # forbidden names hold in the glossary too
    if page == "glossary.md":
        problems += [f"{page}: {other!r} instead of {name!r}" for _, name, forbidden in TERMS for other in forbidden
                     if re.search(other, _strip(zh))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_zh_markdown_is_the_subset_every_renderer_reads(path):
    found = {c["id"]: f for c in load(zh_path(path))["cells"]
             if c["cell_type"] == "markdown" and (f := myst_only_syntax(translations.source(c)))}
    assert not found, f"MyST-only syntax, raw in Colab and JupyterLab: {found}"


def test_the_zh_checks_fail_on_a_mutated_translation():
    pairs = [pair for path in NOTEBOOKS for pair in markdown_pairs(load(path), load(zh_path(path)))]
    cell_id, en, zh = next((i, e, z) for i, e, z in pairs if any("." in n for n in numbers(z)) and "$$" in z)
    assert cell_problems(cell_id, en, zh) == [] and term_problems("x", en, zh) == []
    number = next(n for n in sorted(numbers(zh)) if "." in n)
    wrong = zh.replace(number, f"{float(number) + 0.5:.{len(number.split('.')[1])}f}", 1)
    assert any("numbers the English cell does not quote" in p for p in cell_problems(cell_id, en, wrong))
    dropped = re.sub(r"\$\$.*?\$\$", "", zh, count=1, flags=re.DOTALL)
    assert any("display math differ" in p for p in cell_problems(cell_id, en, dropped))
    assert any("'词元'" in p for p in term_problems("x", "A token.", "一个词元。"))
    assert any("never 'token'" in p for p in term_problems("x", "A token.", "一个符号。"))
    assert any("not translated" in p for p in cell_problems("x", "The weights sum to one.", "The weights sum to one."))
    long_id, long_en, long_zh = max(pairs, key=lambda pair: len(pair[2]))
    paragraphs = long_zh.split("\n\n")
    assert not any("is a sentence missing" in p for p in cell_problems(long_id, long_en, long_zh))
    halved = "\n\n".join(paragraphs[: len(paragraphs) // 2])
    assert any("is a sentence missing" in p for p in cell_problems(long_id, long_en, halved))
    assert any("答案" in p for p in cell_problems("x", "<details><summary>Solution</summary>\n\nx\n\n</details>",
                                                "<details><summary>Solution</summary>\n\nx\n\n</details>"))
    assert numbers("有3个头，每个宽 2.5") == {"2.5"} and numbers("共有50,257个token") == {"50257"}
    assert numbers("124.4M 个参数，39.5B 次乘加") == {"124.4", "39.5"}
