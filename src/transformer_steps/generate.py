"""Autoregressive decoding: prefill the prompt once, then one token per step with a KV cache."""

from __future__ import annotations

import torch

from .model import TransformerLM
from .precision import upcast
from .validate import check_int, check_number


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Next ids (B, 1) from last-position logits (B, V). temperature 0 = greedy (argmax)."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = upcast(logits) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token once the tokens ranked above it already reach top_p (the best one always stays)
        drop = (probs.cumsum(-1) - probs) >= top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    device = generator.device if generator is not None else probs.device
    return torch.multinomial(probs.to(device), 1, generator=generator).to(logits.device)


def prefill(model: TransformerLM, idx: torch.Tensor, cache) -> torch.Tensor:
    """Run the whole prompt once, filling the cache; logits of the last position (B, V)."""
    return model(idx, cache=cache, last_only=True)[:, -1]


def decode_one_token(model: TransformerLM, token: torch.Tensor, pos: int, cache) -> torch.Tensor:
    """One step: token (B, 1) at position pos attends to the cache; logits (B, V)."""
    return model(token, start_pos=pos, cache=cache)[:, -1]


def check_sampling(max_new_tokens, temperature, top_k, top_p):
    check_int("max_new_tokens", max_new_tokens, 0)
    check_number("temperature (0 = greedy)", temperature, 0.0)
    if top_k is not None:
        check_int("top_k", top_k, 1)
    if top_p is not None:
        check_number("top_p", top_p, 0.0, 1.0, min_open=True)


def generate(model: TransformerLM, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None, return_logits: bool = False):
    """Continue each prompt in idx (B, T) by max_new_tokens ids; returns (B, T + max_new_tokens).

    use_cache=False recomputes the whole prefix every step (the naive loop); both give the same ids.
    With return_logits=True also returns the logits used at each step, (B, max_new_tokens, V).

    >>> from transformer_steps import ModelConfig, TransformerLM, generate
    >>> model = TransformerLM(ModelConfig.preset("llama-tiny")).eval()
    >>> generate(model, torch.tensor([[1, 2, 3]]), 5, temperature=0.0).shape
    torch.Size([1, 8])
    """
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    model.check_ids(idx, values=max_new_tokens == 0)  # otherwise the first forward checks the values
    if not model.cfg.causal:
        raise ValueError("generate needs a causal model (cfg.causal=True): a bidirectional one sees the future")
    B, T = idx.shape
    if T + max_new_tokens > model.cfg.max_seq_len:
        raise ValueError(f"prompt ({T}) + max_new_tokens ({max_new_tokens}) = {T + max_new_tokens} exceeds "
                         f"max_seq_len ({model.cfg.max_seq_len}); shorten the prompt or generate fewer tokens")
    new, step_logits = [], []
    with torch.inference_mode():  # no autograd bookkeeping at all: less per-op overhead than no_grad
        if use_cache and max_new_tokens:
            cache = model.make_cache(B, T + max_new_tokens)
            logits = prefill(model, idx, cache)
        for i in range(max_new_tokens):
            if not use_cache:
                logits = model(torch.cat([idx, *new], dim=1), last_only=True)[:, -1]
            elif i:
                logits = decode_one_token(model, new[-1], T + i - 1, cache)
            step_logits.append(logits)
            new.append(sample_next(logits, temperature, top_k, top_p, generator))
        out = torch.cat([idx, *new], dim=1)
        if return_logits:
            empty = idx.new_zeros((B, 0, model.cfg.vocab_size), dtype=torch.float32)
            logits = torch.stack(step_logits, dim=1) if step_logits else empty
    # clones made outside inference mode are ordinary tensors, usable later with autograd
    return (out.clone(), logits.clone()) if return_logits else out.clone()
