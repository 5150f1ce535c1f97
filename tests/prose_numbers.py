"""The numbers a chapter's prose quotes must come out of its code: each number in a Markdown cell must appear,
at the precision the prose gives it, among the text outputs of the code cells above it. A folded solution
(<details>) may instead have its numbers asserted in the notebook's code, e.g. in a cell right after it that
the book hides, so that the answer is checked without being printed, or written, above the solution.

Not checked: numbers inside $math$, `code`, links to sources (a citation's year), headings' section numbers,
small integers (0 to 12: counts, dimensions, exercise numbers), and the constants a cell declares in an HTML
comment, which Jupyter, Colab and the book all hide, e.g. `<!-- constants: 1,024 50,257 -->` (a cited fact or
a setting the prose explains, not a result)."""

from __future__ import annotations

import ast
import re

SMALL_INTEGERS = range(13)
# a number glued to a letter (39.5B, 8x) is no number, nor is the 39 of it
NUMBER = re.compile(r"(?<![\w.\-−])[-−]?\d[\d,]*(?:\.\d+)?(?:[eE][-+−]?\d+)?(?![\w]|\.\d)")
CONSTANTS = re.compile(r"<!--\s*constants:(.*?)-->", re.DOTALL)


def _strip(markdown: str) -> str:
    text = CONSTANTS.sub(" ", markdown)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)  # code blocks
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.DOTALL)  # display math
    text = re.sub(r"(?<!\\)\$.*?(?<!\\)\$", " ", text, flags=re.DOTALL)  # inline math
    text = re.sub(r"`[^`]*`", " ", text)  # code spans
    text = re.sub(r"\[[^\]]*\]\(https?://[^)]*\)", " ", text)  # links to sources (author, year)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # other link targets (glossary.md#...)
    text = re.sub(r"^#+\s*[\d.]*", "", text, flags=re.MULTILINE)  # a heading's section number
    text = re.sub(r"<[^>]+>", " ", text)  # HTML tags (<details>, <summary>)
    return text


def declared_constants(markdown: str) -> set[str]:
    return {token.strip().replace(",", "") for block in CONSTANTS.findall(markdown) for token in block.split()}


def prose_numbers(markdown: str) -> list[str]:
    """The numbers the prose of one Markdown cell quotes, as written (thousands separators removed)."""
    found = []
    for match in NUMBER.finditer(_strip(markdown)):
        text = match.group(0).replace("−", "-").replace(",", "").rstrip(",")
        if not text or text in declared_constants(markdown):
            continue
        if re.fullmatch(r"-?\d+", text) and int(text) in SMALL_INTEGERS:
            continue
        found.append(text)
    return found


def output_numbers(text: str) -> list[float]:
    return [float(m.group(0).replace("−", "-").replace(",", "")) for m in NUMBER.finditer(text)
            if m.group(0).replace(",", "").strip("-−")]


def shown_at(number: str, outputs: list[float]) -> bool:
    """Whether an output, rounded as the prose writes the number, gives that number."""
    value = float(number)
    if "e" in number.lower():
        mantissa = number.lower().split("e")[0]
        digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
        return any(o != 0 and f"{o:.{digits}e}" == f"{value:.{digits}e}" for o in outputs)
    decimals = len(number.split(".")[1]) if "." in number else 0
    return any(round(o, decimals) == round(value, decimals) for o in outputs)


def cell_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out["text"]))
        elif out.get("output_type") in ("execute_result", "display_data"):
            plain = out.get("data", {}).get("text/plain")
            if plain and not "".join(plain).startswith("<Figure"):
                parts.append("".join(plain))
    return "\n".join(parts)


def asserted_numbers(source: str) -> list[float]:
    """Numbers written in the assert statements of a code cell (each statement whole, however it is wrapped)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [n for node in ast.walk(tree) if isinstance(node, ast.Assert)
            for n in output_numbers(ast.get_source_segment(source, node) or "")]


def unbacked_numbers(notebook: dict) -> list[str]:
    """'cell N: number' for every prose number no output above it shows (nor, in a solution, an assert)."""
    asserted = [n for cell in notebook["cells"] if cell["cell_type"] == "code"
                for n in asserted_numbers("".join(cell["source"]))]
    problems, outputs = [], []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            outputs += output_numbers(cell_text(cell))
        elif cell["cell_type"] == "markdown":
            markdown = "".join(cell["source"])
            solutions = " ".join(re.findall(r"<details>.*?</details>", markdown, flags=re.DOTALL))
            rest = re.sub(r"<details>.*?</details>", " ", markdown, flags=re.DOTALL)
            for text, backing in ((rest, outputs), (solutions, outputs + asserted)):
                for number in prose_numbers(text):
                    if number not in declared_constants(markdown) and not shown_at(number, backing):
                        problems.append(f"cell {index}: {number}")
    return problems
