"""One way to reject bad arguments everywhere in the package: TypeError for a wrong type, ValueError for a
wrong value, each naming the argument and what is allowed."""

from __future__ import annotations

import math
from numbers import Integral, Real


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _range_text(minimum, maximum, min_open: bool, max_open: bool) -> str:
    if maximum is None:
        return f"{'>' if min_open else '>='} {_num(minimum)}"
    if minimum is None:
        return f"{'<' if max_open else '<='} {_num(maximum)}"
    return f"in {'(' if min_open else '['}{_num(minimum)}, {_num(maximum)}{')' if max_open else ']'}"


def _check_range(name, value, minimum, maximum, min_open, max_open):
    too_low = minimum is not None and (value <= minimum if min_open else value < minimum)
    too_high = maximum is not None and (value >= maximum if max_open else value > maximum)
    if too_low or too_high or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{name} must be {_range_text(minimum, maximum, min_open, max_open)}, got {value!r}")


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int (not a bool, not a float such as 2.0) in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    _check_range(name, value, minimum, maximum, False, False)
    return int(value)


def check_number(name: str, value, minimum: float | None = None, maximum: float | None = None, *,
                 min_open: bool = False, max_open: bool = False) -> float:
    """A real number (int or float, not a bool) in the interval; min_open/max_open exclude the ends."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    _check_range(name, value, minimum, maximum, min_open, max_open)
    return value


def check_choice(name: str, value, allowed):
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(map(str, allowed))}")
    return value


def check_token_ids(name: str, ids, vocab_size: int) -> None:
    """Every id in [0, vocab_size): one device-to-host copy (min and max together)."""
    import torch

    lo, hi = torch.stack(torch.aminmax(ids)).tolist()
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{name} must be in [0, {vocab_size}), got values in [{lo}, {hi}]")


def check_forward_inputs(cfg, idx, input_pos=None, cache=None) -> None:
    """What TransformerLM.forward needs of ids idx (B, T), positions input_pos (T,) or (B, T) and a cache (one KVCache per
    layer). Reads the ids' and positions' values back from the device once."""
    import torch

    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"token ids must be a torch.Tensor, got {type(idx).__name__}")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise TypeError(f"token ids must be an integer tensor (torch.long), got {idx.dtype}")
    if idx.dim() != 2:
        raise ValueError(f"token ids must have shape (batch, time), got {idx.dim()} dims {tuple(idx.shape)}")
    if idx.numel() == 0:
        raise ValueError(f"token ids are empty {tuple(idx.shape)}: need at least one sequence of at least one token")
    B, T = idx.shape
    if cache is not None:
        if not cfg.causal:
            raise ValueError("a KV cache needs a causal model (cfg.causal=True)")
        # a KVCache per layer, or serving's paged layers: whatever has KVCache's update, max_len and batch_size
        layer_api = ("update", "max_len", "batch_size")
        if not isinstance(cache, (list, tuple)) or not all(all(hasattr(c, a) for a in layer_api) for c in cache):
            raise TypeError(f"cache must be a list of KVCache (model.make_cache), got {type(cache).__name__}")
        if len(cache) != cfg.n_layers:
            raise ValueError(f"cache must hold one KVCache per layer ({cfg.n_layers}), got {len(cache)}")
        if cache[0].batch_size != B:
            raise ValueError(f"the cache holds {cache[0].batch_size} sequences, but idx has {B}")
    if input_pos is None:
        lo_pos, hi_pos = 0, T - 1
        check_token_ids("token ids", idx, cfg.vocab_size)
    else:
        if not isinstance(input_pos, torch.Tensor) or input_pos.dtype != torch.long:
            got = input_pos.dtype if isinstance(input_pos, torch.Tensor) else type(input_pos).__name__
            raise TypeError(f"input_pos must be a torch.long tensor of positions, got {got}")
        if input_pos.shape not in ((T,), (B, T)):
            raise ValueError(f"input_pos must hold one position per token, ({T},), got {tuple(input_pos.shape)}; "
                             f"or one per sequence and token, ({B}, {T})")
        if input_pos.device != idx.device:
            raise ValueError(f"input_pos is on {input_pos.device} and idx on {idx.device}: put both on one device")
        # the ids and the positions read back together: one copy from the device
        lo, hi, lo_pos, hi_pos = torch.stack([*torch.aminmax(idx.long()), *torch.aminmax(input_pos)]).tolist()
        if lo < 0 or hi >= cfg.vocab_size:
            raise ValueError(f"token ids must be in [0, {cfg.vocab_size}), got values in [{lo}, {hi}]")
        if lo_pos < 0:
            raise ValueError(f"positions must be >= 0, got {lo_pos}")
    if hi_pos >= cfg.max_seq_len:
        raise ValueError(f"sequence too long: positions {lo_pos}..{hi_pos} need max_seq_len >= {hi_pos + 1}, "
                         f"but max_seq_len is {cfg.max_seq_len}")
    if cache is not None and hi_pos >= cache[0].max_len:
        raise ValueError(f"KV cache overflow: positions {lo_pos}..{hi_pos} need a cache of max_len >= {hi_pos + 1}, "
                         f"but it holds {cache[0].max_len}; make a larger one (model.make_cache)")
