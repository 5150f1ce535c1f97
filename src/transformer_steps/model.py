"""TransformerLM: token (+ position) embeddings, a stack of blocks, a final norm and the LM head."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import fastpath
from .block import Block
from .config import ModelConfig
from .ffn import MoE
from .kv_cache import KVCache
from .norms import make_norm
from .positions import rope_cos_sin, sinusoidal_encoding
from .precision import upcast
from .validate import check_int


def check_id_range(name: str, ids: torch.Tensor, vocab_size: int) -> None:
    """Every id in [0, vocab_size): one device-to-host copy (min and max together)."""
    lo, hi = torch.stack(torch.aminmax(ids)).tolist()
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{name} must be in [0, {vocab_size}), got values in [{lo}, {hi}]")


class TransformerLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"TransformerLM needs a ModelConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.pos == "learned" else None
        # position tables in float32, or float64 for a model built under default_dtype(torch.float64)
        table_dtype = torch.promote_types(torch.get_default_dtype(), torch.float32)
        if cfg.pos == "sinusoidal":
            table = sinusoidal_encoding(cfg.max_seq_len, cfg.d_model, dtype=table_dtype)
            self.register_buffer("pos_table", table, persistent=False)
        if cfg.pos == "rope":
            cos, sin = rope_cos_sin(torch.arange(cfg.max_seq_len), cfg.head_dim, cfg.rope_base, dtype=table_dtype)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
            # sin with rotate_half's sign folded in, once per model, for fastpath.rope_q_and_k
            self.register_buffer("rope_sin_signed", fastpath.signed_sin(sin), persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        # Post-LN blocks already end in a norm; Pre-LN leaves the residual stream un-normalised.
        self.norm_f = make_norm(cfg) if cfg.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by 1/sqrt(2 * n_layers)
            if name.endswith(("attn.o_proj.weight", "ffn.proj.weight", ".down.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layers))
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight  # one matrix reads tokens in and writes them out
        if cfg.attn_impl == "sdpa":  # the decode-speed layout; "reference" keeps the row-major weights
            fastpath.long_rows_(self)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, *, start_pos: int = 0, cache: list[KVCache] | None = None,
                last_only: bool = False) -> torch.Tensor:
        """Logits (B, T, vocab_size) for token ids idx (B, T) at positions start_pos .. start_pos + T - 1.

        cache: one KVCache per layer; each layer's keys and values for these positions are written into it, and
        the queries attend to everything it holds. last_only: logits of the last position only, (B, 1, V).
        The ids' values are checked when a sequence starts (start_pos 0); later positions hold ids the model
        produced itself, and checking them would cost a device-to-host copy per decoded token on a GPU.
        """
        self.check_ids(idx, start_pos, values=start_pos == 0)
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"cache must hold one KVCache per layer ({len(self.blocks)}), got {len(cache)}")
        T = idx.shape[1]
        x = self.tok_emb(idx)  # (B, T, C)
        rope = None
        if self.pos_emb is not None:
            x = x + self.pos_emb.weight[start_pos:start_pos + T]
        elif self.cfg.pos == "sinusoidal":
            x = x + self.pos_table[start_pos:start_pos + T].to(x.dtype)
        elif self.cfg.pos == "rope":
            positions = slice(start_pos, start_pos + T)
            rope = (self.rope_cos[positions], self.rope_sin[positions], self.rope_sin_signed[positions])
        if self.training:  # dropout is the identity in eval: skip the call (a decode step is op-bound)
            x = self.dropout(x)
        for i, block in enumerate(self.blocks):
            x = block(x, start_pos=start_pos, cache=None if cache is None else cache[i], rope=rope)
        x = self.norm_f(x)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(x)  # (B, T, V), or (B, 1, V)

    def check_ids(self, idx, start_pos: int = 0, *, values: bool = True):
        """Type, shape and length of idx; with values=True also that every id is in [0, vocab_size)."""
        cfg = self.cfg
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"token ids must be a torch.Tensor, got {type(idx).__name__}")
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise TypeError(f"token ids must be an integer tensor (torch.long), got {idx.dtype}")
        if idx.dim() != 2:
            raise ValueError(f"token ids must have shape (batch, time), got {idx.dim()} dims {tuple(idx.shape)}")
        if idx.numel() == 0:
            raise ValueError(f"token ids are empty {tuple(idx.shape)}: need at least one sequence of at least one token")
        check_int("start_pos", start_pos, 0)
        if start_pos + idx.shape[1] > cfg.max_seq_len:
            raise ValueError(f"sequence too long: positions up to {start_pos + idx.shape[1]} but max_seq_len is "
                             f"{cfg.max_seq_len}")
        if values:
            check_id_range("token ids", idx, cfg.vocab_size)

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy in nats (targets (B, T) are idx shifted left by one), plus, for a
        mixture of experts in training, cfg.moe_aux_weight times the experts' load-balancing loss."""
        if not isinstance(targets, torch.Tensor) or targets.dtype.is_floating_point or targets.dtype == torch.bool:
            raise TypeError(f"targets must be an integer tensor of token ids, got {getattr(targets, 'dtype', targets)!r}")
        if targets.shape != idx.shape:
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
        check_id_range("targets", targets, self.cfg.vocab_size)
        logits = self(idx)
        loss = F.cross_entropy(upcast(logits.flatten(0, 1)), targets.flatten())
        if self.cfg.ffn == "moe" and self.training and self.cfg.moe_aux_weight:
            aux = torch.stack([m.aux_loss for m in self.modules() if isinstance(m, MoE)]).mean()
            loss = loss + self.cfg.moe_aux_weight * aux
        return loss

    def make_cache(self, batch_size: int, max_len: int | None = None, dtype=None) -> list[KVCache]:
        """One preallocated KVCache per layer, on the model's device."""
        max_len = self.cfg.max_seq_len if max_len is None else max_len
        if not 1 <= max_len <= self.cfg.max_seq_len:
            raise ValueError(f"max_len must be in [1, max_seq_len={self.cfg.max_seq_len}], got {max_len}")
        w = self.tok_emb.weight
        dtype = dtype or w.dtype
        return [KVCache(batch_size, self.cfg.kv_heads, max_len, self.cfg.head_dim, dtype, w.device)
                for _ in self.blocks]

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Unique parameters (a tied head counts once)."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.tok_emb.weight.numel() + (self.pos_emb.weight.numel() if self.pos_emb is not None else 0)
        return n

    def parameter_table(self) -> dict[str, int]:
        """Parameter count per component; a tied head shows 0 (it reuses the token embedding)."""
        table = {"token embedding": self.tok_emb.weight.numel(),
                 "positions": self.pos_emb.weight.numel() if self.pos_emb is not None else 0,
                 "attention": 0, "ffn": 0, "norms": 0}
        for block in self.blocks:
            table["attention"] += sum(p.numel() for p in block.attn.parameters())
            table["ffn"] += sum(p.numel() for p in block.ffn.parameters())
            table["norms"] += sum(p.numel() for m in (block.norm1, block.norm2) for p in m.parameters())
        table["norms"] += sum(p.numel() for p in self.norm_f.parameters())
        table["lm head"] = 0 if self.cfg.tie_embeddings else self.lm_head.weight.numel()
        return table
