"""Attention: the reference function against torch's SDPA, the causal mask for t_q != t_k, and the module's
two paths (SDPA and reference) against each other and against a per-head loop written out by hand."""

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import randn
from transformer_steps import CausalSelfAttention, KVCache, ModelConfig, attention, causal_mask
from transformer_steps.positions import apply_rope, rope_cos_sin


def brute_force_causal_mask(t_q, t_k):
    """Query i is the token at absolute position t_k - t_q + i; it may see keys at positions <= its own."""
    return torch.tensor([[j <= t_k - t_q + i for j in range(t_k)] for i in range(t_q)])


@pytest.mark.parametrize(("t_q", "t_k"), [(1, 1), (5, 5), (1, 7), (3, 7), (6, 7)])
def test_causal_mask_matches_brute_force(t_q, t_k):
    mask = causal_mask(t_q, t_k)
    assert mask.dtype == torch.bool and mask.shape == (t_q, t_k)
    assert torch.equal(mask, brute_force_causal_mask(t_q, t_k))


def test_causal_mask_decode_step_sees_everything_and_square_is_lower_triangular():
    assert causal_mask(1, 9).all()
    assert torch.equal(causal_mask(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())
    # chunked prefill: the last 2 of 5 positions; SDPA's is_causal would wrongly align them top-left
    assert torch.equal(causal_mask(2, 5), torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool))


def test_causal_mask_rejects_more_queries_than_keys():
    with pytest.raises(ValueError, match=r"more queries \(4\) than keys \(3\)"):
        causal_mask(4, 3)


@pytest.mark.parametrize("masked", [False, True])
def test_reference_attention_matches_sdpa(masked):
    q, k, v = randn(2, 3, 5, 8, seed=1), randn(2, 3, 7, 8, seed=2), randn(2, 3, 7, 6, seed=3)
    mask = causal_mask(5, 7) if masked else None
    out, weights = attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert weights.shape == (2, 3, 5, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    assert (weights >= 0).all()
    if masked:
        assert (weights[..., ~mask] == 0).all()


def test_reference_attention_by_hand_and_custom_scale():
    q, k, v = randn(4, 3, seed=4), randn(6, 3, seed=5), randn(6, 2, seed=6)
    scores = torch.tensor([[sum(q[i, c] * k[j, c] for c in range(3)) / math.sqrt(3) for j in range(6)]
                           for i in range(4)])
    want = torch.softmax(scores, dim=-1)
    out, weights = attention(q, k, v)
    torch.testing.assert_close(weights, want)
    torch.testing.assert_close(out, want @ v)
    out2, _ = attention(q, k, v, scale=0.5)
    torch.testing.assert_close(out2, F.scaled_dot_product_attention(q, k, v, scale=0.5))


def test_bf16_attention_weights_are_a_float32_softmax_rounded_once():
    """bf16 q, k, v: the weights equal a float64 softmax of the same bf16 scores, rounded to bf16 once."""
    q, k, v = (randn(2, 3, 16, 8, seed=s).bfloat16() for s in (30, 31, 32))
    out, weights = attention(q, k, v, causal_mask(16, 16))
    scores = (q @ k.transpose(-2, -1)) * 8 ** -0.5  # bf16, as attention computes them
    want = torch.softmax(scores.double().masked_fill(~causal_mask(16, 16), -math.inf), dim=-1).bfloat16()
    assert weights.dtype == out.dtype == torch.bfloat16 and torch.equal(weights, want)


def test_reference_attention_broadcasts_a_per_batch_mask():
    q, k, v = randn(2, 1, 3, 4, seed=7), randn(2, 1, 3, 4, seed=8), randn(2, 1, 3, 4, seed=9)
    mask = torch.tensor([[True, True, False], [True, False, False]])[:, None, None, :]  # (B, 1, 1, Tk) padding
    out, weights = attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (weights[0, ..., 2] == 0).all() and (weights[1, ..., 1:] == 0).all()


def test_reference_attention_bad_inputs():
    q, k, v = randn(3, 4), randn(5, 4), randn(5, 2)
    with pytest.raises(ValueError, match=r"same last dimension \(d_k\), got 4 and 3"):
        attention(q, randn(5, 3), v)
    with pytest.raises(ValueError, match="same length T_k, got 5 and 6"):
        attention(q, k, randn(6, 2))
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        attention(q, k, v, torch.ones(3, 5))


def rows_of_the_causal_table(input_pos, max_len):
    """The mask TransformerLM passes with a cache: query at position p sees slots 0..p of the whole cache."""
    return torch.arange(max_len)[None, :] <= input_pos[:, None]


def make_attn(impl="sdpa", n_kv_heads=None, causal=True, seed=0, bias=True):
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=11, max_seq_len=16, d_model=24, n_layers=1, n_heads=4, n_kv_heads=n_kv_heads,
                      attn_impl=impl, causal=causal, bias=bias)
    module = CausalSelfAttention(cfg).eval()
    with torch.no_grad():  # biases are zero at init: make them matter
        for p in module.parameters():
            p.copy_(randn(*p.shape, seed=seed + p.numel()) * 0.3)
    return cfg, module


def projections(module, x):
    """x W_Q + b_Q, x W_K + b_K, x W_V + b_V from the fused qkv matrix: its rows are W_Q^T, then W_K^T, then W_V^T."""
    nh, nkv, hs = module.n_heads, module.n_kv_heads, module.head_dim
    sizes = (nh * hs, nkv * hs, nkv * hs)
    weights = module.qkv.weight.split(sizes)
    biases = (0, 0, 0) if module.qkv.bias is None else module.qkv.bias.split(sizes)
    return [x @ w.T + b for w, b in zip(weights, biases)]


def by_hand(module, x, causal):
    """Each query head h reads kv head h // (n_heads / n_kv_heads); one softmax row per query."""
    B, T, _ = x.shape
    nh, nkv, hs = module.n_heads, module.n_kv_heads, module.head_dim
    q, k, v = projections(module, x)
    q, k, v = q.view(B, T, nh, hs), k.view(B, T, nkv, hs), v.view(B, T, nkv, hs)
    heads = torch.zeros(B, T, nh, hs)
    for b in range(B):
        for h in range(nh):
            g = h // (nh // nkv)
            for i in range(T):
                seen = range(i + 1) if causal else range(T)
                scores = torch.stack([q[b, i, h] @ k[b, j, g] / math.sqrt(hs) for j in seen])
                heads[b, i, h] = torch.softmax(scores, 0) @ v[b, list(seen), g]
    return module.o_proj(heads.reshape(B, T, nh * hs))


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("causal", [True, False])
def test_module_paths_agree_with_each_other_and_by_hand(n_kv_heads, causal):
    _, fast = make_attn("sdpa", n_kv_heads, causal)
    _, ref = make_attn("reference", n_kv_heads, causal)
    x = randn(2, 5, 24, seed=10)
    with torch.no_grad():
        y_fast, y_ref = fast(x), ref(x)
        torch.testing.assert_close(y_fast, y_ref)
        torch.testing.assert_close(y_ref, by_hand(ref, x, causal))


@pytest.mark.parametrize("causal", [True, False])
def test_future_tokens_matter_only_without_the_causal_mask(causal):
    _, module = make_attn(causal=causal)
    x = randn(1, 6, 24, seed=11)
    x2 = x.clone()
    x2[:, 4] += 1.0
    with torch.no_grad():
        y, y2 = module(x), module(x2)
    assert torch.allclose(y[:, :4], y2[:, :4], atol=1e-6) == causal
    assert not torch.allclose(y[:, 4:], y2[:, 4:])


@pytest.mark.parametrize("impl", ["sdpa", "reference"])
def test_need_weights_returns_rows_that_sum_to_one(impl):
    _, module = make_attn(impl, n_kv_heads=2)
    x = randn(2, 5, 24, seed=12)
    with torch.no_grad():
        y, weights = module(x, need_weights=True)
        torch.testing.assert_close(y, module(x))
    assert weights.shape == (2, 4, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5))
    assert (weights[..., ~causal_mask(5, 5)] == 0).all()


@pytest.mark.parametrize("impl", ["sdpa", "reference"])
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_cached_chunks_equal_one_full_pass(impl, n_kv_heads):
    """Chunked prefill (t_q > 1, t_q < t_k) and decode steps (t_q = 1) need the bottom-right-aligned mask. The
    model-level and generate-level forms of the same equality: test_kv_cache.py, test_generate.py."""
    chunks = (3, 1, 1, 2)
    cfg, module = make_attn(impl, n_kv_heads)
    x = randn(2, 7, 24, seed=13)
    cache = KVCache(2, cfg.kv_heads, 7, cfg.head_dim)
    with torch.no_grad():
        full = module(x)
        pieces, pos = [], 0
        for t in chunks:
            input_pos = torch.arange(pos, pos + t)
            mask = rows_of_the_causal_table(input_pos, 7)
            pieces.append(module(x[:, pos:pos + t], mask, cache=cache, input_pos=input_pos))
            pos += t
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)


def test_decode_step_weights_cover_every_cached_key():
    cfg, module = make_attn("sdpa", n_kv_heads=2)
    x = randn(1, 6, 24, seed=14)
    cache = KVCache(1, cfg.kv_heads, 6, cfg.head_dim)
    with torch.no_grad():
        _, full_weights = module(x, need_weights=True)
        prompt, step = torch.arange(5), torch.tensor([5])
        module(x[:, :5], rows_of_the_causal_table(prompt, 6), cache=cache, input_pos=prompt)
        y, weights = module(x[:, 5:], rows_of_the_causal_table(step, 6), cache=cache, input_pos=step,
                            need_weights=True)
    assert weights.shape == (1, 4, 1, 6) and (weights > 0).all()
    torch.testing.assert_close(weights, full_weights[:, :, 5:])
    torch.testing.assert_close(y, module(x)[:, 5:])


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("impl", ["sdpa", "reference"])
def test_module_rope_equals_apply_rope_on_q_and_k(n_kv_heads, impl):
    # the module rotates q and k in one call over their stacked heads: the same as rotating each
    _, module = make_attn(impl, n_kv_heads)
    x = randn(2, 5, 24, seed=11)
    cos, sin = rope_cos_sin(torch.arange(3, 8), module.head_dim)
    B, T, _ = x.shape
    nh, nkv, hs = module.n_heads, module.n_kv_heads, module.head_dim
    with torch.no_grad():
        q, k, v = projections(module, x)
        q = apply_rope(q.view(B, T, nh, hs).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(B, T, nkv, hs).transpose(1, 2), cos, sin)
        v = v.view(B, T, nkv, hs).transpose(1, 2)
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        heads = attention(q, k, v, causal_mask(T, T))[0]
        want = module.o_proj(heads.transpose(1, 2).reshape(B, T, nh * hs))
        torch.testing.assert_close(module(x, rope=(cos, sin)), want)


def test_a_cache_without_a_mask_is_refused():
    cfg, module = make_attn()
    cache = KVCache(1, cfg.kv_heads, 6, cfg.head_dim)
    with pytest.raises(ValueError, match="with a cache, pass the mask"):
        module(randn(1, 2, 24), cache=cache, input_pos=torch.arange(2))


def test_rope_under_bf16_autocast_keeps_q_and_k_in_bf16(monkeypatch):
    # autocast runs the projections in bf16 while x stays float32: the float32 RoPE tables must follow q and k,
    # not x, or q and k are promoted to float32 beside a bf16 v
    _, module = make_attn("sdpa", n_kv_heads=2)
    seen = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda q, k, v, **kw: seen.append((q.dtype, k.dtype, v.dtype)) or sdpa(q, k, v, **kw))
    x = randn(1, 5, 24, seed=3)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cos, sin = rope_cos_sin(torch.arange(5), module.head_dim)
        module(x, rope=(cos, sin))
    assert seen == [(torch.bfloat16,) * 3]

