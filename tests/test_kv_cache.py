"""KVCache: writes at explicit positions into full-length buffers, clear errors; chunked prefill through the
model equals one full pass, and a reused cache's stale slots are masked."""

import pytest
import torch

from conftest import randn, tiny_model
from transformer_steps import KVCache
from transformer_steps.kv_cache import kv_cache_bytes


def test_buffers_and_sizes():
    cache = KVCache(2, 3, 10, 4, dtype=torch.bfloat16)
    assert cache.k.shape == cache.v.shape == (2, 3, 10, 4)
    assert cache.k.dtype == torch.bfloat16 and cache.max_len == 10 and not cache.k.any()


def test_update_writes_at_the_positions_and_returns_the_whole_buffers():
    cache = KVCache(1, 2, 6, 3)
    k1, v1 = randn(1, 2, 4, 3, seed=1), randn(1, 2, 4, 3, seed=2)
    k_all, v_all = cache.update(torch.arange(4), k1, v1)
    assert k_all is cache.k and v_all is cache.v and k_all.shape == (1, 2, 6, 3)
    assert torch.equal(k_all[:, :, :4], k1) and torch.equal(v_all[:, :, :4], v1) and not k_all[:, :, 4:].any()
    k2 = randn(1, 2, 1, 3, seed=3)
    cache.update(torch.tensor([4]), k2, k2)
    assert torch.equal(cache.k[:, :, 4:5], k2) and torch.equal(cache.k[:, :, :4], k1) and not cache.k[:, :, 5].any()


def test_a_bf16_step_writes_into_a_float32_cache_in_the_caches_dtype():
    """As under autocast: bf16 keys and values, stored as the float32 numbers they are."""
    cache = KVCache(1, 2, 4, 3)
    k, v = randn(1, 2, 2, 3, seed=5).bfloat16(), randn(1, 2, 2, 3, seed=6).bfloat16()
    cache.update(torch.arange(2), k, v)
    assert cache.k.dtype == torch.float32
    assert torch.equal(cache.k[:, :, :2], k.float()) and torch.equal(cache.v[:, :, :2], v.float())


def test_rewriting_an_earlier_position_replaces_it():
    cache = KVCache(1, 1, 4, 2)
    cache.update(torch.arange(3), torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    cache.update(torch.tensor([1]), torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    assert cache.k[0, 0, :, 0].tolist() == [0, 1, 0, 0]


def test_a_position_past_the_end_is_an_error_not_garbage():
    cache = KVCache(1, 1, 3, 2)
    with pytest.raises(IndexError):
        cache.update(torch.tensor([3]), torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    assert not cache.k.any()


@pytest.mark.parametrize(("k_shape", "v_shape"), [((1, 2, 1, 4), (1, 2, 1, 4)), ((1, 2, 1, 3), (1, 2, 2, 3)),
                                                  ((2, 2, 1, 3), (2, 2, 1, 3)), ((2, 3), (2, 3))])
def test_wrong_shapes_are_rejected(k_shape, v_shape):
    cache = KVCache(1, 2, 4, 3)
    with pytest.raises(ValueError, match=r"k and v must both be \(1, 2, T, 3\)"):
        cache.update(torch.arange(1), torch.zeros(k_shape), torch.zeros(v_shape))


def test_positions_must_match_the_keys():
    cache = KVCache(1, 2, 4, 3)
    with pytest.raises(ValueError, match=r"input_pos must hold one position per key \(2,\), got \(3,\)"):
        cache.update(torch.arange(3), torch.zeros(1, 2, 2, 3), torch.zeros(1, 2, 2, 3))


def test_reset_empties_the_cache():
    cache = KVCache(1, 2, 4, 3)
    cache.update(torch.arange(4), torch.ones(1, 2, 4, 3), torch.ones(1, 2, 4, 3))
    cache.reset()
    assert not cache.k.any() and not cache.v.any()


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="max_len must be >= 1, got 0"):
        KVCache(1, 2, 0, 3)
    with pytest.raises(TypeError, match="head_dim must be an int, got float"):
        KVCache(1, 2, 4, 3.0)


def test_make_cache_follows_the_model():
    model = tiny_model(n_kv_heads=2, n_layers=3, max_seq_len=12)
    caches = model.make_cache(2)
    assert len(caches) == 3 and len({id(c) for c in caches}) == 3
    assert caches[0].k.shape == (2, 2, 12, 4) and caches[0].k.dtype == torch.float32
    assert model.make_cache(1, max_len=5, dtype=torch.bfloat16)[0].k.shape == (1, 2, 5, 4)
    assert model.make_cache(1, dtype=torch.bfloat16)[0].k.dtype == torch.bfloat16
    for bad in (0, 13):
        with pytest.raises(ValueError, match=rf"max_len must be in \[1, max_seq_len=12\], got {bad}"):
            model.make_cache(1, max_len=bad)


def chunked(model, idx, chunks, cache):
    """Logits of idx fed to the model chunk by chunk at their positions, through the cache."""
    pieces, pos = [], 0
    with torch.no_grad():
        for t in chunks:
            pieces.append(model(idx[:, pos:pos + t], torch.arange(pos, pos + t), cache))
            pos += t
    return torch.cat(pieces, dim=1)


@pytest.mark.parametrize("changes", [{}, {"pos": "rope", "norm": "rmsnorm", "ffn": "swiglu", "n_kv_heads": 2},
                                     {"pos": "sinusoidal", "norm_position": "post"},
                                     {"pos": "none", "ffn": "moe", "n_kv_heads": 1},
                                     {"attn_impl": "reference", "pos": "rope"}])
def test_chunked_prefill_equals_full_prefill(changes):
    """A first chunk, decode steps, then a chunk again (queries over cached keys), in each model variant."""
    model = tiny_model(scale=0.2, **changes)
    idx = torch.randint(0, 13, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(idx)
    torch.testing.assert_close(chunked(model, idx, (3, 1, 1, 4, 1), model.make_cache(2, max_len=12)), full)


def test_a_reused_cache_hides_the_last_sequences_keys():
    """Slots past a query's position hold the previous sequence's keys: the causal mask must hide them."""
    model = tiny_model(scale=0.2, pos="rope")
    first, second = (torch.randint(0, 13, (1, 8), generator=torch.Generator().manual_seed(s)) for s in (4, 5))
    cache = model.make_cache(1, max_len=8)
    chunked(model, first, (8,), cache)
    with torch.no_grad():
        fresh = model(second[:, :3])
    torch.testing.assert_close(chunked(model, second, (2, 1), cache), fresh)


def test_the_cache_overflow_check_sits_at_the_exact_edge():
    """A cache of max_len 4 (in a model of 24 positions) takes positions up to 3; position 4 is the documented
    ValueError, not an IndexError from the cache's index_copy_."""
    model = tiny_model(pos="rope")
    idx = torch.randint(0, 13, (1, 5), generator=torch.Generator().manual_seed(4))
    cache = model.make_cache(1, max_len=4)
    assert model(idx[:, :4], torch.arange(4), cache).shape == (1, 4, 13)
    with pytest.raises(ValueError, match=r"KV cache overflow: positions 4..4 need a cache of max_len >= 5, but it "
                                         r"holds 4; make a larger one"):
        model(idx[:, 4:], torch.tensor([4]), cache)
    with pytest.raises(ValueError, match=r"KV cache overflow: positions 0..4 need a cache of max_len >= 5"):
        model(idx, torch.arange(5), model.make_cache(1, max_len=4))


def test_size_checks_accept_their_smallest_value_and_name_the_first_invalid_one():
    assert KVCache(1, 1, 1, 1).k.shape == (1, 1, 1, 1)
    for i, name in enumerate(("batch_size", "n_kv_heads", "max_len", "head_dim")):
        sizes = [1, 1, 1, 1]
        sizes[i] = 0
        with pytest.raises(ValueError, match=rf"{name} must be >= 1, got 0"):
            KVCache(*sizes)
    model = tiny_model(max_seq_len=12)
    assert [model.make_cache(1, max_len=n)[0].max_len for n in (1, 12)] == [1, 12]
    cfg = model.cfg
    assert kv_cache_bytes(cfg, 0) == 0 and kv_cache_bytes(cfg, 1, bytes_per_element=8, batch_size=1) > 0
    # the bytes are the buffers' (grouped-query: 2 kv heads of 4)
    gqa = tiny_model(n_kv_heads=2)
    assert kv_cache_bytes(gqa.cfg, 24, bytes_per_element=4) == sum(c.k.nbytes + c.v.nbytes for c in gqa.make_cache(1))
    with pytest.raises(ValueError, match="seq_len must be >= 0, got -1"):
        kv_cache_bytes(cfg, -1)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        kv_cache_bytes(cfg, 1, batch_size=0)
    with pytest.raises(ValueError, match="unknown bytes_per_element 16; allowed: 1, 2, 4, 8"):
        kv_cache_bytes(cfg, 1, bytes_per_element=16)
