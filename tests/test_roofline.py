"""roofline.py: the formulas against the model's own tensors and torch's FLOP counter."""

import pytest
import torch
from matplotlib.figure import Figure
from torch.utils.flop_counter import FlopCounterMode

from transformer_steps import ModelConfig, TransformerLM
from transformer_steps.course.roofline import (
    EPYC_9654,
    H100_SXM,
    Cost,
    Hardware,
    attention_flops,
    decode_cost,
    kv_cache_bytes,
    matmul_parameters,
    prefill_cost,
    roofline_plot,
)
from transformer_steps.generate import decode_one_token, prefill

SMALL = ModelConfig(vocab_size=50, max_seq_len=32, d_model=32, n_layers=2, n_heads=4)
VARIANTS = {
    "gpt2-like": SMALL,
    "gqa-swiglu-untied": SMALL.replace(n_kv_heads=2, ffn="swiglu", tie_embeddings=False, bias=False),
    "relu-post": SMALL.replace(ffn="relu", norm_position="post"),
}


def linear_weights(model) -> int:
    """Every nn.Linear weight once (the tied head is the embedding: counted once, as the head)."""
    seen = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)}
    return sum(seen.values())


@pytest.mark.parametrize("cfg", VARIANTS.values(), ids=VARIANTS.keys())
def test_matmul_parameters_are_the_models_linear_weights(cfg):
    assert matmul_parameters(cfg) == linear_weights(TransformerLM(cfg))


def test_moe_counts_only_active_experts_and_router():
    cfg = SMALL.replace(ffn="moe", n_experts=4, experts_per_token=2)
    dense = matmul_parameters(cfg.replace(ffn="swiglu"))
    per_expert = 3 * cfg.d_model * cfg.ffn_dim
    assert matmul_parameters(cfg) == dense + cfg.n_layers * (per_expert + cfg.d_model * cfg.n_experts)


@pytest.mark.parametrize("cfg", VARIANTS.values(), ids=VARIANTS.keys())
def test_kv_cache_bytes_match_the_allocated_cache(cfg):
    model = TransformerLM(cfg)
    for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
        cache = model.make_cache(3, 20, dtype=dtype)
        assert kv_cache_bytes(cfg, 20, bytes_per_element=size, batch_size=3) == sum(c.k.nbytes + c.v.nbytes for c in cache)


def test_gqa_shrinks_the_cache_by_the_group_size():
    mha = SMALL.replace(n_heads=8, d_model=64)
    assert kv_cache_bytes(mha, 100) == 4 * kv_cache_bytes(mha.replace(n_kv_heads=2), 100)


@pytest.mark.parametrize("cfg", VARIANTS.values(), ids=VARIANTS.keys())
def test_decode_flops_match_torch_flop_counter(cfg):
    model = TransformerLM(cfg.replace(attn_impl="reference")).eval()
    # a cache of 11 positions: the step attends to all of them, the 10 of the prompt and its own
    cache = model.make_cache(1, 11)
    with torch.no_grad():
        prefill(model, torch.arange(10)[None] % cfg.vocab_size, cache)
        with FlopCounterMode(display=False) as counter:
            decode_one_token(model, torch.tensor([[3]]), 10, cache)
    assert decode_cost(cfg, 10).flops == counter.get_total_flops()


@pytest.mark.parametrize("preset", ["gpt2-small", "llama-tiny"])
def test_prefill_matmul_flops_match_torch_flop_counter(preset):
    # GPT-2- and Llama-shaped (2 layers, to stay quick); FlopCounterMode does not count CPU SDPA, so the
    # attention part of the formula is taken out and only the matmuls are compared
    cfg = ModelConfig.preset(preset, n_layers=2)
    prompt_len = 48
    with torch.device("cpu"):
        model = TransformerLM(cfg).eval()
    ids = torch.arange(prompt_len)[None] % cfg.vocab_size
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        prefill(model, ids, model.make_cache(1, prompt_len))
    attention = attention_flops(cfg, 1) * prompt_len * (prompt_len + 1) // 2
    assert prefill_cost(cfg, prompt_len).flops - attention == counter.get_total_flops()


def test_prefill_flops_are_the_decode_steps_without_their_heads_and_bytes_read_weights_once():
    cfg = VARIANTS["gqa-swiglu-untied"]
    steps = [decode_cost(cfg, t) for t in range(12)]
    whole = prefill_cost(cfg, 12)
    head = 2 * cfg.d_model * cfg.vocab_size  # every decode step runs the head; a prefill only at its last token
    assert whole.flops == sum(s.flops for s in steps) - 11 * head
    assert whole.bytes == matmul_parameters(cfg) * 2 + kv_cache_bytes(cfg, 12)
    assert whole.intensity > 10 * steps[-1].intensity


def test_batching_decode_raises_intensity():
    cfg = ModelConfig.preset("gpt2-small")
    one, many = decode_cost(cfg, 100), decode_cost(cfg, 100, batch_size=64)
    assert many.flops == 64 * one.flops
    assert many.intensity > 30 * one.intensity


def test_hardware_roofline():
    assert H100_SXM.ridge == pytest.approx(989e12 / 3.35e12)
    assert EPYC_9654.peak_flops == pytest.approx(96 * 2.4e9 * 32)
    assert EPYC_9654.bandwidth == pytest.approx(12 * 4800e6 * 8)
    assert H100_SXM.attainable_flops(1.0) == pytest.approx(3.35e12)
    assert H100_SXM.attainable_flops(1e4) == 989e12
    assert H100_SXM.seconds(Cost(flops=989e12, bytes=1.0)) == pytest.approx(1.0)
    assert H100_SXM.seconds(Cost(flops=1.0, bytes=3.35e12)) == pytest.approx(1.0)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="bytes_per_element"):
        kv_cache_bytes(SMALL, 10, bytes_per_element=3)
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(SMALL, -1)
    with pytest.raises(ValueError, match="prompt_len"):
        prefill_cost(SMALL, 0)
    with pytest.raises(ValueError, match="batch_size"):
        decode_cost(SMALL, 5, batch_size=0)
    with pytest.raises(TypeError, match="ModelConfig"):
        matmul_parameters({"d_model": 4})
    with pytest.raises(ValueError, match="intensity"):
        H100_SXM.attainable_flops(0.0)
    with pytest.raises(ValueError, match="peak_flops"):
        Hardware("broken", 0.0, 1.0)


def test_roofline_plot_draws_one_roof_per_chip_and_one_line_per_point():
    ax = Figure().add_subplot()
    roofline_plot(ax, [H100_SXM, EPYC_9654], {"decode": 1.0, "prefill": 500.0})
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == [f"{H100_SXM.name}: ridge {H100_SXM.ridge:.0f} FLOP/B",
                          f"{EPYC_9654.name}: ridge {EPYC_9654.ridge:.0f} FLOP/B"]
    assert labels[2].startswith("decode") and not ax.texts  # the ridges are named in the legend only
