"""KVCache: writes at explicit positions, errors instead of garbage, reset; chunked prefill through the
model equals one full pass."""

import pytest
import torch
from conftest import randn

from transformer_steps import KVCache, ModelConfig, TransformerLM


def test_buffers_and_sizes():
    cache = KVCache(2, 3, 10, 4, dtype=torch.bfloat16)
    assert cache.k.shape == cache.v.shape == (2, 3, 10, 4)
    assert cache.k.dtype == torch.bfloat16 and cache.length == 0 and cache.max_len == 10
    assert cache.nbytes == 2 * (2 * 3 * 10 * 4) * 2  # keys and values, 2 bytes each


def test_update_writes_in_place_and_returns_the_filled_prefix():
    cache = KVCache(1, 2, 6, 3)
    k1, v1 = randn(1, 2, 4, 3, seed=1), randn(1, 2, 4, 3, seed=2)
    k_all, v_all = cache.update(0, k1, v1)
    assert torch.equal(k_all, k1) and torch.equal(v_all, v1) and cache.length == 4
    assert k_all.data_ptr() == cache.k.data_ptr()  # a view, not a copy
    k2, v2 = randn(1, 2, 1, 3, seed=3), randn(1, 2, 1, 3, seed=4)
    k_all, v_all = cache.update(4, k2, v2)
    assert torch.equal(k_all, torch.cat([k1, k2], dim=2)) and torch.equal(v_all, torch.cat([v1, v2], dim=2))
    assert cache.length == 5 and (cache.k[:, :, 5] == 0).all()


def test_rewriting_from_an_earlier_position_rewinds():
    cache = KVCache(1, 1, 6, 2)
    cache.update(0, randn(1, 1, 5, 2, seed=5), randn(1, 1, 5, 2, seed=6))
    k, _ = cache.update(2, torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    assert cache.length == 3 and k.shape == (1, 1, 3, 2) and (k[:, :, 2] == 1).all()


def test_overflow_is_an_error_not_garbage():
    cache = KVCache(1, 2, 4, 3)
    cache.update(0, torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3))
    with pytest.raises(ValueError, match=r"KV cache overflow: positions up to 5 requested, capacity is 4"):
        cache.update(3, torch.zeros(1, 2, 2, 3), torch.zeros(1, 2, 2, 3))
    assert cache.length == 3  # nothing was written


@pytest.mark.parametrize("start_pos", [-1, 3])
def test_start_pos_must_touch_the_filled_prefix(start_pos):
    cache = KVCache(1, 2, 8, 3)
    cache.update(0, torch.zeros(1, 2, 2, 3), torch.zeros(1, 2, 2, 3))
    with pytest.raises(ValueError, match=rf"start_pos must be in \[0, 2\] \(the filled length\), got {start_pos}"):
        cache.update(start_pos, torch.zeros(1, 2, 1, 3), torch.zeros(1, 2, 1, 3))


@pytest.mark.parametrize(("k_shape", "v_shape"), [((1, 2, 1, 3), (1, 2, 2, 3)), ((2, 2, 1, 3), (2, 2, 1, 3)),
                                                  ((1, 1, 1, 3), (1, 1, 1, 3)), ((1, 2, 1, 4), (1, 2, 1, 4)),
                                                  ((2, 3), (2, 3))])
def test_wrong_shapes_are_rejected(k_shape, v_shape):
    cache = KVCache(1, 2, 8, 3)
    with pytest.raises(ValueError, match=r"k and v must both be \(1, 2, T, 3\)"):
        cache.update(0, torch.zeros(k_shape), torch.zeros(v_shape))


def test_reset_empties_the_cache():
    cache = KVCache(1, 2, 4, 3)
    cache.update(0, torch.ones(1, 2, 4, 3), torch.ones(1, 2, 4, 3))
    cache.reset()
    assert cache.length == 0 and not cache.k.any() and not cache.v.any()
    cache.update(0, torch.ones(1, 2, 4, 3), torch.ones(1, 2, 4, 3))  # full capacity again
    assert cache.length == 4


def make(seed=0, **changes):
    torch.manual_seed(seed)
    cfg = ModelConfig(**{"vocab_size": 17, "max_seq_len": 12, "d_model": 16, "n_layers": 2, "n_heads": 4,
                         "n_experts": 3, **changes})
    model = TransformerLM(cfg).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # off the init, so norms and biases matter
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return model


def test_make_cache_follows_the_model():
    model = make(n_kv_heads=2, n_layers=3)
    caches = model.make_cache(2)
    assert len(caches) == 3 and len({id(c) for c in caches}) == 3
    assert caches[0].k.shape == (2, 2, 12, 4) and caches[0].k.dtype == torch.float32
    assert model.make_cache(1, max_len=5, dtype=torch.bfloat16)[0].k.shape == (1, 2, 5, 4)
    assert model.make_cache(1, dtype=torch.bfloat16)[0].k.dtype == torch.bfloat16
    for bad in (0, 13):
        with pytest.raises(ValueError, match=rf"max_len must be in \[1, max_seq_len=12\], got {bad}"):
            model.make_cache(1, max_len=bad)


@pytest.mark.parametrize("changes", [{}, {"pos": "rope", "norm": "rmsnorm", "ffn": "swiglu", "n_kv_heads": 2},
                                     {"pos": "sinusoidal", "norm_position": "post"},
                                     {"pos": "none", "ffn": "moe", "n_kv_heads": 1},
                                     {"attn_impl": "reference", "pos": "rope"}])
@pytest.mark.parametrize("chunks", [(10,), (4, 6), (3, 3, 3, 1), (1,) * 10])
def test_chunked_prefill_equals_full_prefill(changes, chunks):
    model = make(**changes)
    idx = torch.randint(0, 17, (2, 10), generator=torch.Generator().manual_seed(3))
    cache = model.make_cache(2)
    with torch.no_grad():
        full = model(idx)
        pieces, pos = [], 0
        for t in chunks:
            pieces.append(model(idx[:, pos:pos + t], start_pos=pos, cache=cache))
            pos += t
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)
    assert all(c.length == 10 for c in cache)


def test_model_overflow_and_reset_through_the_model():
    model = make(pos="rope")
    idx = torch.randint(0, 17, (1, 6), generator=torch.Generator().manual_seed(4))
    cache = model.make_cache(1, max_len=4)
    with torch.no_grad():
        with pytest.raises(ValueError, match="KV cache overflow: positions up to 6 requested, capacity is 4"):
            model(idx, cache=cache)
        with pytest.raises(ValueError, match=r"start_pos must be in \[0, 0\]"):
            model(idx[:, :2], start_pos=2, cache=model.make_cache(1))  # a gap before the new tokens
        cache = model.make_cache(1)
        first = model(idx, cache=cache)
        for c in cache:
            c.reset()
        torch.testing.assert_close(model(idx, cache=cache), first)
