"""TransformerLM: token (+ position) embeddings, a stack of blocks, a final norm and the LM head."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .block import Block
from .config import ModelConfig
from .ffn import MoE
from .kv_cache import KVCache
from .norms import make_norm
from .positions import rope_cos_sin, sinusoidal_encoding
from .precision import upcast
from .validate import check_forward_inputs, check_token_ids


class TransformerLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"TransformerLM needs a ModelConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        L = cfg.max_seq_len
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(L, cfg.d_model) if cfg.pos == "learned" else None
        # position tables in float32, or float64 for a model built under default_dtype(torch.float64)
        table_dtype = torch.promote_types(torch.get_default_dtype(), torch.float32)
        if cfg.pos == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_encoding(L, cfg.d_model, dtype=table_dtype),
                                 persistent=False)
        if cfg.pos == "rope":
            cos, sin = rope_cos_sin(torch.arange(L), cfg.head_dim, cfg.rope_base, dtype=table_dtype)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        # Post-LN blocks already end in a norm; Pre-LN leaves the residual stream un-normalised.
        self.norm_f = make_norm(cfg) if cfg.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            # GPT-2: residual projections scaled by 1/sqrt(2 * n_layers), so the stream's variance stays put
            if name.endswith(("attn.o_proj.weight", "ffn.proj.weight", ".down.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layers))
        if cfg.tie_embeddings:
            # one matrix reads tokens in and writes them out
            self.lm_head.weight = self.tok_emb.weight

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor | None = None, cache: list[KVCache] | None = None,
                *, last_only: bool = False, check: bool = True) -> torch.Tensor:
        """Logits (B, T, vocab_size) for token ids idx (B, T) at positions input_pos (T,), by default 0 .. T-1,
        or (B, T): each sequence at its own positions (a ragged batch; serving's engine).

        cache: one KVCache per layer (or anything with its update(input_pos, k, v) and max_len, as serving's
        paged cache); each layer writes its keys and values at input_pos, and the queries attend to every
        position the cache holds up to their own. last_only: the last position's logits only,
        (B, 1, V). check: validate the arguments first, which reads the ids and positions back from the device
        once; decode_one_token passes False, since the ids it feeds are the model's own.
        """
        if check:
            self.check_inputs(idx, input_pos, cache)
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device) if input_pos is None else input_pos
        x = self.tok_emb(idx)  # (B, T, C)
        if self.pos_emb is not None:
            x = x + self.pos_emb(pos)
        elif self.cfg.pos == "sinusoidal":
            x = x + self.pos_table[pos].to(x.dtype)
        rope = None
        if self.cfg.pos == "rope":
            cos, sin = self.rope_cos[pos], self.rope_sin[pos]  # (T, hs), or (B, T, hs)
            # per-sequence positions: (B, 1, T, hs), one table for every head
            rope = (cos, sin) if pos.dim() == 1 else (cos[:, None], sin[:, None])
        x = self.dropout(x)
        mask = self.attention_mask(pos, cache)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, rope, None if cache is None else cache[i], pos)
        x = self.norm_f(x)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(x)  # (B, T, V), or (B, 1, V)

    def attention_mask(self, pos: torch.Tensor, cache) -> torch.Tensor | None:
        """(T, T_k) bool, True where the query at position pos[i] may attend to the key at position j <= pos[i]:
        over every slot of the cache (the slots not written yet lie ahead of every query), or over the T tokens
        themselves. Built from the positions rather than sliced from a (max_seq_len, max_seq_len) table, which
        would take 17 GB at Llama 3's 131,072 positions. For per-sequence positions pos (B, T): (B, 1, T, T_k),
        each sequence's own mask, the same for every head."""
        if not self.cfg.causal:
            return None
        key_pos = torch.arange(cache[0].max_len, device=pos.device) if cache is not None else pos
        mask = key_pos[..., None, :] <= pos[..., :, None]  # (T, T_k), or (B, T, T_k)
        return mask if pos.dim() == 1 else mask[:, None]

    def check_inputs(self, idx, input_pos=None, cache=None):
        """TypeError or ValueError, naming the problem, for ids, positions or a cache forward cannot take."""
        check_forward_inputs(self.cfg, idx, input_pos, cache)

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy in nats (targets (B, T) are idx shifted left by one), plus, for a
        mixture of experts in training, cfg.moe_aux_weight times the experts' load-balancing loss."""
        if not isinstance(targets, torch.Tensor) or targets.dtype.is_floating_point or targets.dtype == torch.bool:
            raise TypeError(f"targets must be an integer tensor of token ids, got {getattr(targets, 'dtype', targets)!r}")
        if targets.shape != idx.shape:
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
        check_token_ids("targets", targets, self.cfg.vocab_size)
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
