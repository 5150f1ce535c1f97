"""Compare a freshly executed notebook with its stored outputs the way strict nbval does: streams and every
mimetype but PNG and JPEG images, after the sanitizers of
.ci/nbval_sanitize.cfg (parsed by nbval itself), skipping cells marked NBVAL_IGNORE_OUTPUT."""

from __future__ import annotations

import copy
import difflib
import json
import re
from pathlib import Path

from nbval.plugin import coalesce_streams, get_sanitize_patterns

ROOT = Path(__file__).resolve().parents[1]
SANITIZE_CFG = ROOT / ".ci" / "nbval_sanitize.cfg"
NOT_COMPARED = ("image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json")  # as nbval


def sanitizers(path: Path = SANITIZE_CFG) -> list[tuple[re.Pattern, str]]:
    return [(re.compile(regex), replace) for regex, replace in get_sanitize_patterns(path.read_text())]


def comparable(outputs: list, rules) -> dict[str, str]:
    """{stream name or mimetype: text} for one cell, sanitized."""
    found: dict[str, str] = {}
    for out in coalesce_streams(copy.deepcopy(outputs)):  # merges streams, applies \r and \b as nbval does
        if out["output_type"] == "stream":
            found[out["name"]] = out["text"]
        elif out["output_type"] in ("display_data", "execute_result"):
            for mime, value in out.get("data", {}).items():
                if mime not in NOT_COMPARED:
                    if isinstance(value, dict):  # JSON data (plotly's figure): nbformat stores its keys sorted
                        value = json.dumps(value, sort_keys=True)
                    found[mime] = found.get(mime, "") + ("".join(value) if isinstance(value, list) else str(value))
        elif out["output_type"] == "error":
            found["error"] = f"{out['ename']}: {out['evalue']}"
    for key, text in found.items():
        for pattern, replacement in rules:
            text = pattern.sub(replacement, text)
        found[key] = text
    return found


def ignores_output(cell) -> bool:
    """nbval's rule: a comment line `# NBVAL_IGNORE_OUTPUT` anywhere in the cell (a folded cell's comes after its
    `# @title` line)."""
    return any(line.strip().startswith("#") and line.strip().lstrip("#").strip() == "NBVAL_IGNORE_OUTPUT"
               for line in "".join(cell["source"]).splitlines())


def differences(stored_nb, fresh_nb, rules=None) -> list[str]:
    """One readable report per code cell whose fresh text outputs differ from the stored ones."""
    rules = sanitizers() if rules is None else rules
    reports = []
    stored_cells = [c for c in stored_nb["cells"] if c["cell_type"] == "code"]
    fresh_cells = [c for c in fresh_nb["cells"] if c["cell_type"] == "code"]
    assert len(stored_cells) == len(fresh_cells), "the two notebooks must have the same code cells"
    for index, (stored, fresh) in enumerate(zip(stored_cells, fresh_cells)):
        if ignores_output(stored):
            continue
        want, got = comparable(stored["outputs"], rules), comparable(fresh["outputs"], rules)
        if want == got:
            continue
        for key in sorted(set(want) | set(got)):
            if want.get(key) != got.get(key):
                diff = difflib.unified_diff(want.get(key, "").splitlines(), got.get(key, "").splitlines(),
                                            "stored", "fresh", lineterm="", n=0)
                reports.append(f"code cell {index} ({key}):\n" + "\n".join(list(diff)[2:12]))
    return reports
