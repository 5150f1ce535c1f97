"""The cost card's worked numbers (book/cost_card.md): what a token costs GPT-2 small and a Llama-3-8B-shaped
model, from the cost model in roofline.py. The page holds the tables this module prints (the inputs: the two
models' sizes and the H100's figures; then the worked numbers); a test compares them.

Units as chapter 8 prints them: bytes moved and memory in MB and GB (10^6, 10^9 bytes), cache sizes in KiB
and GiB (2^10, 2^30 bytes).

Usage: python -m transformer_steps.course.cost_card [zh]   (the inputs' tables, then the worked numbers)
"""

from __future__ import annotations

import sys

from ..config import ModelConfig
from ..kv_cache import kv_cache_bytes
from .roofline import H100_SXM, decode_cost, matmul_parameters, prefill_cost

# bf16 weights and cache, as served on a GPU
BYTES = 2
BATCH = 32
# chapter 8's sequences-that-fit: one 80 GB GPU, 4k tokens per sequence
MEMORY_GB, FIT_CONTEXT = 80, 4096
# chapter 6's mixture of experts: 8 experts, each as wide as the dense FFN, 2 per token
EXPERTS, TOP_K = 8, 2
MODELS = {
    "GPT-2 small, 1,024 tokens": (ModelConfig.preset("gpt2-small"), 1024),
    # Grattafiori et al., 2024: 32 layers, 32 query heads and 8 key/value heads of 128, SwiGLU of 14,336
    "Llama-3-8B shape, 8,192 tokens": (
        ModelConfig(vocab_size=128256, max_seq_len=131072, d_model=4096, n_layers=32, n_heads=32,
                    n_kv_heads=8, d_ff=14336, norm="rmsnorm", ffn="swiglu", pos="rope", bias=False,
                    tie_embeddings=False), 8192),
}
ROWS = {
    "en": ["parameters in matrix products, $P$", "GQA factor, query heads per key/value head",
           "decode FLOPs per token, $F$", "prefill FLOPs of the context", "KV cache per token",
           "KV cache of the context, $C$", "bytes a decode step reads, batch 1", "decode intensity, batch 1",
           "H100 tokens/s bound, batch 1", f"decode intensity, batch {BATCH}",
           f"H100 tokens/s bound, batch {BATCH}, all {BATCH} sequences",
           f"H100 tokens/s bound, batch {BATCH}, per sequence", "decode intensity as the batch grows, $F / C$",
           "prefill intensity of the context (weights and cache, no activations)",
           f"sequences whose caches of {FIT_CONTEXT:,} tokens fit beside the weights in {MEMORY_GB} GB",
           "the same, with a key/value head per query head",
           f"MoE, top {TOP_K} of {EXPERTS} full-size experts: FFN parameters stored / active, in dense FFNs"],
    "zh": ["矩阵乘法中的参数 $P$", "GQA 倍数（共享一个 key/value 头的 query 头数）", "decode 每个 token 的 FLOPs，$F$",
           "整段上下文 prefill 的 FLOPs", "每个 token 的 KV cache", "整段上下文的 KV cache，$C$",
           "batch 为 1 时一个 decode 步读取的字节数", "batch 为 1 时 decode 的算术强度",
           "batch 为 1 时 H100 的 tokens/s 上限", f"batch 为 {BATCH} 时 decode 的算术强度",
           f"batch 为 {BATCH} 时 H100 的 tokens/s 上限，{BATCH} 条序列合计",
           f"batch 为 {BATCH} 时 H100 的 tokens/s 上限，每条序列", "batch 不断增大时 decode 算术强度的极限 $F / C$",
           "整段上下文 prefill 的算术强度（只计权重和 cache，不计激活）",
           f"{MEMORY_GB} GB 显存装下权重后还能容纳的序列数（每条的 KV cache 为 {FIT_CONTEXT:,} 个 token）",
           "同上，但每个 query 头各配一个 key/value 头",
           f"MoE，{EXPERTS} 个全尺寸专家中选 {TOP_K} 个：FFN 参数的存储量 / 每个 token 用到的量（以稠密 FFN 计）"],
}
# the inputs: each model's sizes (as the formulas name them) and the chip's figures
SIZE_ROWS = {
    "en": ["blocks, $L$", "width, $d$", "query heads, $n_h$", "key/value heads, $n_{kv}$", "head size, $d_h$",
           "FFN width, $d_{ff}$", "FFN", "vocabulary, $V$", "LM head tied to the input embedding",
           "bytes per number, $b$ (bf16)"],
    "zh": ["block 数 $L$", "宽度 $d$", "query 头数 $n_h$", "key/value 头数 $n_{kv}$", "每个头的大小 $d_h$",
           "FFN 宽度 $d_{ff}$", "FFN 类型", "词表大小 $V$", "输出头与输入嵌入共用矩阵（weight tying）",
           "每个数的字节数 $b$（bf16）"],
}
YES_NO = {"en": ("yes", "no"), "zh": ("是", "否")}
SIZES_HEADER = {"en": "| size | GPT-2 small | Llama-3-8B shape |", "zh": "| 尺寸 | GPT-2 small | Llama-3-8B 形状 |"}
CHIP_ROWS = {"en": ["peak, bf16 dense", "memory bandwidth", "ridge, peak / bandwidth"],
             "zh": ["峰值算力（bf16，稠密）", "显存带宽", "屋脊点 = 峰值 / 带宽"]}
CHIP_HEADER = {"en": "| H100 SXM, data sheet | value |", "zh": "| H100 SXM，数据手册 | 数值 |"}
HEADER = {"en": "| what | GPT-2 small, 1,024 tokens | Llama-3-8B shape, 8,192 tokens |",
          "zh": "| 项目 | GPT-2 small，1,024 个 token | Llama-3-8B 形状，8,192 个 token |"}


def decimal_bytes(n: float) -> str:
    """Bytes moved, as chapter 8 prints them: MB below a GB, GB above."""
    return f"{n / 1e6:.1f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def sequences_that_fit(cfg: ModelConfig) -> int:
    """Chapter 8's count: caches of FIT_CONTEXT tokens in the memory the bf16 weights leave free (the matmul
    weights and the input embedding, which a tied LM head already counts)."""
    weights = BYTES * (matmul_parameters(cfg) + (0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model))
    return int((MEMORY_GB * 1e9 - weights) // kv_cache_bytes(cfg, FIT_CONTEXT, bytes_per_element=BYTES))


def moe_over_dense(cfg: ModelConfig) -> tuple[float, float]:
    """Chapter 6's mixture of experts, per block: parameters stored and active per token, in dense FFNs.
    Each expert is the model's FFN; the router is a d x EXPERTS matrix that every token uses."""
    dense = (3 if cfg.ffn == "swiglu" else 2) * cfg.d_model * cfg.ffn_dim
    router = cfg.d_model * EXPERTS
    return (router + EXPERTS * dense) / dense, (router + TOP_K * dense) / dense


def worked_numbers(cfg: ModelConfig, context: int) -> list[str]:
    """One column of the card: each row's value for a model at a context length, as printed."""
    # the context's last token: context - 1 cached, as chapter 8 counts it
    one = decode_cost(cfg, context - 1, bytes_per_element=BYTES)
    many = decode_cost(cfg, context - 1, bytes_per_element=BYTES, batch_size=BATCH)
    cache = kv_cache_bytes(cfg, context, bytes_per_element=BYTES)
    prefill = prefill_cost(cfg, context, bytes_per_element=BYTES)
    stored, active = moe_over_dense(cfg)
    return [
        f"{matmul_parameters(cfg) / 1e9:.3f} B",
        f"{cfg.n_heads} / {cfg.kv_heads} = {cfg.n_heads // cfg.kv_heads}",
        f"{one.flops / 1e9:.3f} GFLOP",
        f"{prefill.flops / 1e12:.3f} TFLOP",
        f"{kv_cache_bytes(cfg, 1, bytes_per_element=BYTES) / 2**10:.1f} KiB",
        f"{cache / 2**30:.3f} GiB",
        decimal_bytes(one.bytes),
        f"{one.intensity:.2f} FLOP/byte",
        f"{1 / H100_SXM.seconds(one):,.0f}",
        f"{many.intensity:.2f} FLOP/byte",
        f"{BATCH / H100_SXM.seconds(many):,.0f}",
        f"{1 / H100_SXM.seconds(many):,.0f}",
        f"{one.flops / cache:.2f} FLOP/byte",
        f"{prefill.intensity:,.1f} FLOP/byte",
        f"{sequences_that_fit(cfg):,}",
        f"{sequences_that_fit(cfg.replace(n_kv_heads=cfg.n_heads)):,}",
        f"{stored:.2f} / {active:.2f}",
    ]


def sizes(cfg: ModelConfig, lang: str = "en") -> list[str]:
    """One column of the sizes table: the model's shape as the formulas use it, and the bytes per number."""
    yes, no = YES_NO[lang]
    return [f"{cfg.n_layers:,}", f"{cfg.d_model:,}", f"{cfg.n_heads:,}", f"{cfg.kv_heads:,}", f"{cfg.head_dim:,}",
            f"{cfg.ffn_dim:,}", "SwiGLU" if cfg.ffn == "swiglu" else cfg.ffn.upper(), f"{cfg.vocab_size:,}",
            yes if cfg.tie_embeddings else no, f"{BYTES}"]


def inputs(lang: str = "en") -> str:
    """The card's inputs in Markdown: the two models' sizes, then the H100 figures the bounds use."""
    columns = [sizes(cfg, lang) for cfg, _ in MODELS.values()]
    lines = [SIZES_HEADER[lang], "|---|---:|---:|"]
    lines += [f"| {name} | {a} | {b} |" for name, a, b in zip(SIZE_ROWS[lang], *columns)]
    chip = [f"{H100_SXM.peak_flops / 1e12:,.0f} TFLOP/s", f"{H100_SXM.bandwidth / 1e12:.2f} TB/s",
            f"{H100_SXM.ridge:,.0f} FLOP/byte"]
    lines += ["", CHIP_HEADER[lang], "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in zip(CHIP_ROWS[lang], chip)]
    return "\n".join(lines)


def table(lang: str = "en") -> str:
    """The card's worked-numbers table in Markdown, with row names in English or Chinese."""
    columns = [worked_numbers(cfg, context) for cfg, context in MODELS.values()]
    lines = [HEADER[lang], "|---|---:|---:|"]
    lines += [f"| {name} | {a} | {b} |" for name, a, b in zip(ROWS[lang], *columns)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(inputs(*sys.argv[1:2]), table(*sys.argv[1:2]), sep="\n\n")
