"""ModelConfig: resolved sizes, presets, replace, and every impossible configuration rejected by name."""

import dataclasses
import math

import pytest

from transformer_steps import PRESETS, ModelConfig
from transformer_steps.config import ATTN_IMPLS, FFNS, NORM_POSITIONS, NORMS, POSITIONS

TINY = {"vocab_size": 11, "max_seq_len": 8, "d_model": 16, "n_layers": 1, "n_heads": 4}


def cfg(**changes):
    return ModelConfig(**{**TINY, **changes})


def test_resolved_sizes():
    c = cfg()
    assert (c.head_dim, c.kv_heads, c.ffn_dim) == (4, 4, 64)
    assert cfg(n_kv_heads=2).kv_heads == 2
    assert cfg(d_ff=24).ffn_dim == 24
    # SwiGLU / MoE: 8/3 * d rounded up to a multiple of 8 (16 * 8 / 3 = 42.7 -> 48)
    assert cfg(ffn="swiglu").ffn_dim == 48
    assert cfg(ffn="moe").ffn_dim == 48
    assert cfg(d_model=24, ffn="swiglu").ffn_dim == 64  # exactly 8/3 * 24, already a multiple of 8


def test_presets_build_and_accept_overrides():
    assert set(PRESETS) >= {"gpt2-small", "llama-tiny", "char-tiny"}
    for name in PRESETS:
        assert ModelConfig.preset(name).d_model == PRESETS[name]["d_model"]
    gpt2 = ModelConfig.preset("gpt2-small")
    assert (gpt2.vocab_size, gpt2.n_layers, gpt2.n_heads, gpt2.d_model, gpt2.ffn_dim) == (50257, 12, 12, 768, 3072)
    llama = ModelConfig.preset("llama-tiny", n_layers=1)
    assert (llama.n_layers, llama.kv_heads, llama.pos, llama.tie_embeddings) == (1, 2, "rope", False)
    with pytest.raises(ValueError, match=r"unknown preset 'gpt5'.*char-tiny.*gpt2-small.*llama-tiny"):
        ModelConfig.preset("gpt5")
    with pytest.raises(ValueError, match="n_heads"):
        ModelConfig.preset("llama-tiny", n_heads=3)  # overrides are validated too


def test_config_is_frozen_and_replace_validates():
    c = cfg()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 32
    r = c.replace(norm="rmsnorm")
    assert (r.norm, c.norm) == ("rmsnorm", "layernorm")
    with pytest.raises(ValueError, match="n_heads"):
        c.replace(n_heads=5)


@pytest.mark.parametrize("name", ["vocab_size", "max_seq_len", "d_model", "n_layers", "n_heads", "n_kv_heads",
                                  "d_ff", "n_experts", "experts_per_token"])
@pytest.mark.parametrize("bad", [0, -3])
def test_non_positive_sizes_rejected(name, bad):
    with pytest.raises(ValueError, match=rf"{name} must be >= 1, got {bad}"):
        cfg(**{name: bad})


@pytest.mark.parametrize("name", ["vocab_size", "max_seq_len", "d_model", "n_layers", "n_heads", "n_kv_heads",
                                  "d_ff", "n_experts", "experts_per_token"])
@pytest.mark.parametrize("bad", [16.0, "16", True])
def test_non_int_sizes_rejected(name, bad):
    with pytest.raises(TypeError, match=rf"{name} must be an int, got {type(bad).__name__}"):
        cfg(**{name: bad})


@pytest.mark.parametrize(("field", "allowed"), [("norm", NORMS), ("norm_position", NORM_POSITIONS),
                                                 ("ffn", FFNS), ("pos", POSITIONS),
                                                 ("attn_impl", ("sdpa", "reference"))])
def test_unknown_names_list_the_allowed_values(field, allowed):
    with pytest.raises(ValueError, match=rf"unknown {field} 'bogus'; allowed: {', '.join(allowed)}"):
        cfg(**{field: "bogus"})


@pytest.mark.parametrize(("field", "allowed"), [("norm", NORMS), ("norm_position", NORM_POSITIONS),
                                                 ("ffn", FFNS), ("pos", POSITIONS), ("attn_impl", ATTN_IMPLS)])
def test_every_allowed_value_builds_a_model_that_runs(field, allowed):
    import torch

    from transformer_steps import TransformerLM

    for value in allowed:
        model = TransformerLM(cfg(**{field: value}, max_seq_len=8)).eval()
        assert model(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, model.cfg.vocab_size)


ULP = math.ulp(0.0)  # the smallest float above 0


@pytest.mark.parametrize(("valid", "invalid", "error", "message"), [
    ({"d_model": 20}, {"d_model": 18}, ValueError, r"d_model \(18\) must be divisible by n_heads \(4\)"),
    ({"n_kv_heads": 2}, {"n_kv_heads": 3}, ValueError, r"n_heads \(4\) must be divisible by n_kv_heads \(3\)"),
    ({"n_kv_heads": 4}, {"n_kv_heads": 8}, ValueError, r"n_heads \(4\) must be divisible by n_kv_heads \(8\)"),
    ({"d_model": 8, "pos": "rope"}, {"d_model": 12, "pos": "rope"}, ValueError,
     r"head_dim \(d_model / n_heads = 3\) must be even"),
    ({"d_model": 16, "n_heads": 4, "pos": "sinusoidal"}, {"d_model": 15, "n_heads": 5, "pos": "sinusoidal"},
     ValueError, r"d_model \(15\) must be even"),
    ({"ffn": "moe", "n_experts": 2, "experts_per_token": 2}, {"ffn": "moe", "n_experts": 2, "experts_per_token": 3},
     ValueError, r"experts_per_token \(3\) must be in \[1, n_experts=2\]"),
    ({"dropout": math.nextafter(1.0, 0.0)}, {"dropout": 1.0}, ValueError, r"dropout must be in \[0, 1\), got 1.0"),
    ({"dropout": 0.0}, {"dropout": -ULP}, ValueError, r"dropout must be in \[0, 1\), got -5e-324"),
    ({"dropout": 0}, {"dropout": math.nan}, ValueError, r"dropout must be in \[0, 1\), got nan"),
    ({"dropout": 0.5}, {"dropout": "0.5"}, TypeError, "dropout must be a number, got str '0.5'"),
    ({"norm_eps": ULP}, {"norm_eps": 0.0}, ValueError, "norm_eps must be > 0, got 0.0"),
    ({"norm_eps": 1}, {"norm_eps": True}, TypeError, "norm_eps must be a number, got bool True"),
    ({"rope_base": math.nextafter(1.0, 2.0)}, {"rope_base": 1.0}, ValueError, "rope_base must be > 1, got 1.0"),
    ({"moe_aux_weight": 0.0}, {"moe_aux_weight": -ULP}, ValueError, "moe_aux_weight must be >= 0, got -5e-324"),
    ({"tie_embeddings": False}, {"tie_embeddings": 1}, TypeError, "tie_embeddings must be True or False, got 1"),
    ({"bias": False}, {"bias": None}, TypeError, "bias must be True or False, got None"),
    ({"causal": False}, {"causal": "yes"}, TypeError, "causal must be True or False, got 'yes'"),
])
def test_each_check_accepts_its_last_valid_value_and_names_the_first_invalid_one(valid, invalid, error, message):
    assert all(getattr(cfg(**valid), k) == v for k, v in valid.items())
    with pytest.raises(error, match=message):
        cfg(**invalid)


@pytest.mark.parametrize("name", ["vocab_size", "max_seq_len", "d_model", "n_layers", "n_heads", "n_kv_heads",
                                  "d_ff", "n_experts", "experts_per_token"])
def test_every_size_accepts_one(name):
    one_head = {"n_heads": 1} if name in ("d_model", "n_kv_heads") else {}
    assert getattr(cfg(**{name: 1}, **one_head), name) == 1


def test_constraints_only_apply_where_they_matter():
    assert cfg(d_model=12, pos="learned").head_dim == 3  # odd head_dim needs no pairs without RoPE
    assert cfg(d_model=12, n_heads=12, pos="sinusoidal").head_dim == 1  # sinusoidal pairs d_model, not hs
    # experts_per_token only matters for MoE
    assert cfg(n_experts=2, experts_per_token=3).ffn == "gelu"
