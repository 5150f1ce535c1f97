"""One Transformer block: attention and FFN, each wrapped in a residual connection and a norm."""

from __future__ import annotations

from torch import nn

from .attention import CausalSelfAttention
from .ffn import make_ffn
from .norms import make_norm


class Block(nn.Module):
    """Pre-LN: x + f(LN(x)) (GPT-2, Llama). Post-LN: LN(x + f(x)) (the 2017 paper)."""

    def __init__(self, cfg):
        super().__init__()
        self.pre = cfg.norm_position == "pre"
        self.norm1 = make_norm(cfg)
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = make_norm(cfg)
        self.ffn = make_ffn(cfg)

    def forward(self, x, mask=None, rope=None, cache=None, input_pos=None):
        """x (B, T, C) -> (B, T, C); the other arguments go to the attention (see CausalSelfAttention)."""
        if self.pre:
            x = x + self.attn(self.norm1(x), mask, rope, cache, input_pos)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.attn(x, mask, rope, cache, input_pos))
        return self.norm2(x + self.ffn(x))
