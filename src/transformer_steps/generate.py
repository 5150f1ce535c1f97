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
    logits = upcast(logits)
    # A tiny temperature (any > 0 is allowed) must neither flush to 0 in the logits' dtype (0 / 0 = nan) nor
    # overflow them (inf - inf = nan): the largest logit moves to 0 first, the others towards -inf. The same
    # softmax, to round-off
    temperature = max(temperature, torch.finfo(logits.dtype).tiny)
    logits = (logits - logits.amax(-1, keepdim=True)) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token once the tokens ranked above it already reach top_p (the best one always stays)
        drop = (probs.cumsum(-1) - probs) >= top_p
        drop[..., 0] = False  # also for a top_p below the dtype's smallest number (5e-324 -> 0 in float32)
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    device = generator.device if generator is not None else probs.device
    return torch.multinomial(probs.to(device), 1, generator=generator).to(logits.device)


def prefill(model: TransformerLM, idx: torch.Tensor, cache, *, check: bool = True) -> torch.Tensor:
    """Run the whole prompt idx (B, T) once at positions 0 .. T-1, filling the cache; last logits (B, V)."""
    input_pos = torch.arange(idx.shape[1], device=idx.device)
    return model(idx, input_pos, cache, last_only=True, check=check)[:, -1]


def decode_one_token(model: TransformerLM, token: torch.Tensor, input_pos, cache) -> torch.Tensor:
    """One step: token (B, 1) at position input_pos attends to the cache; logits (B, V).

    input_pos: a (1,) long tensor (generate's, which stays on the device), or an int for convenience. The token
    is not checked: it is one the model produced, and a check would read it back from the device every step.
    Every shape is the same at every position, so torch.compile(decode_one_token) compiles once.
    """
    if isinstance(input_pos, int):
        input_pos = torch.tensor([input_pos], device=token.device)
    return model(token, input_pos, cache, check=False)[:, -1]


def check_sampling(max_new_tokens, temperature, top_k, top_p):
    check_int("max_new_tokens", max_new_tokens, 0)
    check_number("temperature (0 = greedy)", temperature, 0.0)
    if top_k is not None:
        check_int("top_k", top_k, 1)
    if top_p is not None:
        check_number("top_p", top_p, 0.0, 1.0, min_open=True)


def generate(model: TransformerLM, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None, return_logits: bool = False, decode=decode_one_token):
    """Continue each prompt in idx (B, T) by max_new_tokens ids; returns (B, T + max_new_tokens).

    use_cache=False recomputes the whole prefix every step (the naive loop); both give the same ids.
    With return_logits=True also returns the logits used at each step, (B, max_new_tokens, V).
    decode: the decode step, decode_one_token or a compiled one, `torch.compile(decode_one_token)`.

    >>> from transformer_steps import ModelConfig, TransformerLM, generate
    >>> model = TransformerLM(ModelConfig.preset("llama-tiny")).eval()
    >>> generate(model, torch.tensor([[1, 2, 3]]), 5, temperature=0.0).shape
    torch.Size([1, 8])
    """
    check_sampling(max_new_tokens, temperature, top_k, top_p)
    if not callable(decode):
        raise TypeError(f"decode must be a function like decode_one_token, got {type(decode).__name__}")
    # the user's prompt, checked once; the ids added below are the model's own
    model.check_inputs(idx)
    if not model.cfg.causal:
        raise ValueError("generate needs a causal model (cfg.causal=True): a bidirectional one sees the future")
    B, T = idx.shape
    if T + max_new_tokens > model.cfg.max_seq_len:
        raise ValueError(f"prompt ({T}) + max_new_tokens ({max_new_tokens}) = {T + max_new_tokens} exceeds "
                         f"max_seq_len ({model.cfg.max_seq_len}); shorten the prompt or generate fewer tokens")

    def sample(logits):
        return sample_next(logits, temperature, top_k, top_p, generator)

    # no autograd bookkeeping at all: less per-op overhead than no_grad
    with torch.inference_mode():
        if max_new_tokens == 0:
            out, seen = idx, []
        elif use_cache:
            out, seen = cached_loop(model, idx, max_new_tokens, sample, decode, return_logits)
        else:
            out, seen = naive_loop(model, idx, max_new_tokens, sample, return_logits)
        if return_logits:
            empty = idx.new_zeros((B, 0, model.cfg.vocab_size), dtype=torch.float32)
            logits = torch.stack(seen, dim=1) if seen else empty
    # clones made outside inference mode are ordinary tensors, usable later with autograd
    return (out.clone(), logits.clone()) if return_logits else out.clone()


def cached_loop(model, idx, max_new_tokens, sample, decode, keep_logits=False):
    """Prefill the prompt once, then one decode step per further token.

    Returns (ids, each step's logits if keep_logits else []): kept for every step, they would take
    max_new_tokens * vocab_size floats per sequence (400 MB for 2,000 GPT-2 tokens)."""
    B, T = idx.shape
    cache = model.make_cache(B, T + max_new_tokens)
    logits = prefill(model, idx, cache, check=False)
    seen = [logits] if keep_logits else []
    new = [sample(logits)]
    # on the device, advanced in place: a step reads nothing back
    input_pos = torch.tensor([T], device=idx.device)
    for _ in range(max_new_tokens - 1):
        logits = decode(model, new[-1], input_pos, cache)
        input_pos += 1
        if keep_logits:
            seen.append(logits)
        new.append(sample(logits))
    return torch.cat([idx, *new], dim=1), seen


def naive_loop(model, idx, max_new_tokens, sample, keep_logits=False):
    """Recompute the whole sequence for every new token: no cache. Returns (ids, each step's logits if
    keep_logits else [])."""
    seq, seen = idx, []
    for _ in range(max_new_tokens):
        logits = model(seq, last_only=True, check=False)[:, -1]
        if keep_logits:
            seen.append(logits)
        seq = torch.cat([seq, sample(logits)], dim=1)
    return seq, seen
