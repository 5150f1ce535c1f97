"""Positions: the sinusoidal formula, and RoPE against Hugging Face Llama (cos/sin and the rotation),
the interleaved convention up to a permutation, and the relative-position property of q_m . k_n."""

import math
import os

import pytest
import torch

from conftest import randn
from transformer_steps.positions import (
    apply_rope,
    apply_rope_interleaved,
    interleaved_to_half_split,
    rope_cos_sin,
    rope_inv_freq,
    rotate_half,
    sinusoidal_encoding,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_sinusoidal_formula_spot_checks():
    pe = sinusoidal_encoding(50, 8)
    assert pe.shape == (50, 8) and pe.dtype == torch.float32
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0] * 4))  # sin(0), cos(0)
    torch.testing.assert_close(pe[1, :2], torch.tensor([math.sin(1), math.cos(1)]))
    # d = 8: 10000^(2/8) = 10, so dimension pair 1 turns at p / 10
    torch.testing.assert_close(pe[3, 2:4], torch.tensor([math.sin(0.3), math.cos(0.3)]))
    # PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same)
    for p, i in [(7, 0), (17, 1), (42, 3)]:
        angle = p / 10000 ** (2 * i / 8)
        torch.testing.assert_close(pe[p, 2 * i], torch.tensor(math.sin(angle)))
        torch.testing.assert_close(pe[p, 2 * i + 1], torch.tensor(math.cos(angle)))
    torch.testing.assert_close(pe.pow(2).sum(-1), torch.full((50,), 4.0))  # each pair lies on the unit circle
    torch.testing.assert_close(sinusoidal_encoding(5, 4, base=100.0)[2, 2], torch.tensor(math.sin(2 / 10)))


def test_sinusoidal_and_rope_reject_odd_dims():
    with pytest.raises(ValueError, match="dim must be even.*got 7"):
        sinusoidal_encoding(4, 7)
    with pytest.raises(ValueError, match="RoPE needs an even head_dim, got 5"):
        rope_cos_sin(torch.arange(4), 5)


def hf_rope(head_dim, base, n_heads=2):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=head_dim * n_heads, num_attention_heads=n_heads, rope_theta=base)
    return LlamaRotaryEmbedding(cfg)


@pytest.mark.parametrize(("head_dim", "base"), [(8, 10000.0), (16, 500000.0), (2, 10.0)])
def test_rope_cos_sin_match_hf_llama(head_dim, base):
    positions = torch.tensor([0, 1, 2, 5, 100, 511])
    cos, sin = rope_cos_sin(positions, head_dim, base)
    hf = hf_rope(head_dim, base)
    torch.testing.assert_close(rope_inv_freq(head_dim, base), hf.inv_freq)
    hf_cos, hf_sin = hf(torch.zeros(1, len(positions), head_dim), positions[None])
    assert cos.shape == sin.shape == (len(positions), head_dim)
    torch.testing.assert_close(cos, hf_cos[0])
    torch.testing.assert_close(sin, hf_sin[0])


def test_apply_rope_matches_hf_apply_rotary_pos_emb():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k = randn(2, 4, 6, 16, seed=1), randn(2, 2, 6, 16, seed=2)  # (B, nh, T, hs); GQA: fewer k heads
    cos, sin = rope_cos_sin(torch.arange(3, 9), 16)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, cos[None], sin[None])
    torch.testing.assert_close(apply_rope(q, cos, sin), hf_q)
    torch.testing.assert_close(apply_rope(k, cos, sin), hf_k)


def test_rotate_half_and_a_rotation_by_hand():
    torch.testing.assert_close(rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])), torch.tensor([-3.0, -4.0, 1.0, 2.0]))
    # head_dim 2: one pair, angle = position * 1; (1, 0) rotated by 2 rad is (cos 2, sin 2)
    cos, sin = rope_cos_sin(torch.tensor([2]), 2)
    torch.testing.assert_close(apply_rope(torch.tensor([[1.0, 0.0]]), cos, sin),
                               torch.tensor([[math.cos(2), math.sin(2)]]))


def test_rope_at_position_zero_is_identity_and_preserves_norms():
    x = randn(3, 10, 8, seed=3)
    cos, sin = rope_cos_sin(torch.arange(10), 8)
    y = apply_rope(x, cos, sin)
    torch.testing.assert_close(y[:, 0], x[:, 0])
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    yi = apply_rope_interleaved(x, cos, sin)
    torch.testing.assert_close(yi.norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(yi, y)  # the two conventions pair different dimensions


def test_interleaved_rope_by_hand():
    x = randn(5, 6, seed=4)
    cos, sin = rope_cos_sin(torch.arange(5), 6)
    theta = rope_inv_freq(6)
    want = x.clone()
    for p in range(5):
        for j in range(3):
            c, s = math.cos(p * theta[j]), math.sin(p * theta[j])
            want[p, 2 * j] = x[p, 2 * j] * c - x[p, 2 * j + 1] * s
            want[p, 2 * j + 1] = x[p, 2 * j] * s + x[p, 2 * j + 1] * c
    torch.testing.assert_close(apply_rope_interleaved(x, cos, sin), want)


@pytest.mark.parametrize("head_dim", [2, 8, 16])
def test_interleaved_equals_half_split_up_to_a_permutation(head_dim):
    perm = interleaved_to_half_split(head_dim)
    assert sorted(perm.tolist()) == list(range(head_dim))
    assert perm[: head_dim // 2].tolist() == list(range(0, head_dim, 2))
    x = randn(2, 7, head_dim, seed=5)
    cos, sin = rope_cos_sin(torch.arange(7), head_dim)
    torch.testing.assert_close(apply_rope(x[..., perm], cos, sin), apply_rope_interleaved(x, cos, sin)[..., perm])


@pytest.mark.parametrize("rope", [apply_rope, apply_rope_interleaved])
def test_scores_depend_only_on_the_relative_position(rope):
    q, k = randn(16, seed=6), randn(16, seed=7)
    cos, sin = rope_cos_sin(torch.arange(64), 16)

    def score(m, n):
        return rope(q, cos[m], sin[m]) @ rope(k, cos[n], sin[n])

    for offset in (0, 1, 5, -3):
        scores = torch.stack([score(m, m - offset) for m in range(10, 60, 7)])
        torch.testing.assert_close(scores, scores[:1].expand_as(scores), atol=1e-4, rtol=1e-4)
    assert not torch.isclose(score(20, 19), score(20, 15))


def test_float64_rope_tables_are_computed_in_float64():
    """A float64 model's tables: angles and their cos/sin in float64, to 1e-12 at position 3577, where a
    float32 angle is already off by about 1e-4."""
    pos = torch.arange(0, 4096, 511)
    cos, sin = rope_cos_sin(pos, 8, dtype=torch.float64)
    angles = [[p * 10000 ** (-2 * j / 8) for j in (0, 1, 2, 3, 0, 1, 2, 3)] for p in pos.tolist()]  # half-split
    assert cos.dtype == sin.dtype == torch.float64
    torch.testing.assert_close(cos, torch.tensor(angles, dtype=torch.float64).cos(), rtol=0, atol=1e-12)
    torch.testing.assert_close(sin, torch.tensor(angles, dtype=torch.float64).sin(), rtol=0, atol=1e-12)


def test_rope_keeps_the_input_dtype():
    x = randn(4, 8, seed=8).bfloat16()
    cos, sin = rope_cos_sin(torch.arange(4), 8)
    assert apply_rope(x, cos, sin).dtype == torch.bfloat16
    assert apply_rope_interleaved(x, cos, sin).dtype == torch.bfloat16
