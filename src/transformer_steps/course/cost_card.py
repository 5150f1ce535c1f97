"""The cost card's worked numbers (book/cost_card.md): what a token costs GPT-2 small and a Llama-3-8B-shaped
model, from the cost model in roofline.py. The page holds the table this module prints; a test compares them.

Usage: python -m transformer_steps.course.cost_card [zh]
"""

from __future__ import annotations

import sys

from ..config import ModelConfig
from ..kv_cache import kv_cache_bytes
from .roofline import H100_SXM, decode_cost, matmul_parameters, prefill_cost

# bf16 weights and cache, as served on a GPU
BYTES = 2
BATCH = 32
MODELS = {
    "GPT-2 small, 1,024 tokens": (ModelConfig.preset("gpt2-small"), 1024),
    # Grattafiori et al., 2024: 32 layers, 32 query heads and 8 key/value heads of 128, SwiGLU of 14,336
    "Llama-3-8B shape, 8,192 tokens": (
        ModelConfig(vocab_size=128256, max_seq_len=131072, d_model=4096, n_layers=32, n_heads=32,
                    n_kv_heads=8, d_ff=14336, norm="rmsnorm", ffn="swiglu", pos="rope", bias=False,
                    tie_embeddings=False), 8192),
}
ROWS = {
    "en": ["parameters in matrix products", "decode FLOPs per token", "prefill FLOPs of the context",
           "KV cache per token", "KV cache of the context", "bytes a decode step reads, batch 1",
           "decode intensity, batch 1", "H100 tokens/s bound, batch 1", f"decode intensity, batch {BATCH}",
           f"H100 tokens/s bound, batch {BATCH}"],
    "zh": ["矩阵乘法中的参数", "decode 每个 token 的 FLOPs", "整段上下文 prefill 的 FLOPs", "每个 token 的 KV cache",
           "整段上下文的 KV cache", "batch 为 1 时一个 decode 步读取的字节", "batch 为 1 时 decode 的算术强度",
           "batch 为 1 时 H100 的 tokens/s 上限", f"batch 为 {BATCH} 时 decode 的算术强度",
           f"batch 为 {BATCH} 时 H100 的 tokens/s 上限"],
}
HEADER = {"en": "| what | GPT-2 small, 1,024 tokens | Llama-3-8B shape, 8,192 tokens |",
          "zh": "| 项目 | GPT-2 small，1,024 个 token | Llama-3-8B 形状，8,192 个 token |"}


def worked_numbers(cfg: ModelConfig, context: int) -> list[str]:
    """One column of the card: each row's value for a model at a context length, as printed."""
    # the context's last token: context - 1 cached, as chapter 8 counts it
    one = decode_cost(cfg, context - 1, bytes_per_element=BYTES)
    many = decode_cost(cfg, context - 1, bytes_per_element=BYTES, batch_size=BATCH)
    return [
        f"{matmul_parameters(cfg) / 1e9:.3f} B",
        f"{one.flops / 1e9:.3f} GFLOP",
        f"{prefill_cost(cfg, context, bytes_per_element=BYTES).flops / 1e12:.3f} TFLOP",
        f"{kv_cache_bytes(cfg, 1, bytes_per_element=BYTES) / 2**10:.1f} KiB",
        f"{kv_cache_bytes(cfg, context, bytes_per_element=BYTES) / 2**30:.3f} GiB",
        f"{one.bytes / 2**30:.3f} GiB",
        f"{one.intensity:.2f} FLOP/byte",
        f"{1 / H100_SXM.seconds(one):,.0f}",
        f"{many.intensity:.2f} FLOP/byte",
        f"{BATCH / H100_SXM.seconds(many):,.0f}",
    ]


def table(lang: str = "en") -> str:
    """The card's worked-numbers table in Markdown, with row names in English or Chinese."""
    columns = [worked_numbers(cfg, context) for cfg, context in MODELS.values()]
    lines = [HEADER[lang], "|---|---:|---:|"]
    lines += [f"| {name} | {a} | {b} |" for name, a, b in zip(ROWS[lang], *columns)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(*sys.argv[1:2]))
