"""ModelConfig: every switch the chapters teach, validated once, in one place."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .validate import check_choice, check_int, check_number

NORMS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
FFNS = ("gelu", "relu", "swiglu", "moe")
POSITIONS = ("learned", "sinusoidal", "rope", "none")
ATTN_IMPLS = ("sdpa", "reference")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    max_seq_len: int  # longest sequence the model (and its KV cache) can hold
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None  # None = n_heads (multi-head); fewer = grouped-query attention
    d_ff: int | None = None  # None = 4 * d_model, or 8/3 * d_model for SwiGLU (same parameter count)
    norm: str = "layernorm"
    norm_position: str = "pre"  # "post" is the 2017 paper's block: LN(x + f(x))
    ffn: str = "gelu"  # GELU is GPT-2's tanh approximation, so HF GPT-2 weights match exactly
    n_experts: int = 8  # used by ffn="moe"
    experts_per_token: int = 2
    moe_aux_weight: float = 0.01  # weight of the load-balancing loss in model.loss (Switch Transformer's 0.01)
    pos: str = "learned"
    rope_base: float = 10000.0
    tie_embeddings: bool = True  # lm_head.weight is tok_emb.weight: V*d parameters saved
    bias: bool = True  # GPT-2 has biases in every Linear and LayerNorm; Llama has none
    norm_eps: float = 1e-5
    dropout: float = 0.0
    # the attention kernel: "sdpa" (PyTorch's fused one) or "reference" (softmax(QK^T / sqrt(d_h)) V step by
    # step, which can return the weights); the same numbers to float32 round-off
    attn_impl: str = "sdpa"
    causal: bool = True  # False = every token sees every token (encoder-style, as chapter 1's first example)

    def __post_init__(self):
        for name in ("vocab_size", "max_seq_len", "d_model", "n_layers", "n_heads", "n_experts",
                     "experts_per_token"):
            check_int(name, getattr(self, name), 1)
        for name in ("n_kv_heads", "d_ff"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        check_choice("norm", self.norm, NORMS)
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("ffn", self.ffn, FFNS)
        check_choice("pos", self.pos, POSITIONS)
        check_choice("attn_impl", self.attn_impl, ATTN_IMPLS)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.kv_heads})")
        if self.pos == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE rotates pairs of dimensions: head_dim (d_model / n_heads = {self.head_dim}) "
                             "must be even")
        if self.pos == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions pair sin/cos: d_model ({self.d_model}) must be even")
        if self.ffn == "moe" and self.experts_per_token > self.n_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) must be in [1, n_experts="
                             f"{self.n_experts}]")
        check_number("dropout", self.dropout, 0.0, 1.0, max_open=True)
        check_number("norm_eps", self.norm_eps, 0.0, min_open=True)
        check_number("rope_base", self.rope_base, 1.0, min_open=True)
        check_number("moe_aux_weight", self.moe_aux_weight, 0.0)
        for name in ("tie_embeddings", "bias", "causal"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn_dim(self) -> int:
        if self.d_ff is not None:
            return self.d_ff
        if self.ffn in ("swiglu", "moe"):
            # three matrices instead of two: 2/3 of 4d keeps the parameter count; round up to 8 (HW friendly)
            return 8 * ((8 * self.d_model // 3 + 7) // 8)
        return 4 * self.d_model

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, **overrides) -> ModelConfig:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict] = {
    # GPT-2 small (124M): learned positions, GELU, Pre-LN, tied head
    "gpt2-small": {"vocab_size": 50257, "max_seq_len": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12},
    # a Llama-shaped toy: RMSNorm, SwiGLU, RoPE, GQA, no biases, untied head
    "llama-tiny": {"vocab_size": 4096, "max_seq_len": 512, "d_model": 128, "n_layers": 4, "n_heads": 4,
                   "n_kv_heads": 2, "norm": "rmsnorm", "ffn": "swiglu", "pos": "rope", "bias": False,
                   "tie_embeddings": False, "norm_eps": 1e-6},
    # the shipped character-level Shakespeare model (train.py): narrow, because on two CPU cores a 10-minute
    # budget buys more by seeing more text than by width; vocab_size is the corpus' 63 characters
    "char-tiny": {"vocab_size": 63, "max_seq_len": 256, "d_model": 128, "n_layers": 4, "n_heads": 4,
                  "norm": "rmsnorm", "ffn": "swiglu", "pos": "rope", "bias": False},
}

