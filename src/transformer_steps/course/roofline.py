"""Back-of-the-envelope inference cost: FLOPs and bytes per token, KV-cache size, arithmetic intensity, roofline.

Counts follow the usual conventions (Kaplan et al. 2020; Pope et al. 2022): a matmul of an (m, k) by a (k, n)
matrix costs 2·m·k·n FLOPs; the embedding lookup, norms, activations and softmax are not counted (they are a
few percent); bytes are what must come from memory at least once: every weight, plus the KV cache read or written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ModelConfig
from ..kv_cache import BYTES_PER_ELEMENT, kv_cache_bytes
from ..validate import check_choice, check_int, check_number


@dataclass(frozen=True)
class Hardware:
    """A chip as two numbers: peak FLOP/s and memory bandwidth in bytes/s."""

    name: str
    peak_flops: float
    bandwidth: float

    def __post_init__(self):
        check_number("peak_flops", self.peak_flops, 0.0, min_open=True)
        check_number("bandwidth", self.bandwidth, 0.0, min_open=True)

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which compute and memory take equally long: below it a kernel is memory-bound."""
        return self.peak_flops / self.bandwidth

    def attainable_flops(self, intensity: float) -> float:
        """Roofline: min(peak FLOP/s, bandwidth · FLOPs per byte)."""
        check_number("arithmetic intensity (FLOP/byte)", intensity, 0.0, min_open=True)
        return min(self.peak_flops, self.bandwidth * intensity)

    def seconds(self, cost: Cost) -> float:
        """Lower bound on the time of `cost`: the slower of its compute and its memory traffic."""
        return max(cost.flops / self.peak_flops, cost.bytes / self.bandwidth)

    @classmethod
    def from_cpu_specs(cls, name: str, cores: int, ghz: float, flops_per_cycle: int, channels: int,
                       mega_transfers: int, bytes_per_transfer: int = 8) -> Hardware:
        """Peak = cores · clock · FLOPs per cycle per core; bandwidth = channels · transfers/s · bytes each."""
        return cls(name, cores * ghz * 1e9 * flops_per_cycle, channels * mega_transfers * 1e6 * bytes_per_transfer)


# Published peak figures (dense, no sparsity). Sources: NVIDIA H100 and H200 Tensor Core GPU datasheets (SXM:
# 989 TFLOP/s BF16 dense; HBM3 3.35 TB/s, HBM3e 4.8 TB/s); AMD EPYC 9654 product page (96 Zen 4 cores, 2.4 GHz
# base, 12 channels of DDR5-4800); Zen 4 runs AVX-512 on two 256-bit FMA pipes: 2 · 8 lanes · 2 = 32 FP32 FLOPs
# per cycle per core.
H100_SXM = Hardware("H100 SXM (bf16)", 989e12, 3.35e12)
H200_SXM = Hardware("H200 SXM (bf16)", 989e12, 4.8e12)
EPYC_9654 = Hardware.from_cpu_specs("EPYC 9654 (fp32)", cores=96, ghz=2.4, flops_per_cycle=32, channels=12,
                                    mega_transfers=4800)


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs done per byte moved."""
        return self.flops / self.bytes


def _check_cfg(cfg):
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"need a ModelConfig, got {type(cfg).__name__}")


def _check_counts(cfg, bytes_per_element, batch_size, **counts):
    _check_cfg(cfg)
    for name, (value, minimum) in counts.items():
        check_int(name, value, minimum)
    check_int("batch_size", batch_size, 1)
    check_choice("bytes_per_element (int8, bf16/fp16, fp32, fp64)", bytes_per_element, BYTES_PER_ELEMENT)


def matmul_parameters(cfg: ModelConfig) -> int:
    """Weights one token multiplies by: attention and FFN projections of every layer, plus the LM head.

    For a mixture of experts only the experts_per_token active experts (and the router) count.
    """
    _check_cfg(cfg)
    d, hs = cfg.d_model, cfg.head_dim
    attn = d * cfg.n_heads * hs * 2 + d * cfg.kv_heads * hs * 2  # q and o; k and v (fewer with GQA)
    if cfg.ffn in ("gelu", "relu"):
        ffn = 2 * d * cfg.ffn_dim
    elif cfg.ffn == "swiglu":
        ffn = 3 * d * cfg.ffn_dim
    else:
        ffn = cfg.experts_per_token * 3 * d * cfg.ffn_dim + d * cfg.n_experts
    return cfg.n_layers * (attn + ffn) + d * cfg.vocab_size


def attention_flops(cfg: ModelConfig, n_keys: int) -> int:
    """One query token against n_keys keys, all layers: q·k^T and weights·v, 2 FLOPs per multiply-add each."""
    return 2 * 2 * cfg.n_layers * cfg.n_heads * cfg.head_dim * n_keys


def decode_cost(cfg: ModelConfig, context_len: int, *, bytes_per_element: int = 2, batch_size: int = 1) -> Cost:
    """One decode step: each of batch_size sequences adds one token after context_len cached ones.

    Reads every weight once (shared by the batch) and each sequence's cache, now context_len + 1 positions long.
    """
    _check_counts(cfg, bytes_per_element, batch_size, context_len=(context_len, 0))
    n_keys = context_len + 1
    flops = batch_size * (2 * matmul_parameters(cfg) + attention_flops(cfg, n_keys))
    moved = matmul_parameters(cfg) * bytes_per_element + kv_cache_bytes(
        cfg, n_keys, bytes_per_element=bytes_per_element, batch_size=batch_size)
    return Cost(flops, moved)


def prefill_cost(cfg: ModelConfig, prompt_len: int, *, bytes_per_element: int = 2, batch_size: int = 1) -> Cost:
    """The whole prompt at once, as `prefill` runs it: every block at every position (causal: token t sees t
    keys), the LM head at the last position only (the next token needs no other logits). Every weight is read
    once for all tokens; the cache is written once."""
    _check_counts(cfg, bytes_per_element, batch_size, prompt_len=(prompt_len, 1))
    keys_seen = prompt_len * (prompt_len + 1) // 2  # 1 + 2 + ... + prompt_len
    head = cfg.d_model * cfg.vocab_size
    flops = batch_size * (2 * (matmul_parameters(cfg) - head) * prompt_len + 2 * head
                          + attention_flops(cfg, 1) * keys_seen)
    moved = matmul_parameters(cfg) * bytes_per_element + kv_cache_bytes(
        cfg, prompt_len, bytes_per_element=bytes_per_element, batch_size=batch_size)
    return Cost(flops, moved)


def roofline_plot(ax, hardware: list[Hardware], points: dict[str, float], *, intensity_range=(0.1, 10_000)):
    """Log-log roofline: attainable FLOP/s vs arithmetic intensity for each chip; points = {label: intensity}
    drawn as vertical lines; each chip's ridge point marked with a dot and named in the legend (ridges of
    similar chips sit close together, where labels beside the dots would overlap)."""
    import numpy as np

    lo, hi = intensity_range
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    for chip in hardware:
        line, = ax.plot(x, np.minimum(chip.peak_flops, chip.bandwidth * x),
                        label=f"{chip.name}: ridge {chip.ridge:.0f} FLOP/B")
        ax.plot([chip.ridge], [chip.peak_flops], "o", color=line.get_color())
    for i, (label, intensity) in enumerate(points.items()):
        ax.axvline(intensity, color=f"C{len(hardware) + i}", linestyle="--", label=f"{label}: {intensity:.3g} FLOP/B")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # below, clear of the lines
