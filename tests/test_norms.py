"""LayerNorm and RMSNorm from scratch (the package's only implementation of each) against torch's modules,
by hand, and in bf16 (computed in float32)."""

import os

import pytest
import torch
from torch import nn

from conftest import randn
from transformer_steps import ModelConfig
from transformer_steps.norms import LayerNorm, RMSNorm, layer_norm, make_norm, rms_norm

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def randomise(*modules, seed=1):
    """Give every module the same non-trivial weights (init is all ones / zeros)."""
    with torch.no_grad():
        for m in modules:
            m.weight.copy_(1 + 0.5 * randn(m.weight.shape[0], seed=seed))
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(0.5 * randn(m.bias.shape[0], seed=seed + 1))


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_matches_torch(bias):
    ours, ref = LayerNorm(10, eps=1e-5, bias=bias), nn.LayerNorm(10, eps=1e-5, bias=bias)
    randomise(ours, ref)
    x = 3 + 2 * randn(2, 4, 10, seed=2)
    torch.testing.assert_close(ours(x), ref(x))
    assert (ours.bias is None) == (not bias)


def test_rms_norm_matches_torch():
    ours, ref = RMSNorm(10, eps=1e-6), nn.RMSNorm(10, eps=1e-6)
    randomise(ours, ref)
    x = 3 + 2 * randn(2, 4, 10, seed=3)
    torch.testing.assert_close(ours(x), ref(x))


def test_norms_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0, 6.0]])
    w, b = torch.tensor([1.0, 2.0, 0.5, -1.0]), torch.tensor([0.0, 1.0, 0.0, 0.5])
    mean, var = 3.0, (4 + 1 + 0 + 9) / 4  # biased variance: divide by n
    want = (x - mean) / (var + 1e-5) ** 0.5 * w + b
    torch.testing.assert_close(layer_norm(x, w, b, 1e-5), want)
    torch.testing.assert_close(layer_norm(x, w, None, 1e-5), want - b)
    ms = (1 + 4 + 9 + 36) / 4
    torch.testing.assert_close(rms_norm(x, w, 1e-6), x / (ms + 1e-6) ** 0.5 * w)


def test_normalised_rows_have_zero_mean_unit_variance_and_unit_rms():
    x = 5 + 3 * randn(6, 32, seed=4)
    y = LayerNorm(32)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(6), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(6), atol=1e-3, rtol=0)
    z = RMSNorm(32)(x)
    torch.testing.assert_close(z.pow(2).mean(-1).sqrt(), torch.ones(6), atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_bf16_input_gives_bf16_output_computed_in_float32(kind):
    norm = LayerNorm(64) if kind == "layernorm" else RMSNorm(64)
    randomise(norm)
    # a large common offset: a bf16 mean / mean of squares would lose the small variations
    x = (100 + randn(3, 64, seed=5)).bfloat16()
    y = norm.bfloat16()(x)
    assert y.dtype == torch.bfloat16
    want = norm.float()(x.float())  # same bf16-representable inputs, all in float32
    torch.testing.assert_close(y.float(), want, atol=2e-2, rtol=1e-2)


def test_bf16_rms_norm_equals_hf_llama_bit_for_bit():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    ours, ref = RMSNorm(64, eps=1e-6), LlamaRMSNorm(64, eps=1e-6)
    randomise(ours, ref)
    x = (100 + randn(3, 64, seed=6)).bfloat16()
    assert torch.equal(ours.bfloat16()(x), ref.bfloat16()(x))


def test_make_norm_follows_the_config():
    cfg = ModelConfig(vocab_size=5, max_seq_len=4, d_model=8, n_layers=1, n_heads=2, norm_eps=1e-4)
    ln = make_norm(cfg)
    assert isinstance(ln, LayerNorm) and ln.eps == 1e-4 and ln.bias is not None
    assert make_norm(cfg.replace(bias=False)).bias is None
    rms = make_norm(cfg.replace(norm="rmsnorm"))
    assert isinstance(rms, RMSNorm) and rms.eps == 1e-4 and rms.weight.shape == (8,)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_eps_sits_inside_the_square_root(kind):
    """sqrt(var + eps), not sqrt(var) + eps: rows of spread 1e-3 (variance 1e-6, below eps) make the two differ
    by a factor of about 3. float64 throughout, against torch's own functions."""
    x = (1e-3 * randn(4, 16, seed=7)).double()
    w, b = 1 + 0.5 * randn(16, seed=8).double(), 0.5 * randn(16, seed=9).double()
    if kind == "layernorm":
        got, want = layer_norm(x, w, b, 1e-5), torch.nn.functional.layer_norm(x, (16,), w, b, eps=1e-5)
    else:
        got, want = rms_norm(x, w, 1e-5), torch.nn.functional.rms_norm(x, (16,), w, eps=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_float64_input_is_normalised_in_float64(kind):
    """A float64 model must not drop back to float32: the result is float64 and agrees with a float64
    reference to about 1e-15, where a float32 step would leave errors near 1e-7."""
    norm = (LayerNorm(64) if kind == "layernorm" else RMSNorm(64)).double()
    randomise(norm)
    x = (3 + randn(3, 64, seed=10)).double()
    y = norm(x)
    assert y.dtype == torch.float64
    if kind == "layernorm":
        want = torch.nn.functional.layer_norm(x, (64,), norm.weight, norm.bias, eps=norm.eps)
    else:
        want = torch.nn.functional.rms_norm(x, (64,), norm.weight, eps=norm.eps)
    torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-12)
