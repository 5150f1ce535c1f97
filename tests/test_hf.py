"""from_hf against random-weight transformers models: same logits, same greedy ids, clear errors."""

import copy
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from conftest import perturb
from transformer_steps import TransformerLM, from_hf, generate
from transformer_steps.positions import rope_cos_sin

NO_SPECIAL_TOKENS = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}  # never stop early


def tiny_gpt2(**overrides):
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300, n_positions=128,
                                  **{**NO_SPECIAL_TOKENS, **overrides})
    torch.manual_seed(0)
    return perturb(transformers.GPT2LMHeadModel(cfg), seed=0, scale=0.05).eval()


def tiny_llama(**overrides):
    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=160, num_hidden_layers=2, vocab_size=300,
                                   max_position_embeddings=128,
                                   **{"tie_word_embeddings": False,
                                      "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0},
                                      **NO_SPECIAL_TOKENS, **overrides})
    torch.manual_seed(0)
    return perturb(transformers.LlamaForCausalLM(cfg), seed=0, scale=0.05).eval()


MODELS = {"gpt2": tiny_gpt2, "llama-gqa": tiny_llama}


@pytest.fixture(params=sorted(MODELS))
def pair(request):
    hf_model = MODELS[request.param]()
    return hf_model, from_hf(hf_model)


def test_config_mapping():
    gpt2, llama = from_hf(tiny_gpt2()), from_hf(tiny_llama())
    assert (gpt2.cfg.pos, gpt2.cfg.norm, gpt2.cfg.ffn, gpt2.cfg.tie_embeddings) == ("learned", "layernorm", "gelu",
                                                                                     True)
    assert gpt2.lm_head.weight is gpt2.tok_emb.weight
    assert (llama.cfg.pos, llama.cfg.norm, llama.cfg.ffn, llama.cfg.kv_heads) == ("rope", "rmsnorm", "swiglu", 2)
    assert llama.cfg.rope_base == 5000.0 and llama.cfg.norm_eps == 1e-6 and llama.cfg.ffn_dim == 160
    assert not llama.cfg.tie_embeddings and llama.lm_head.weight is not llama.tok_emb.weight
    assert not gpt2.training and not llama.training


# every field from_hf maps, each away from transformers' default (the tiny sizes already are: vocabulary 300,
# 128 positions, width 64, 2 layers, 4 heads; Llama's 2 kv heads, d_ff 160, rope_theta 5000)
NON_DEFAULT = {"gpt2": {"n_inner": 96, "layer_norm_epsilon": 1e-3, "activation_function": "gelu_pytorch_tanh"},
               "llama-gqa": {"rms_norm_eps": 1e-3}}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_mapped_field_is_read_from_the_config(name):
    hf_model = MODELS[name](**NON_DEFAULT[name])
    c, model = hf_model.config, from_hf(hf_model)
    eps = c.layer_norm_epsilon if name == "gpt2" else c.rms_norm_eps
    ffn_dim = c.n_inner if name == "gpt2" else c.intermediate_size
    kv_heads = c.num_attention_heads if name == "gpt2" else c.num_key_value_heads
    assert (model.cfg.vocab_size, model.cfg.max_seq_len, model.cfg.d_model, model.cfg.n_layers, model.cfg.n_heads,
            model.cfg.kv_heads, model.cfg.ffn_dim, model.cfg.norm_eps) == (
        c.vocab_size, c.max_position_embeddings, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
        kv_heads, ffn_dim, eps)
    assert all(m.eps == eps for m in model.modules() if hasattr(m, "eps"))
    # eps 1e-3 is visible in the logits: the residual stream's variance is not far above it
    idx = torch.randint(0, 300, (1, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf_model(idx).logits, atol=1e-4, rtol=0)


def test_logits_match(pair):
    hf_model, model = pair
    idx = torch.randint(0, 300, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf_model(idx).logits
        got = model(idx)
    assert expected.abs().max() > 0.1  # the comparison is not between two near-zero tensors
    assert (got - expected).abs().max().item() <= 1e-4


def test_greedy_ids_match_hf_generate(pair):
    hf_model, model = pair
    idx = torch.randint(0, 300, (2, 7), generator=torch.Generator().manual_seed(2))
    expected = hf_model.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=20, do_sample=False)
    cached = generate(model, idx, 20, temperature=0.0)
    naive = generate(model, idx, 20, temperature=0.0, use_cache=False)
    assert expected.shape == (2, 27)
    assert torch.equal(cached, expected)
    assert torch.equal(naive, cached)


def test_tied_llama_and_untied_gpt2():
    llama = tiny_llama(tie_word_embeddings=True)
    model = from_hf(llama)
    assert model.cfg.tie_embeddings and model.lm_head.weight is model.tok_emb.weight
    gpt2 = tiny_gpt2(tie_word_embeddings=False)
    model = from_hf(gpt2)
    assert not model.cfg.tie_embeddings
    idx = torch.arange(10)[None]
    for hf_model, ours in ((llama, from_hf(llama)), (gpt2, model)):
        with torch.no_grad():
            torch.testing.assert_close(ours(idx), hf_model(idx).logits, atol=1e-4, rtol=0)


def test_llama_with_biases():
    hf_model = tiny_llama(attention_bias=True, mlp_bias=True)
    model = from_hf(hf_model)
    assert model.cfg.bias
    idx = torch.arange(12)[None]
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf_model(idx).logits, atol=1e-4, rtol=0)


def test_keeps_dtype_and_bf16_rope_tables_give_the_bits_of_float32_ones():
    hf_model = tiny_llama().to(torch.bfloat16)
    model = from_hf(hf_model)
    assert model.tok_emb.weight.dtype == torch.bfloat16 and model.blocks[0].attn.qkv.weight.dtype == torch.bfloat16
    assert model.rope_cos.dtype == torch.bfloat16
    idx = torch.arange(10)[None]
    float32_tables = copy.deepcopy(model)  # HF keeps its tables in float32 and casts them at every call
    float32_tables.rope_cos, float32_tables.rope_sin = rope_cos_sin(torch.arange(model.cfg.max_seq_len),
                                                                    model.cfg.head_dim, model.cfg.rope_base)
    with torch.no_grad():  # RoPE runs in bf16 either way, as in HF
        ours, theirs = model(idx), hf_model(idx).logits
        assert torch.equal(ours, float32_tables(idx))
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), theirs.float(), atol=0.05 * theirs.abs().max().item(), rtol=0)
    assert generate(model, idx, 4, temperature=0.0).shape == (1, 14)  # the cached decode path in bf16 too


def test_llama_rope_read_from_a_transformers_4_config():
    """transformers 4.x kept RoPE in rope_theta and rope_scaling (5.x: rope_parameters)."""
    from types import SimpleNamespace

    from transformer_steps.hf import _llama_rope

    assert _llama_rope(SimpleNamespace(rope_theta=5000.0, rope_scaling=None))[:2] == ("default", 5000.0)
    scaled = SimpleNamespace(rope_theta=5000.0, rope_scaling={"type": "linear", "factor": 2.0})
    assert _llama_rope(scaled)[:2] == ("linear", 5000.0)


@pytest.mark.parametrize("make, match", [
    (lambda: tiny_gpt2(activation_function="relu"), "activation_function"),
    (lambda: tiny_gpt2(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
    (lambda: tiny_gpt2(reorder_and_upcast_attn=True), "reorder_and_upcast_attn"),
    (lambda: tiny_gpt2(scale_attn_weights=False), "scale_attn_weights"),
    (lambda: tiny_gpt2(add_cross_attention=True), "add_cross_attention=True is not supported"),
    (lambda: tiny_llama(hidden_act="gelu"), "hidden_act"),
    (lambda: tiny_llama(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}), "linear"),
    (lambda: tiny_llama(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
     "partial_rotary_factor 0.5 is not supported; allowed: 1.0"),
    (lambda: tiny_llama(head_dim=32), "head_dim"),
    (lambda: tiny_llama(attention_bias=True), "mlp_bias"),
])
def test_unsupported_settings_raise(make, match):
    with pytest.raises(ValueError, match=match):
        from_hf(make())


@pytest.mark.parametrize("thing", [
    "gpt2",
    torch.nn.Linear(2, 2),
    transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, **NO_SPECIAL_TOKENS)),
])
def test_unsupported_models_raise(thing):
    with pytest.raises(TypeError, match="GPT2LMHeadModel or LlamaForCausalLM"):
        from_hf(thing)


@pytest.mark.parametrize("damage, match", [
    (lambda state: state.pop("norm_f.weight"), r"weight mapping mismatch: missing \['norm_f.weight'\]"),
    (lambda state: state.update(extra=state["norm_f.weight"]), r"unexpected \['extra'\]"),
    (lambda state: state["blocks.0.attn.qkv.weight"].pop(), r"blocks.0.attn.qkv.weight: the parts fill 96 of 128 rows"),
    (lambda state: state["blocks.0.attn.qkv.weight"].append(state["blocks.0.attn.qkv.weight"][0]),
     r"cannot place a \(64, 64\) part in \(128, 64\)"),
])
def test_a_broken_weight_mapping_is_an_error_not_a_half_filled_model(monkeypatch, damage, match):
    from transformer_steps import hf

    real = hf._llama_state

    def broken(m):
        state = real(m)
        damage(state)
        return state

    monkeypatch.setattr(hf, "_llama_state", broken)
    with pytest.raises(ValueError, match=match):
        from_hf(tiny_llama())


def test_result_is_an_eval_mode_transformer_lm_with_their_shape_and_parameter_count(pair):
    hf_model, model = pair
    assert isinstance(model, TransformerLM) and not model.training
    hf_cfg = hf_model.config
    assert (model.cfg.vocab_size, model.cfg.d_model, model.cfg.n_layers, model.cfg.n_heads) == (
        hf_cfg.vocab_size, hf_cfg.hidden_size, hf_cfg.num_hidden_layers, hf_cfg.num_attention_heads)
    assert model.num_parameters() == hf_model.num_parameters()  # every weight mapped once, none invented
