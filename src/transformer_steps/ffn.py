"""Position-wise feed-forward networks: the classic MLP, SwiGLU, and a top-k mixture of experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .precision import upcast


def act(name: str):
    """The MLP non-linearity. GELU is GPT-2's tanh approximation."""
    if name == "relu":
        return F.relu
    if name == "gelu":
        return lambda x: F.gelu(x, approximate="tanh")
    raise ValueError(f"unknown activation {name!r}; allowed: relu, gelu")


class MLP(nn.Module):
    """d -> d_ff -> d: act(x W1 + b1) W2 + b2."""

    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=cfg.bias)
        self.proj = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=cfg.bias)
        self.act = act(cfg.ffn)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.proj(self.act(self.fc(x))))


class SwiGLU(nn.Module):
    """(silu(x W_gate) * x W_up) W_down: a gated FFN, as in Llama."""

    def __init__(self, cfg):
        super().__init__()
        # W_gate and W_up stacked in one matrix (rows [0, d_ff) gate, [d_ff, 2 d_ff) up): one matmul, not two
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.ffn_dim, bias=cfg.bias)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.dropout(self.down(F.silu(gate) * up))


class MoE(nn.Module):
    """Top-k mixture of SwiGLU experts: a router scores experts per token, the k best run, and their
    outputs are summed with the router's probabilities renormalised over those k."""

    def __init__(self, cfg):
        super().__init__()
        self.n_experts, self.k = cfg.n_experts, cfg.experts_per_token
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(cfg) for _ in range(cfg.n_experts))
        self.last_expert_ids = self.last_gates = self.aux_loss = None

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (N, C), N = B * T tokens
        probs = torch.softmax(upcast(self.router(flat)), dim=-1)  # (N, E)
        top_p, top_i = probs.topk(self.k, dim=-1)  # (N, k)
        gates = (top_p / top_p.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (top_i == e).nonzero(as_tuple=True)  # tokens routed to expert e
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * gates[rows, slot, None])
        self.last_expert_ids, self.last_gates = top_i.detach(), gates.detach()
        # Switch-Transformer balance loss, n_experts * sum_e (share of tokens to e) * (mean prob of e), which
        # model.loss adds: in training only (a decode step does not need it)
        self.aux_loss = self.balance_loss(probs, top_i) if self.training else None
        return out.view(shape)

    def balance_loss(self, probs: torch.Tensor, top_i: torch.Tensor) -> torch.Tensor:
        """1 when tokens and router probability spread evenly over the experts, up to n_experts when one takes all."""
        share = F.one_hot(top_i, self.n_experts).to(probs.dtype).sum(1).mean(0) / self.k
        return self.n_experts * (share * probs.mean(0)).sum()

    def expert_load(self) -> torch.Tensor:
        """Tokens each expert processed in the last forward pass, shape (n_experts,)."""
        if self.last_expert_ids is None:
            raise RuntimeError("expert_load() needs a forward pass first")
        return torch.bincount(self.last_expert_ids.flatten().cpu(), minlength=self.n_experts)


def make_ffn(cfg) -> nn.Module:
    if cfg.ffn == "swiglu":
        return SwiGLU(cfg)
    if cfg.ffn == "moe":
        return MoE(cfg)
    return MLP(cfg)
