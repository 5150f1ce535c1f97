"""An optional compiled decode step: `torch.compile` over a static-shape KV cache (the gpt-fast recipe).

Eager decoding pays Python and dispatcher overhead for each of the ~200 torch calls of a step, which is much
of a step's time for a small model on a CPU. Compiled, one step is a single generated C++ function (plus the
matmuls, still MKL's). torch.compile only pays off if it compiles once, so every step must have the same
shapes: the cache is preallocated at max_len, step `pos` writes its key and value at position `pos` and
attends over all max_len positions, with a mask that hides positions > pos (never written, or stale from an
earlier sequence). The position is a tensor, not a Python int, so its value is data, not a guard.

Why the step is not `model(token, start_pos=pos, cache=cache)`: the attention module attends to what
`KVCache.update` returns, the filled prefix (B, nkv, pos + 1, hs), and a single query gets no mask (it sees
every key it is given). A full-length (B, nkv, max_len, hs) view would let it attend to unwritten zeros, and
the module takes no mask argument, so `decode_step` below runs the same modules (the model's own Linear,
norm and FFN layers, and fastpath's RoPE) in the same order with the mask added. The prompt is prefilled by
the public forward, eagerly, into the same `KVCache` buffers (prompt lengths vary; one call is not worth a
compile per length). `mode="dynamic"` is the simpler alternative: `torch.compile(decode_one_token,
dynamic=True)` over the public forward and the prefix views, with a symbolic length instead of a mask.

Greedy ids equal `generate(model, idx, n, temperature=0.0)` (tests/test_compiled.py); logits agree to float32
round-off, not bit for bit (the generated code fuses the elementwise ops and reassociates their sums).
torch.compile needs a C++ compiler at run time on a CPU (gcc or clang); the first step compiles (14-25 s cold
on the course's 2-core CPU, under a second with a warm inductor cache): `make bench` part (f) measures the
compile, the speed-up and the generation length at which it pays off.
"""

from __future__ import annotations

import shutil

import torch
import torch.nn.functional as F

from .attention import attention
from .generate import decode_one_token
from .model import TransformerLM
from .validate import check_choice, check_int

MODES = ("static", "dynamic")


def compile_unavailable_reason(device="cpu") -> str | None:
    """Why torch.compile cannot run here (None when it can): no torch.compile, or no C++ compiler for a CPU."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if torch.device(device).type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "torch.compile on a CPU needs a C++ compiler (g++ or clang++) on PATH; none found"
    return None


def embed_one(model: TransformerLM, token: torch.Tensor, pos: torch.Tensor):
    """Token (+ position) embedding of token (B, 1) at position pos (1,), and the RoPE tables for it (or None).

    The model's forward slices its tables at a Python int; indexing with a tensor reads the same rows."""
    x = model.tok_emb(token)  # (B, 1, C)
    rope = None
    if model.pos_emb is not None:
        x = x + model.pos_emb(pos)  # (1, C), the row pos_emb.weight[pos]
    elif model.cfg.pos == "sinusoidal":
        x = x + model.pos_table[pos].to(x.dtype)
    elif model.cfg.pos == "rope":
        rope = (model.rope_cos[pos], model.rope_sin[pos], model.rope_sin_signed[pos])  # each (1, hs)
    if model.training:
        x = model.dropout(x)
    return x, rope


def attend_one(attn, x: torch.Tensor, pos: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
               rope, mask: torch.Tensor) -> torch.Tensor:
    """CausalSelfAttention.forward for one token (B, 1, C) against a full-length cache, with mask (1, max_len).

    Writes this position's key and value into k_cache, v_cache (B, nkv, max_len, hs) in place."""
    B, T, _ = x.shape
    nh, nkv, hs = attn.n_heads, attn.n_kv_heads, attn.head_dim
    q, k, v = attn.project(x, rope)  # (B, nh, 1, hs), (B, nkv, 1, hs), (B, nkv, 1, hs)
    k_cache.index_copy_(2, pos, k)  # the same shapes every step: one compiled graph for every position
    v_cache.index_copy_(2, pos, v)
    if attn.impl == "reference":
        groups = nh // nkv
        k_all, v_all = k_cache.repeat_interleave(groups, dim=1), v_cache.repeat_interleave(groups, dim=1)
        y = attention(q, k_all, v_all, mask)[0]
    else:
        y = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask, enable_gqa=nkv != nh)
    y = attn.o_proj(y.transpose(1, 2).reshape(B, T, nh * hs))  # (B, 1, C)
    return attn.resid_dropout(y) if attn.training else y


def decode_step(model: TransformerLM, token: torch.Tensor, pos: torch.Tensor, keys: list[torch.Tensor],
                values: list[torch.Tensor]) -> torch.Tensor:
    """Logits (B, V) of token (B, 1) at position pos (a (1,) long tensor); keys[i], values[i] are layer i's
    full cache buffers (B, nkv, max_len, hs), written at pos. Static shapes: compiles once for all positions."""
    max_len = keys[0].shape[2]
    mask = (torch.arange(max_len, device=pos.device) <= pos)[None, :]  # (1, max_len): True = attend
    x, rope = embed_one(model, token, pos)
    for block, k_cache, v_cache in zip(model.blocks, keys, values):
        if block.pre:  # Block.forward, with attend_one in place of the attention module's forward
            x = x + attend_one(block.attn, block.norm1(x), pos, k_cache, v_cache, rope, mask)
            x = x + block.ffn(block.norm2(x))
        else:
            x = block.norm1(x + attend_one(block.attn, x, pos, k_cache, v_cache, rope, mask))
            x = block.norm2(x + block.ffn(x))
    return model.lm_head(model.norm_f(x))[:, -1]  # (B, V)


class CompiledDecoder:
    """Greedy decoding with a compiled step, for batches of batch_size sequences of up to max_len positions.

    >>> decoder = CompiledDecoder(model, batch_size=1, max_len=256)   # doctest: +SKIP
    >>> decoder.generate(idx, 100)  # the first call compiles           # doctest: +SKIP
    """

    def __init__(self, model: TransformerLM, batch_size: int = 1, max_len: int | None = None,
                 mode: str = "static", backend: str | None = "inductor"):
        if not isinstance(model, TransformerLM):
            raise TypeError(f"CompiledDecoder needs a TransformerLM, got {type(model).__name__}")
        if not model.cfg.causal:
            raise ValueError("decoding needs a causal model (cfg.causal=True): a bidirectional one sees the future")
        check_int("batch_size", batch_size, 1)
        max_len = model.cfg.max_seq_len if max_len is None else max_len
        check_int("max_len", max_len, 1, model.cfg.max_seq_len)
        self.model, self.batch_size, self.max_len = model, batch_size, max_len
        self.mode = check_choice("mode", mode, MODES)
        self.cache = model.make_cache(batch_size, max_len)  # preallocated at max_len: the static shapes
        step = decode_step if mode == "static" else decode_one_token
        if backend is None:  # the same steps uncompiled: for tests, and for debugging a compiled run
            self._step = step
        elif not isinstance(backend, str):
            raise TypeError(f"backend must be a torch.compile backend name or None, got {type(backend).__name__}")
        else:  # dynamic: the prefix views grow every step, so their length must be symbolic from the start
            self._step = torch.compile(step, dynamic=mode == "dynamic", backend=backend)

    def prefill(self, idx: torch.Tensor) -> torch.Tensor:
        """Run the prompt idx (B, T) through the public forward, eagerly, into the cache; last logits (B, V)."""
        self.model.check_ids(idx)
        if idx.shape[0] != self.batch_size:
            raise ValueError(f"idx must hold batch_size={self.batch_size} sequences, got {idx.shape[0]}")
        if idx.shape[1] > self.max_len:
            raise ValueError(f"the prompt ({idx.shape[1]} tokens) must be in [1, max_len={self.max_len}]")
        with torch.inference_mode():
            return self.model(idx, cache=self.cache, last_only=True)[:, -1]

    def step(self, token: torch.Tensor, pos: int) -> torch.Tensor:
        """Logits (B, V) of token (B, 1) at position pos, which must follow the positions already written."""
        check_int("pos", pos, 0)
        filled = self.cache[0].length  # positions [0, filled) are written: the next one is filled
        if pos != filled:
            raise ValueError(f"pos must be the next position, {filled} (the cache holds [0, {filled})), got {pos}")
        if pos >= self.max_len:
            raise ValueError(f"KV cache overflow: pos must be in [0, max_len={self.max_len}), got {pos}")
        with torch.inference_mode():
            if self.mode == "dynamic":
                return self._step(self.model, token, pos, self.cache)
            where = torch.tensor([pos], device=token.device)
            logits = self._step(self.model, token, where, [c.k for c in self.cache], [c.v for c in self.cache])
        for c in self.cache:  # the compiled step wrote position pos: keep KVCache's bookkeeping in step
            c.length = pos + 1
        return logits

    def generate(self, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Greedy continuation of idx (B, T) by max_new_tokens ids: (B, T + max_new_tokens), the ids of
        generate(model, idx, max_new_tokens, temperature=0.0)."""
        check_int("max_new_tokens", max_new_tokens, 0)
        T = idx.shape[1] if isinstance(idx, torch.Tensor) and idx.dim() == 2 else 0
        if T + max_new_tokens > self.max_len:
            raise ValueError(f"prompt ({T}) + max_new_tokens ({max_new_tokens}) must be <= max_len "
                             f"({self.max_len}); make a decoder with a larger max_len or generate fewer tokens")
        if max_new_tokens == 0:
            self.model.check_ids(idx)
            return idx.clone()
        new = [self.prefill(idx).argmax(dim=-1, keepdim=True)]  # (B, 1)
        for i in range(1, max_new_tokens):
            new.append(self.step(new[-1], T + i - 1).argmax(dim=-1, keepdim=True))
        with torch.inference_mode():
            out = torch.cat([idx, *new], dim=1)
        return out.clone()  # made outside inference mode: an ordinary tensor, as generate returns


def generate_compiled(model: TransformerLM, idx: torch.Tensor, max_new_tokens: int, *,
                      max_len: int | None = None, mode: str = "static", backend: str | None = "inductor"):
    """Greedy generate with a compiled decode step: the ids of generate(model, idx, max_new_tokens,
    temperature=0.0). Builds a CompiledDecoder (a new cache) each call; torch.compile keeps the compiled code,
    so later calls with the same shapes (batch, max_len) do not compile again."""
    batch = idx.shape[0] if isinstance(idx, torch.Tensor) and idx.dim() == 2 else 1
    return CompiledDecoder(model, batch, max_len, mode, backend).generate(idx, max_new_tokens)
