"""The Chinese edition, book/zh/, kept in step with the English one.

A zh notebook is its English notebook with the Markdown and the code comments translated: code cells and their
outputs come from English (nbval's English pass covers them), and each translated cell records the SHA-256 of
the English text it translates, in metadata.translation.source_sha256. A code cell keeps its Chinese comments
while its English is unchanged and its code (comments aside) is the English code token for token; once the
English changes it is copied in English again and listed, to be translated again. A zh Markdown page records
its English page's hash in its last line, an HTML comment. tests/test_translation.py fails on any Markdown
translation older than its English.

    python scripts/translations.py            # `make translations`: copy code and outputs from English into
                                              # every zh notebook, list the stale and untranslated cells
    python scripts/translations.py sync book/03_embeddings.ipynb
                                              # the same for one notebook only (others may be editing theirs)
    python scripts/translations.py status     # list only; writes nothing
    python scripts/translations.py export book/03_embeddings.ipynb [--stale] [--code]  > en.txt
                                              # the English Markdown cells (or only those to redo), as text;
                                              # --code: the code cells whose comments are to translate
    python scripts/translations.py import book/zh/03_embeddings.ipynb zh.txt
                                              # put translated cells in, recording the English they translate
    python scripts/translations.py stamp book/zh/intro.md
                                              # a translated page (or all of a notebook's cells) is now current

The text format of export/import: each cell starts with a line `%%% cell <id>`; its Markdown follows.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
ZH = BOOK / "zh"
PAGES = ["intro.md", "notation.md", "glossary.md", "run_it_yourself.md", "references.md", "cost_card.md"]
HEADER = re.compile(r"^%%% cell (\S+)\s*$", re.MULTILINE)
PAGE_STAMP = re.compile(r"\n*<!-- translation of book/(\S+) sha256=([0-9a-f]{64}) -->\s*\Z")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def english_of(path: Path) -> Path:
    return BOOK / path.name


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def save(path: Path, notebook: dict) -> None:
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


# comments that tools read: they stay exactly as in English
DIRECTIVE = re.compile(r"#\s*(NBVAL_\w+|noqa\b|type:|fmt:)")


def code_tokens(text: str) -> list[tuple[int, str]]:
    """The code's Python tokens without its comments: equal for a cell and its translation."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    # a NEWLINE token's text is "" at the very end of a cell without a final line break
    return [(t.type, "" if t.type == tokenize.NEWLINE else t.string) for t in tokens
            if t.type not in (tokenize.COMMENT, tokenize.NL)]


def directives(text: str) -> list[str]:
    return [m.group(0) for m in DIRECTIVE.finditer(text)]


def comment_lines(text: str) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [t.string for t in tokens if t.type == tokenize.COMMENT]


def same_code(english: str, chinese: str) -> bool:
    """The same program: tokens equal with comments removed, and every tool directive kept."""
    return code_tokens(english) == code_tokens(chinese) and directives(english) == directives(chinese)


def synced(english: dict, chinese: dict | None) -> dict:
    """The zh notebook for this English one: the zh Markdown cells kept by id (an English cell without a
    translation yet is copied in English, with no hash); English code cells and outputs, with the zh cell's
    translated comments where that cell translates today's English code."""
    translated = {c["id"]: c for c in (chinese or {}).get("cells", [])}
    cells = []
    for cell in english["cells"]:
        zh = translated.get(cell["id"])
        new = copy.deepcopy(cell)
        if zh is not None and zh["cell_type"] == cell["cell_type"]:
            record = zh.get("metadata", {}).get("translation")
            current = record is not None and record.get("source_sha256") == sha256(source(cell))
            if cell["cell_type"] == "markdown" or (current and same_code(source(cell), source(zh))):
                new["source"] = zh["source"]
                if record is not None:
                    new["metadata"]["translation"] = record
        cells.append(new)
    notebook = copy.deepcopy(english)
    notebook["cells"] = cells
    notebook["metadata"]["language"] = "zh-CN"
    return notebook


def code_status(english: dict, chinese: dict) -> list[str]:
    """Ids of the zh code cells whose English comments are not translated (yet, or again)."""
    en = {c["id"]: source(c) for c in english["cells"] if c["cell_type"] == "code"}
    return [c["id"] for c in chinese["cells"] if c["cell_type"] == "code" and c["id"] in en
            and comment_lines(en[c["id"]]) and c["id"] != english["cells"][first_code(english)]["id"]
            and c.get("metadata", {}).get("translation", {}).get("source_sha256") != sha256(en[c["id"]])]


def first_code(notebook: dict) -> int:
    """The Colab setup cell, book/_setup_cell.py verbatim in both editions."""
    return next(i for i, c in enumerate(notebook["cells"]) if c["cell_type"] == "code")


def cell_status(english: dict, chinese: dict) -> list[tuple[str, str]]:
    """(cell id, 'stale' | 'untranslated') for every zh Markdown cell that does not translate today's English."""
    en = {c["id"]: source(c) for c in english["cells"] if c["cell_type"] == "markdown"}
    found = []
    for cell in chinese["cells"]:
        if cell["cell_type"] != "markdown" or cell["id"] not in en:
            continue
        recorded = cell.get("metadata", {}).get("translation", {}).get("source_sha256")
        if recorded is None:
            found.append((cell["id"], "untranslated"))
        elif recorded != sha256(en[cell["id"]]):
            found.append((cell["id"], "stale"))
    return found


def page_status(zh_page: Path) -> str | None:
    """None if the zh page translates today's English page, else 'stale' or 'untranslated'."""
    match = PAGE_STAMP.search(zh_page.read_text(encoding="utf-8"))
    if not match:
        return "untranslated"
    return None if match.group(2) == sha256((BOOK / match.group(1)).read_text(encoding="utf-8")) else "stale"


def stamp_page(zh_page: Path) -> None:
    text = PAGE_STAMP.sub("", zh_page.read_text(encoding="utf-8")).rstrip("\n")
    digest = sha256((BOOK / zh_page.name).read_text(encoding="utf-8"))
    zh_page.write_text(f"{text}\n\n<!-- translation of book/{zh_page.name} sha256={digest} -->\n", encoding="utf-8")


def parse_cells(text: str) -> dict[str, str]:
    parts = HEADER.split(text)
    if parts[0].strip():
        raise ValueError("text before the first `%%% cell <id>` line")
    return {cell_id: body.strip("\n") for cell_id, body in zip(parts[1::2], parts[2::2])}


def export(english_path: Path, only_stale: bool, code: bool = False) -> str:
    english = load(english_path)
    wanted = None
    zh_path = ZH / english_path.name
    chinese = synced(english, load(zh_path) if zh_path.exists() else None)
    if code:
        wanted = set(code_status(english, chinese)) if only_stale else {
            c["id"] for i, c in enumerate(english["cells"])
            if c["cell_type"] == "code" and comment_lines(source(c)) and i != first_code(english)}
    elif only_stale and zh_path.exists():
        wanted = {cell_id for cell_id, _ in cell_status(english, chinese)}
    kind = "code" if code else "markdown"
    return "".join(f"%%% cell {c['id']}\n{source(c)}\n\n" for c in english["cells"]
                   if c["cell_type"] == kind and (wanted is None or c["id"] in wanted))


def import_cells(zh_path: Path, text_path: Path) -> list[str]:
    english = load(english_of(zh_path))
    notebook = synced(english, load(zh_path) if zh_path.exists() else None)
    en = {c["id"]: source(c) for c in english["cells"]}
    kinds = {c["id"]: c["cell_type"] for c in english["cells"]}
    cells = parse_cells(text_path.read_text(encoding="utf-8"))
    unknown = sorted(set(cells) - set(en))
    if unknown:
        raise ValueError(f"{text_path}: no English cell with id {unknown} in {english_of(zh_path).name}")
    changed = sorted(i for i in cells if kinds[i] == "code" and not same_code(en[i], cells[i]))
    if changed:
        raise ValueError(f"{text_path}: cells {changed} change the code, not only its comments (or drop a "
                         "NBVAL/noqa directive)")
    for cell in notebook["cells"]:
        if cell["id"] in cells:
            text = cells[cell["id"]]
            if kinds[cell["id"]] == "code":
                # the text format drops a cell's final line breaks: keep the English ones
                english_text = en[cell["id"]]
                text = text.rstrip("\n") + english_text[len(english_text.rstrip("\n")):]
            cell["source"] = text.splitlines(keepends=True)
            cell["metadata"]["translation"] = {"source_sha256": sha256(en[cell["id"]])}
    save(zh_path, notebook)
    return sorted(cells)


def sync_all(names: list[str] | None = None, write: bool = True) -> int:
    """Copy code and outputs from English into the zh notebooks (every one, or those named); print what needs
    translating. write=False only lists, so it is safe while others edit their zh notebooks."""
    ZH.mkdir(exist_ok=True)
    todo = 0
    for english_path in sorted(BOOK.glob("*.ipynb")):
        if names is not None and english_path.name not in names:
            continue
        zh_path = ZH / english_path.name
        english = load(english_path)
        notebook = synced(english, load(zh_path) if zh_path.exists() else None)
        if write:
            save(zh_path, notebook)
        for cell_id, state in cell_status(english, notebook):
            print(f"{zh_path.relative_to(ROOT)}: cell {cell_id} {state}")
            todo += 1
        code = code_status(english, notebook)
        if code:
            print(f"{zh_path.relative_to(ROOT)}: {len(code)} code cells with English comments (export --code)")
    for page in PAGES if names is None else []:
        zh_page = ZH / page
        state = page_status(zh_page) if zh_page.exists() else "missing"
        if state:
            print(f"{zh_page.relative_to(ROOT)}: {state}")
            todo += 1
    print(f"{todo} translations to write or update" if todo else "every translation is current")
    return todo


def main(argv: list[str]) -> int:
    if not argv:
        sync_all()
        return 0
    command, *args = argv
    if command in ("sync", "status"):
        sync_all([Path(a).name for a in args] or None, write=command == "sync")
    elif command == "export":
        sys.stdout.write(export(Path(args[0]), "--stale" in args, "--code" in args))
    elif command == "import":
        done = import_cells(Path(args[0]), Path(args[1]))
        print(f"{args[0]}: {len(done)} cells translated")
    elif command == "stamp":
        path = Path(args[0])
        if path.suffix == ".md":
            stamp_page(path)
        else:
            english = load(english_of(path))
            notebook = synced(english, load(path))
            en = {c["id"]: source(c) for c in english["cells"] if c["cell_type"] == "markdown"}
            for cell in notebook["cells"]:
                if cell["cell_type"] == "markdown" and (len(args) == 1 or cell["id"] in args[1:]):
                    cell["metadata"]["translation"] = {"source_sha256": sha256(en[cell["id"]])}
            save(path, notebook)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
