"""Small helpers every chapter uses: seeding, one way to print numbers, and exercise checking."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch; returns a CPU generator for the chapter's random tensors."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def fmt(x, decimals: int = 4) -> str:
    """Format a number, vector or matrix with fixed decimals (no '-0.0000', same text on every CPU)."""
    a = np.asarray(x.detach().cpu().double() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    a = np.round(a, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    if a.ndim == 0:
        return f"{a:.{decimals}f}"
    return np.array2string(a, precision=decimals, floatmode="fixed", suppress_small=True, separator="  ",
                           max_line_width=120, threshold=200)


def show(name, value=None, decimals: int = 4) -> None:
    """Print `name = value` rounded; show(value) prints the value alone."""
    if value is None:
        print(fmt(name, decimals))
        return
    text = fmt(value, decimals)
    print(f"{name} =" + ("\n" if "\n" in text else " ") + text)


def check(answer, expected, *, atol: float = 1e-3, name: str = "answer") -> bool:
    """Compare an exercise answer with the expected value; print right / wrong / why and return the verdict."""
    if answer is None:
        print(f"Not attempted yet: set `{name}` and run this cell again.")
        return False
    if isinstance(expected, (str, bool)) or (isinstance(expected, int) and not isinstance(answer, float)):
        ok = answer == expected
        print("Correct!" if ok else f"Not quite: expected {expected!r}, got {answer!r}.")
        return bool(ok)
    try:
        got = torch.as_tensor(answer, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        print(f"Not quite: `{name}` should be numbers, got {type(answer).__name__}.")
        return False
    want = torch.as_tensor(expected, dtype=torch.float64)
    if got.shape != want.shape:
        print(f"Not quite: expected shape {tuple(want.shape)}, got {tuple(got.shape)}.")
        return False
    diff = (got - want).abs()
    if bool((diff <= atol).all()):
        print("Correct!")
        return True
    i = int(diff.flatten().argmax())
    where = f" at index {tuple(int(j) for j in np.unravel_index(i, tuple(want.shape)))}" if want.dim() else ""
    print(f"Not quite: largest difference {fmt(diff.flatten()[i])}{where} "
          f"(expected {fmt(want.flatten()[i])}, got {fmt(got.flatten()[i])}; tolerance {atol}).")
    return False


def as_text(x, decimals: int = 4) -> str:
    """A vector as "[a, b, c]" with fixed decimals, for printing and for the prose."""
    values = x.flatten().tolist() if isinstance(x, torch.Tensor) else np.ravel(x).tolist()
    return "[" + ", ".join(fmt(v, decimals) for v in values) + "]"
