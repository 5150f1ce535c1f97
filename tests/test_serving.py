"""serving: the engine's greedy ids equal generate's on each prompt alone (ragged prompts, requests arriving
mid-run, both batching modes, across position, attention, norm and head variants); paged attention equals the
contiguous cache's; block accounting (no leaks, shared blocks, eviction, preemption); prefix caching; and every
bad input rejected before anything changes."""

import ast
import pathlib
import random

import pytest
import torch

from conftest import tiny_model
from transformer_steps import KVCache, generate
from transformer_steps.attention import ATTENTION
from transformer_steps.serving import Engine, PagedKVCache, block_keys, gather

V = 13
CONFIGS = {  # learned / sinusoidal / RoPE positions, MHA / GQA, LayerNorm / RMSNorm, tied / untied heads
    "learned-mha-layernorm-tied": {},
    "sinusoidal-gqa-post-relu": {"pos": "sinusoidal", "n_kv_heads": 2, "norm_position": "post", "ffn": "relu"},
    "rope-gqa-rmsnorm-untied": {"pos": "rope", "n_kv_heads": 2, "norm": "rmsnorm", "ffn": "swiglu", "bias": False,
                                "tie_embeddings": False},
    "rope-mqa-reference-kernel": {"pos": "rope", "n_kv_heads": 1, "attn_impl": "reference"},
}


def make(dtype=torch.float64, **changes):
    # float64: a float32 near-tie between two logits could flip an argmax between batch shapes
    return tiny_model(scale=0.5, max_seq_len=48, **changes).to(dtype)


def prompts(n=7, seed=0, lo=1, hi=14):
    rng = random.Random(seed)
    return [[rng.randrange(V) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def alone(model, prompt, n):
    """generate on the one prompt: what every request must get back."""
    return generate(model, torch.tensor([prompt]), n, temperature=0.0)[0, len(prompt):].tolist()


def assert_no_leak(engine):
    """Every block free, or cached and free to evict; no reference left."""
    cache = engine.cache
    assert not any(cache.ref_count)
    assert sorted([*cache.free, *cache.cached]) == list(range(cache.num_blocks))
    assert set(cache.by_key.values()) == set(cache.cached)
    assert not engine.scheduler.running and not engine.scheduler.waiting


# 1. batched equals alone


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "static"])
@pytest.mark.parametrize("name", CONFIGS)
def test_run_equals_generate_alone(name, continuous):
    model, ps = make(**CONFIGS[name]), prompts()
    counts = [0, 1, 9, 20, 5, 14, 3]
    engine = Engine(model, max_batch_size=4, num_blocks=64, block_size=4, continuous=continuous)
    assert engine.run(ps, counts) == [alone(model, p, n) for p, n in zip(ps, counts)]
    assert engine.stats.generated_tokens == sum(counts)
    assert_no_leak(engine)


def test_run_equals_generate_alone_in_float32():
    model, ps = make(torch.float32, **CONFIGS["rope-gqa-rmsnorm-untied"]), prompts(seed=1)
    engine = Engine(model, max_batch_size=3, num_blocks=64, block_size=4)
    assert engine.run(ps, 12) == [alone(model, p, 12) for p in ps]


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "static"])
def test_requests_added_mid_run(continuous):
    model, ps = make(**CONFIGS["rope-gqa-rmsnorm-untied"]), prompts(9, seed=2)
    counts = [4, 17, 2, 11, 8, 1, 15, 6, 9]
    engine = Engine(model, max_batch_size=3, num_blocks=64, block_size=4, continuous=continuous)
    ids, done, step = {}, {}, 0
    while len(done) < len(ps):
        if step % 3 == 0 and len(ids) < len(ps):  # one arrival every third step
            i = len(ids)
            ids[engine.add_request(ps[i], counts[i])] = i
        for request in engine.step():
            done[ids[request.id]] = request.generated
        step += 1
    assert [done[i] for i in range(len(ps))] == [alone(model, p, n) for p, n in zip(ps, counts)]
    assert_no_leak(engine)


def test_a_server_loop_takes_finished_requests_out_and_stops_when_idle():
    # a server drives add_request / step / pop_finished: the engine keeps only what is still waiting or running
    model, ps = make(), prompts(6, seed=6)
    counts = [3, 0, 9, 1, 6, 4]
    engine = Engine(model, max_batch_size=2, num_blocks=32, block_size=4)
    assert not engine.has_work() and engine.pop_finished() == []
    replies, step = {}, 0
    while step < 2 * len(ps) or engine.has_work():
        if step % 2 == 0 and step // 2 < len(ps):  # one arrival every other step
            engine.add_request(ps[step // 2], counts[step // 2])
        engine.step()
        for request in engine.pop_finished():
            assert request.done and request.id not in replies
            replies[request.id] = request.generated
        # nothing finished stays behind; everything unfinished does
        assert all(r.finish_time is None for r in engine.requests.values())
        assert set(engine.requests) | set(replies) == set(range(min(len(ps), step // 2 + 1)))
        step += 1
    assert engine.requests == {} and not engine.has_work()
    assert [replies[i] for i in range(len(ps))] == [alone(model, p, n) for p, n in zip(ps, counts)]
    assert_no_leak(engine)


def test_has_work_while_a_request_waits_or_runs():
    model = make()
    engine = Engine(model, max_batch_size=1, num_blocks=8, block_size=4)
    engine.add_request([1, 2], 0)  # nothing to compute: finished on arrival
    assert not engine.has_work() and [r.generated for r in engine.pop_finished()] == [[]]
    first, second = engine.add_request([1, 2], 3), engine.add_request([3], 2)
    work = [engine.has_work()]
    while engine.has_work():
        engine.step()
        work.append((engine.has_work(), len(engine.scheduler.waiting), len(engine.scheduler.running)))
    # one slot: the second waits while the first runs, then alone in the queue once the first has finished,
    # then runs with nobody waiting; then nothing is left
    assert work == [True, (True, 1, 1), (True, 1, 1), (True, 1, 0), (True, 0, 1), (False, 0, 0)]
    assert [r.id for r in engine.pop_finished()] == [first, second]


def test_continuous_batching_fills_freed_slots_and_static_does_not():
    model = make()
    ps, counts = [[1, 2], [3], [4, 5, 6], [7]], [2, 12, 5, 5]
    kinds, decode_steps = {}, {}
    for continuous in (True, False):
        engine = Engine(model, max_batch_size=2, num_blocks=32, block_size=4, continuous=continuous)
        assert engine.run(ps, counts) == [alone(model, p, n) for p, n in zip(ps, counts)]
        kinds[continuous], decode_steps[continuous] = engine.trace, engine.stats.decode_steps
    # continuous: request 2 joins while request 1 still decodes; static: it waits for the whole batch
    assert ("prefill", [2]) in kinds[True] and ("prefill", [2, 3]) in kinds[False]
    # request 1's 11 decode steps carry the others along, or are followed by 4 more
    assert (decode_steps[True], decode_steps[False]) == (11, 15)


def test_sampling_is_seeded_and_rules_apply():
    model, ps = make(), prompts(4, seed=3)

    def sampled(**kw):
        engine = Engine(model, max_batch_size=4, num_blocks=32, block_size=4)
        return engine.run(ps, 10, generator=torch.Generator().manual_seed(5), **kw)

    assert sampled(temperature=1.0) == sampled(temperature=1.0)
    # top_k=1 keeps only the argmax: greedy
    assert sampled(temperature=1.0, top_k=1) == [alone(model, p, 10) for p in ps]


# 2. paged attention equals the contiguous cache's


@pytest.mark.parametrize("seed", range(3))
def test_paged_gather_and_attention_equal_the_contiguous_cache(seed):
    gen = torch.Generator().manual_seed(seed)
    B, nh, nkv, hs, bs, n_blocks, num_blocks = 3, 4, 2, 8, 4, 5, 20
    lengths = [20, 7, 13]
    # random, disjoint block tables: each sequence's blocks anywhere in the pool, in any order
    tables = torch.randperm(num_blocks, generator=gen)[:B * n_blocks].view(B, n_blocks)
    pool_k, pool_v = torch.randn(2, num_blocks, bs, nkv, hs, generator=gen).double()  # stale contents
    contiguous = KVCache(B, nkv, n_blocks * bs, hs, torch.float64)
    layer = PagedKVCache(1, nkv, hs, num_blocks, bs, torch.float64).layers(tables)[0]
    layer.k_pool.copy_(pool_k), layer.v_pool.copy_(pool_v)
    # a ragged prefill, then one decode token each, at per-sequence positions
    for end, pos in ((1, torch.tensor([list(range(t - 6, t - 1)) for t in lengths])),
                     (0, torch.tensor([[t - 1] for t in lengths]))):
        k, v = torch.randn(2, B, nkv, pos.shape[1], hs, generator=gen).double()
        ck, cv = contiguous.update(pos, k, v)
        pk, pv = layer.update(pos, k, v)
        assert pk.shape == ck.shape == (B, nkv, n_blocks * bs, hs)
        q = torch.randn(B, nh, pos.shape[1], hs, generator=gen).double()
        mask = (torch.arange(n_blocks * bs)[None, None, :] <= pos[:, :, None])[:, None]  # (B, 1, T, T_k)
        for p, t in enumerate(lengths):
            span = slice(t - 6, t - end)  # the positions written so far
            torch.testing.assert_close(pk[p, :, span], ck[p, :, span], rtol=0, atol=0)
            torch.testing.assert_close(pv[p, :, span], cv[p, :, span], rtol=0, atol=0)
        for attend in ATTENTION.values():
            # where the contiguous cache holds zeros ahead of a query the pool holds stale values: both masked
            ck0, cv0, pk0, pv0 = (x.clone() for x in (ck, cv, pk, pv))
            for p, t in enumerate(lengths):
                ck0[p, :, :t - 6], cv0[p, :, :t - 6], pk0[p, :, :t - 6], pv0[p, :, :t - 6] = 0, 0, 0, 0
            torch.testing.assert_close(attend(q, pk0, pv0, mask)[0], attend(q, ck0, cv0, mask)[0])


def test_gather_reads_blocks_in_table_order():
    pool = torch.arange(6 * 2, dtype=torch.float32).view(6, 2, 1, 1)  # block b holds 2b, 2b + 1
    got = gather(pool, torch.tensor([[4, 1], [0, 5]]))
    assert got.shape == (2, 1, 4, 1)
    assert got.flatten(1).tolist() == [[8, 9, 2, 3], [0, 1, 10, 11]]


@pytest.mark.parametrize("name", ["learned-mha-layernorm-tied", "rope-gqa-rmsnorm-untied"])
def test_model_over_paged_blocks_equals_model_over_a_contiguous_cache(name):
    model = make(**CONFIGS[name])
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, V, (2, 9), generator=gen)
    tables = torch.tensor([[7, 2, 9], [0, 5, 4]])
    paged = PagedKVCache(model.cfg.n_layers, model.cfg.kv_heads, model.cfg.head_dim, 10, 4, torch.float64)
    contiguous = model.make_cache(2, 12)
    with torch.no_grad():
        pos = torch.arange(8).expand(2, 8)
        a = model(idx[:, :8], pos, paged.layers(tables))
        b = model(idx[:, :8], pos, contiguous)
        torch.testing.assert_close(a, b)
        pos = torch.tensor([[8], [8]])
        torch.testing.assert_close(model(idx[:, 8:], pos, paged.layers(tables)), model(idx[:, 8:], pos, contiguous))


def test_per_sequence_positions_equal_each_sequence_alone():
    for changes in CONFIGS.values():
        model = make(**changes)
        idx = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(0))
        pos = torch.tensor([[0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9], [10, 11, 12, 13, 14, 15]])
        with torch.no_grad():
            out = model(idx, pos)
            for b in range(3):
                torch.testing.assert_close(out[b], model(idx[b:b + 1], pos[b])[0])


def test_per_sequence_positions_are_checked():
    model = make()
    with pytest.raises(ValueError, match=r"one position per token, \(3,\), got \(2, 2\); or one per sequence and "
                                         r"token, \(2, 3\)"):
        model(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long))


# 3. block accounting


def test_a_request_holds_blocks_as_it_grows_and_releases_them_at_the_end():
    model = make()
    engine = Engine(model, max_batch_size=1, num_blocks=8, block_size=4)
    request = engine.add_request([1, 2, 3], 7)
    held = []
    while engine.scheduler.has_work():
        engine.step()
        held.append(engine.cache.blocks_in_use)
    # after each step: the prompt's 3 tokens, 1 block; position 4 takes a second; the last step writes
    # position 8 into a third (its peak), and the request, done, releases all three
    assert held == [1, 1, 2, 2, 2, 2, 0]
    assert engine.requests[request].generated == alone(model, [1, 2, 3], 7)
    assert engine.stats.peak_blocks_in_use == 3
    assert_no_leak(engine)


def test_shared_blocks_are_released_only_by_their_last_user():
    cache = PagedKVCache(1, 1, 2, num_blocks=6, block_size=2, prefix_caching=True)
    first, n_first = cache.allocate([1, 2, 3, 4, 5])
    second, n_second = cache.allocate([1, 2, 3, 4, 6, 7])
    kept = list(second)  # release empties the table
    assert (n_first, n_second) == (0, 4) and second[:2] == first[:2]
    assert [cache.ref_count[b] for b in first] == [2, 2, 1]
    cache.release(first)
    assert [cache.ref_count[b] for b in second] == [1, 1, 1]
    assert not set(second) & {*cache.free, *cache.cached}  # nothing the second still uses is free
    cache.release(second)
    assert not any(cache.ref_count) and cache.num_free == 6
    # its three full blocks keyed and kept, the tail first in line for eviction
    assert list(cache.cached) == kept[::-1]


def test_a_shared_block_outlives_its_first_user():
    # A and B share the system prompt's two blocks; A finishes first, then C arrives and B keeps growing: the
    # pool is tight, so a shared block handed out when A releases it would be overwritten under B
    model = make()
    system = [3, 1, 4, 1, 5, 9, 2, 6]
    engine = Engine(model, max_batch_size=3, num_blocks=8, block_size=4, prefix_caching=True)
    a, b = engine.add_request(system + [7], 2), engine.add_request(system + [8], 14)
    engine.step(), engine.step()
    assert engine.requests[a].finish_time is not None and engine.cache.ref_count[engine.requests[b].table[0]] == 1
    c = engine.add_request([10, 11, 12, 10, 11, 12, 10, 11], 8)
    while engine.scheduler.has_work():
        engine.step()
    for r, p, n in ((a, system + [7], 2), (b, system + [8], 14), (c, [10, 11, 12, 10, 11, 12, 10, 11], 8)):
        assert engine.requests[r].generated == alone(model, p, n)
    assert_no_leak(engine)


def test_an_evicted_block_is_never_reused_under_its_old_key():
    cache = PagedKVCache(1, 1, 2, num_blocks=3, block_size=2, prefix_caching=True)
    table, _ = cache.allocate([1, 2, 3, 4, 5])
    old_keys = block_keys([1, 2, 3, 4], 2)
    cache.release(table)
    assert set(old_keys) <= set(cache.by_key)
    other, _ = cache.allocate([9, 9, 9, 9, 9])  # three new blocks: both cached ones evicted
    assert not set(old_keys) & set(cache.by_key)
    assert all(cache.key[b] != k for b in other for k in old_keys)
    cache.release(other)
    _, n_cached = cache.allocate([1, 2, 3, 4, 5])
    assert n_cached == 0  # computed afresh, not read from blocks that now hold other tokens


def test_eviction_keeps_the_outputs():
    model = make()
    system = [3, 1, 4, 1, 5, 9, 2, 6]
    ps = [system + [i, 7 - i] for i in range(3)] + [[8, 8, 8, 8, 8, 8, 8, 8, 8, 8], system + [5, 5]]
    engine = Engine(model, max_batch_size=1, num_blocks=4, block_size=4, prefix_caching=True)
    assert engine.run(ps, 5) == [alone(model, p, 5) for p in ps]
    # the third request overwrote the system prompt's blocks; the last one computes it again
    assert engine.stats.reused_prefix_tokens == 8 + 8
    assert_no_leak(engine)


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "static"])
@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no-prefix", "prefix"])
def test_preemption_under_a_tiny_pool_keeps_every_output(continuous, prefix_caching):
    model, ps = make(**CONFIGS["rope-gqa-rmsnorm-untied"]), prompts(8, seed=4, lo=4, hi=12)
    counts = [20, 9, 25, 14, 3, 30, 18, 11]
    engine = Engine(model, max_batch_size=8, num_blocks=11, block_size=4, continuous=continuous,
                    prefix_caching=prefix_caching)
    assert engine.run(ps, counts) == [alone(model, p, n) for p, n in zip(ps, counts)]
    assert engine.stats.preemptions > 0 and engine.stats.peak_blocks_in_use <= 11
    assert_no_leak(engine)


def test_preemption_takes_the_most_recently_admitted():
    model = make()
    engine = Engine(model, max_batch_size=3, num_blocks=3, block_size=2)
    for p in ([1], [2], [3]):
        engine.add_request(p, 4)
    engine.step()  # the three prefills, one block each
    engine.step()  # position 1: the same blocks
    engine.step()  # position 2: each needs a second block; one free, so request 2 gives its block up
    assert [r.id for r in engine.scheduler.running] == [0]
    assert [r.id for r in engine.scheduler.waiting] == [1, 2]
    assert engine.stats.preemptions == 2


def cut(ids, stop_id):
    """generate's ids cut after the first stop id: what a request with that stop id must get back."""
    return ids[:ids.index(stop_id) + 1] if stop_id in ids else ids


@pytest.mark.parametrize("continuous", [True, False], ids=["continuous", "static"])
def test_a_stop_id_ends_a_request_early_with_generates_ids_cut_there(continuous):
    model, ps = make(**CONFIGS["rope-gqa-rmsnorm-untied"]), prompts(8, seed=6, lo=2, hi=10)
    full = [alone(model, p, 30) for p in ps]
    # a stop id each request samples somewhere after its first id (and one request without a stop id)
    stops = [ids[3 + i % 5] for i, ids in enumerate(full)]
    stops[1] = None
    expected = [cut(ids, s) if s is not None else ids for ids, s in zip(full, stops)]
    assert any(len(e) < 30 for e in expected) and len(expected[1]) == 30
    engine = Engine(model, max_batch_size=4, num_blocks=64, block_size=4, continuous=continuous)
    assert engine.run(ps, 30, stop_id=stops) == expected
    assert engine.stats.generated_tokens == sum(map(len, expected))
    assert_no_leak(engine)
    # one stop id for all, through add_request and step, under a pool small enough to preempt
    small = Engine(model, max_batch_size=8, num_blocks=10, block_size=4, continuous=continuous)
    rids = [small.add_request(p, 30, stop_id=stops[0]) for p in ps]
    while small.has_work():
        small.step()
    assert [small.requests[r].generated for r in rids] == [cut(ids, stops[0]) for ids in full]
    assert small.stats.preemptions > 0
    assert_no_leak(small)


def test_a_request_that_stops_early_frees_its_blocks_at_once():
    model = make()
    first = alone(model, [1, 2, 3], 20)
    engine = Engine(model, max_batch_size=2, num_blocks=16, block_size=2)
    early = engine.add_request([1, 2, 3], 20, stop_id=first[2])  # its third id: done after 3 steps
    late = engine.add_request([1, 2, 3], 20)
    for _ in range(3):
        engine.step()
    assert engine.requests[early].generated == cut(first, first[2])
    assert [r.id for r in engine.scheduler.running] == [late]
    # only the late request's blocks are in use: its 5 cached positions, in blocks of 2
    assert engine.cache.blocks_in_use == 3


def test_a_bad_stop_id_is_rejected_before_anything_changes():
    model, ps = make(), prompts(2, seed=7)
    engine = Engine(model, max_batch_size=2, num_blocks=8, block_size=4)
    engine.add_request(ps[0], 6)
    before = state(engine)
    for stop, error, message in ((13, ValueError, r"stop_id 13 outside the vocabulary \[0, 13\)"),
                                 (-1, ValueError, "stop_id -1 outside the vocabulary"),
                                 (2.0, TypeError, "stop_id must be an int token id or None, got float"),
                                 (True, TypeError, "stop_id must be an int token id or None, got bool")):
        with pytest.raises(error, match=message):
            engine.add_request(ps[1], 4, stop_id=stop)
        with pytest.raises(error, match=message):
            engine.run(ps, 4, stop_id=[None, stop])
        assert state(engine) == before
    with pytest.raises(ValueError, match=r"stop_id needs one id \(or None\) per prompt \(2\), got 1"):
        engine.run(ps, 4, stop_id=[1])
    assert state(engine) == before
    assert engine.run(ps[1:], 5, stop_id=None) == [alone(model, ps[1], 5)]


# 4. prefix caching


def test_a_shared_system_prompt_is_computed_once_with_the_same_outputs():
    model = make(**CONFIGS["rope-gqa-rmsnorm-untied"])
    system = [5, 3, 8, 1, 9, 2, 7, 4, 6, 0, 11, 12]  # three blocks of 4
    ps = [system + tail for tail in ([1], [2, 3], [4, 5, 6], [7, 8, 9, 10, 11])]
    engine = Engine(model, max_batch_size=4, num_blocks=32, block_size=4, prefix_caching=True)
    out = engine.run(ps, 6)
    plain = Engine(model, max_batch_size=4, num_blocks=32, block_size=4)
    assert out == plain.run(ps, 6) == [alone(model, p, 6) for p in ps]
    # the first computes the system prompt, the other three reuse its three blocks
    assert engine.stats.reused_prefix_tokens == 3 * 12
    assert engine.stats.prefill_tokens == sum(map(len, ps)) - 3 * 12 == plain.stats.prefill_tokens - 36
    assert plain.stats.reused_prefix_tokens == 0
    assert engine.stats.peak_blocks_in_use < plain.stats.peak_blocks_in_use
    assert_no_leak(engine)


def test_a_later_request_reuses_the_blocks_of_a_finished_one():
    model = make()
    system = list(range(8))
    engine = Engine(model, max_batch_size=2, num_blocks=16, block_size=4, prefix_caching=True)
    assert engine.run([system + [9]], 3) == [alone(model, system + [9], 3)]
    assert engine.cache.blocks_in_use == 0 and len(engine.cache.cached) == 2
    assert engine.run([system + [10, 11]], 3) == [alone(model, system + [10, 11], 3)]
    assert engine.stats.reused_prefix_tokens == 8


def test_a_block_is_keyed_by_its_history_not_only_its_tokens():
    # the same second block [5, 6, 7, 8] after different first ones: its keys and values differ (from the
    # second layer on), so a prompt that starts like the second must reuse the second's, never the first's
    model = make()
    ps = [[0, 0, 0, 0, 5, 6, 7, 8, 9], [12, 11, 10, 9, 5, 6, 7, 8, 9]]
    engine = Engine(model, max_batch_size=2, num_blocks=16, block_size=4, prefix_caching=True)
    assert engine.run(ps, 6) == [alone(model, p, 6) for p in ps]
    assert engine.stats.reused_prefix_tokens == 0
    third = ps[1][:8] + [3, 3]
    hits = engine.cache.prefix_hits(third)
    assert len(hits) == 2
    # the blocks it would reuse hold what the prompt computes alone
    contiguous = model.make_cache(1, 8)
    with torch.no_grad():
        model(torch.tensor([third[:8]]), torch.arange(8), contiguous)
    for pool, want in zip(engine.cache.k + engine.cache.v, [c.k for c in contiguous] + [c.v for c in contiguous]):
        torch.testing.assert_close(gather(pool, torch.tensor([hits])), want)
    assert engine.run([third], 12) == [alone(model, third, 12)]
    assert engine.stats.reused_prefix_tokens == 8
    assert block_keys(ps[0], 4)[1] != block_keys(ps[1], 4)[1]


def test_a_whole_prompt_of_full_blocks_still_computes_its_last_block():
    model = make()
    p = [1, 2, 3, 4, 5, 6, 7, 8]
    engine = Engine(model, max_batch_size=2, num_blocks=16, block_size=4, prefix_caching=True)
    assert engine.run([p, p], 4) == [alone(model, p, 4)] * 2
    assert engine.stats.reused_prefix_tokens == 4  # the first block; the last one holds the token to predict from


# 5. bad inputs: a clear error, nothing changed, the engine still correct


BAD_REQUESTS = [
    (([], 3), ValueError, "empty prompt"),
    (([1, 13, 2], 3), ValueError, r"token id 13 outside the vocabulary \[0, 13\)"),
    (([1, -1], 3), ValueError, r"token id -1 outside the vocabulary"),
    (([1, 2.0], 3), TypeError, "token ids must be ints, got float"),
    (("abc", 3), TypeError, "a prompt must be a list of token ids, got str"),
    (([1, 2], -1), ValueError, "max_new_tokens must be >= 0, got -1"),
    (([1, 2], 2.5), TypeError, "max_new_tokens must be an int"),
    (([1] * 40, 9), ValueError, r"prompt \(40\) \+ max_new_tokens \(9\) = 49 exceeds max_seq_len \(48\)"),
    (([1] * 20, 20), ValueError, r"needs 10 blocks of 4 tokens, but the pool has only 8: it could never fit"),
]


def state(engine):
    return (engine._next_id, dict(engine.requests), list(engine.scheduler.waiting), list(engine.scheduler.running),
            list(engine.cache.ref_count), list(engine.cache.free), repr(engine.stats))


@pytest.mark.parametrize(("args", "error", "message"), BAD_REQUESTS)
def test_a_bad_request_is_rejected_before_anything_changes(args, error, message):
    model, ps = make(), prompts(3, seed=5)
    engine = Engine(model, max_batch_size=2, num_blocks=8, block_size=4)
    first = engine.add_request(ps[0], 6)
    engine.step()
    before = state(engine)
    with pytest.raises(error, match=message):
        engine.add_request(*args)
    assert state(engine) == before
    with pytest.raises(error, match=message):  # in a run, even after good prompts: none of them is queued
        engine.run([ps[1], args[0]], [4, args[1]])
    assert state(engine) == before
    # and it serves the others exactly as before
    assert engine.run(ps[1:], 5) == [alone(model, p, 5) for p in ps[1:]]
    assert engine.requests[first].generated == alone(model, ps[0], 6)


def test_bad_run_and_engine_arguments():
    model = make()
    engine = Engine(model, num_blocks=8, block_size=4)
    with pytest.raises(TypeError, match="prompts must be a list of lists of token ids, got Tensor"):
        engine.run(torch.zeros(2, 3, dtype=torch.long), 3)
    with pytest.raises(ValueError, match=r"max_new_tokens needs one count per prompt \(2\), got 1"):
        engine.run([[1], [2]], [3])
    with pytest.raises(ValueError, match="temperature"):
        engine.run([[1]], 3, temperature=-1.0)
    with pytest.raises(ValueError, match="serving needs a causal model"):
        Engine(make(causal=False))
    with pytest.raises(TypeError, match="Engine needs a TransformerLM, got str"):
        Engine("model")
    with pytest.raises(ValueError, match="block_size must be >= 1, got 0"):
        Engine(model, block_size=0)
    with pytest.raises(TypeError, match="continuous must be True or False"):
        Engine(model, continuous=1)
    assert engine.run([[1, 2]], 4) == [alone(model, [1, 2], 4)]


def test_zero_new_tokens_and_tensor_prompts():
    model = make()
    engine = Engine(model, num_blocks=8, block_size=4)
    assert engine.run([[1, 2], torch.tensor([3, 4, 5])], [0, 3]) == [[], alone(model, [3, 4, 5], 3)]
    assert engine.stats.prefill_tokens == 3


# imports point one way: the model knows no serving


def test_only_serving_imports_serving():
    root = pathlib.Path(__file__).parent.parent / "src" / "transformer_steps"
    for path in root.rglob("*.py"):
        if "serving" in path.parts or "course" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "serving" not in (node.module or ""), path
