"""The course corpus and a character-level tokenizer, with the batching used for training.

The corpus (nine Shakespeare plays, about 1.1 MB) ships inside the package; see data/README.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

CORPUS_PATH = Path(__file__).with_name("data") / "shakespeare.txt"


def load_corpus() -> str:
    """Return the whole Shakespeare corpus as one string."""
    return CORPUS_PATH.read_text(encoding="utf-8")


class CharTokenizer:
    """One token per character; ids follow the sorted order of the characters."""

    def __init__(self, chars: Sequence[str]):
        chars = list(chars)
        if not chars:
            raise ValueError("CharTokenizer needs at least one character")
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"every vocabulary entry must be a single character, got {bad[:5]!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("the vocabulary contains repeated characters")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError:
            unknown = sorted({c for c in text if c not in self.stoi})
            raise ValueError(
                f"characters not in the vocabulary: {unknown!r} (the vocabulary has {self.vocab_size} "
                f"characters: {''.join(self.chars)!r})"
            ) from None

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            if ids.dim() > 1:
                raise ValueError(f"decode takes a 1-D sequence of ids, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids out of range [0, {self.vocab_size - 1}]: {bad[:5]}")
        return "".join(self.chars[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def train_val_split(ids: Sequence[int] | torch.Tensor, val_fraction: float = 0.1):
    """Split a 1-D id sequence into (train, val) LongTensors: the last `val_fraction` is validation.

    A contiguous tail, not a random sample, so no validation window overlaps the training text.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D, got shape {tuple(ids.shape)}")
    n_val = round(len(ids) * val_fraction)
    if n_val < 1 or n_val >= len(ids):
        raise ValueError(f"val_fraction={val_fraction} of {len(ids)} ids leaves an empty split")
    return ids[:-n_val], ids[-n_val:]


def load_char_dataset(val_fraction: float = 0.1):
    """Return (tokenizer, train_ids, val_ids) for the shipped corpus."""
    text = load_corpus()
    tokenizer = CharTokenizer.from_text(text)
    train_ids, val_ids = train_val_split(tokenizer.encode(text), val_fraction)
    return tokenizer, train_ids, val_ids


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
):
    """Sample `batch_size` random windows of `block_size` ids: inputs x and targets y = x shifted by one.

    Offsets come from `generator` (a CPU torch.Generator) so a seeded run sees the same batches on any
    device. Returns x, y of shape (batch_size, block_size) on `device`.
    """
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D tensor of ids, got shape {tuple(data.shape)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not 1 <= block_size < len(data):
        raise ValueError(f"block_size must be in [1, {len(data) - 1}] for {len(data)} ids, got {block_size}")
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    windows = data[starts[:, None] + torch.arange(block_size + 1)]
    return windows[:, :-1].to(device), windows[:, 1:].to(device)
