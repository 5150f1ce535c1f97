"""The course corpus, its character-level split into ids, and the batching used for training.

The corpus (nine Shakespeare plays, about 1.1 MB) ships inside the package; see data/README.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from .tokenizer import CharTokenizer

CORPUS_PATH = Path(__file__).with_name("data") / "shakespeare.txt"


def load_corpus() -> str:
    """Return the whole Shakespeare corpus as one string."""
    return CORPUS_PATH.read_text(encoding="utf-8")


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
