"""generate: the cached path equals the naive one (ids and logits at every step), greedy and sampling rules,
seeded reproducibility, and every bad argument."""

import math
import weakref

import pytest
import torch

from conftest import tiny_model
from transformer_steps import decode_one_token, generate, prefill, sample_next

V = 19


def make(seed=0, **changes):
    # a larger spread than the init, so the next-token distributions are not flat
    return tiny_model(seed, scale=0.5, **{"vocab_size": V, **changes})


def prompt(B=2, T=5, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


VARIANTS = [{}, {"pos": "rope", "norm": "rmsnorm", "ffn": "swiglu", "n_kv_heads": 2, "bias": False,
                 "tie_embeddings": False},
            {"pos": "sinusoidal", "norm_position": "post", "ffn": "relu"}, {"pos": "none", "ffn": "moe", "n_kv_heads": 1},
            {"attn_impl": "reference", "pos": "rope"}]


@pytest.mark.parametrize("changes", VARIANTS)
def test_cached_equals_naive_ids_and_logits_at_every_step(changes):
    """The naive loop runs the full forward on every prefix: the cached one must give its logits at every step,
    and the same sampled ids (temperature, top-k and top-p together, one seed)."""
    model, idx, sampling = make(**changes), prompt(), {"temperature": 1.3, "top_k": 8, "top_p": 0.9}
    out_c, logits_c = generate(model, idx, 12, **sampling, generator=torch.Generator().manual_seed(7),
                               use_cache=True, return_logits=True)
    out_n, logits_n = generate(model, idx, 12, **sampling, generator=torch.Generator().manual_seed(7),
                               use_cache=False, return_logits=True)
    assert out_c.shape == (2, 17) and torch.equal(out_c[:, :5], idx)
    assert torch.equal(out_c, out_n)
    assert logits_c.shape == (2, 12, V)
    # different matmul shapes round differently in the last float32 digits
    torch.testing.assert_close(logits_c, logits_n, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("return_logits", [True, False])
def test_step_logits_are_kept_only_when_asked_for(use_cache, return_logits):
    # the memory of every step's logits, by weak reference: alive two steps later, it is being kept
    model, idx, memory = make(), prompt(), []
    model.lm_head.register_forward_hook(lambda m, args, out: memory.append(weakref.ref(out.untyped_storage())))
    alive = []

    def count_kept(module, args, out):
        alive.append(sum(ref() is not None for ref in memory[:-2]))

    model.norm_f.register_forward_hook(count_kept)
    generate(model, idx, 10, temperature=0.0, use_cache=use_cache, return_logits=return_logits)
    # at the last step: the logits of steps 1 to 7 (of 9 so far)
    assert len(memory) == len(alive) == 10
    assert alive[-1] == (7 if return_logits else 0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_temperature_zero_is_argmax(use_cache):
    model, idx = make(), prompt()
    out = generate(model, idx, 8, temperature=0.0, use_cache=use_cache)
    seq = idx
    with torch.no_grad():
        for _ in range(8):
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_top_k_one_and_tiny_top_p_are_greedy():
    model, idx = make(pos="rope"), prompt()
    greedy = generate(model, idx, 10, temperature=0.0)
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(generate(model, idx, 10, temperature=1.5, top_k=1, generator=gen), greedy)
    assert torch.equal(generate(model, idx, 10, temperature=1.5, top_p=1e-6, generator=gen), greedy)


def test_batched_rows_equal_generating_each_prompt_alone():
    model, idx = make(pos="rope", n_kv_heads=2), prompt(B=3)
    out = generate(model, idx, 7, temperature=0.0)
    for b in range(3):
        assert torch.equal(out[b:b + 1], generate(model, idx[b:b + 1], 7, temperature=0.0))


def test_seeded_sampling_is_reproducible():
    model, idx = make(), prompt()

    def sample(seed):
        return generate(model, idx, 15, temperature=1.0, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(sample(3), sample(3))
    assert not torch.equal(sample(3), sample(4))


@pytest.mark.parametrize("use_cache", [True, False])
def test_zero_new_tokens_returns_the_prompt(use_cache):
    model, idx = make(), prompt()
    out, logits = generate(model, idx, 0, use_cache=use_cache, return_logits=True)
    assert torch.equal(out, idx) and logits.shape == (2, 0, V)
    assert torch.equal(generate(model, idx, 0), idx)


def test_prefill_and_decode_one_token_match_the_full_forward():
    model, idx = make(pos="rope"), prompt(T=6)
    cache = model.make_cache(2)
    with torch.no_grad():
        full = model(idx)
        torch.testing.assert_close(prefill(model, idx[:, :4], cache), full[:, 3])
        torch.testing.assert_close(decode_one_token(model, idx[:, 4:5], 4, cache), full[:, 4])
        # generate's form: the position as a tensor on the device
        torch.testing.assert_close(decode_one_token(model, idx[:, 5:6], torch.tensor([5]), cache), full[:, 5])


def sample_counts(logits, n=4000, **kw):
    rows = logits.expand(n, -1)
    ids = sample_next(rows, generator=torch.Generator().manual_seed(0), **kw)
    assert ids.shape == (n, 1) and ids.dtype == torch.long
    return torch.bincount(ids.flatten(), minlength=logits.shape[-1]).float() / n


def test_sample_next_rules_by_hand():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]])
    logits = probs.log()
    assert sample_next(logits, temperature=0.0).tolist() == [[1]]
    # plain sampling follows the softmax
    torch.testing.assert_close(sample_counts(logits), probs[0], atol=0.03, rtol=0)
    # top_k=2 keeps tokens 1 and 3, renormalised
    torch.testing.assert_close(sample_counts(logits, top_k=2), torch.tensor([0, 0.5, 0, 0.3]) / 0.8, atol=0.03, rtol=0)
    # top_p=0.75: 0.5 < 0.75, 0.5 + 0.3 reaches it -> keep {1, 3}; top_p=0.85 also keeps token 2
    assert sample_counts(logits, top_p=0.75)[[0, 2]].sum() == 0
    kept = sample_counts(logits, top_p=0.85)
    assert kept[0] == 0 and (kept[1:] > 0).all()
    # temperature 2 flattens: probabilities proportional to sqrt(p)
    flat = probs[0].sqrt() / probs[0].sqrt().sum()
    torch.testing.assert_close(sample_counts(logits, temperature=2.0), flat, atol=0.03, rtol=0)
    # top_k=3 of 4 drops the least likely token; top_p=0.5 over two equal tokens keeps one: the second has
    # 0.5 ranked above it, which reaches top_p
    assert sample_counts(logits, top_k=3)[0] == 0
    assert sample_counts(torch.zeros(1, 2), top_p=0.5).tolist() in ([1.0, 0.0], [0.0, 1.0])
    # top_k larger than the vocabulary changes nothing
    torch.testing.assert_close(sample_counts(logits, top_k=10), sample_counts(logits))


@pytest.mark.parametrize("use_cache", [True, False])
def test_prompt_plus_new_tokens_may_fill_max_seq_len_exactly(use_cache):
    model, idx = make(), prompt()  # 5 tokens, max_seq_len 24
    assert generate(model, idx, 19, temperature=0.0, use_cache=use_cache).shape == (2, 24)
    with pytest.raises(ValueError, match=r"prompt \(5\) \+ max_new_tokens \(20\) = 25 exceeds max_seq_len \(24\)"):
        generate(model, idx, 20, use_cache=use_cache)


def test_sampling_arguments_accept_the_ends_of_their_ranges():
    """The smallest temperature and top_p above 0 (5e-324, which float32 flushes to 0) are greedy decoding, as
    top_k=1 is; top_p=1.0 samples from the whole softmax."""
    model, idx = make(), prompt()
    greedy = generate(model, idx, 6, temperature=0.0)
    smallest = math.ulp(0.0)
    for kwargs in ({"temperature": smallest}, {"top_k": 1}, {"top_p": smallest}):
        assert torch.equal(generate(model, idx, 6, generator=torch.Generator().manual_seed(0), **kwargs), greedy)
    assert generate(model, idx, 6, top_p=1.0, generator=torch.Generator().manual_seed(0)).shape == (2, 11)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens must be >= 0, got -1"),
    ({"max_new_tokens": 2.0}, TypeError, "max_new_tokens must be an int, got float"),
    ({"max_new_tokens": 20}, ValueError, r"prompt \(5\) \+ max_new_tokens \(20\) = 25 exceeds max_seq_len \(24\)"),
    ({"temperature": -0.5}, ValueError, r"temperature \(0 = greedy\) must be >= 0, got -0.5"),
    ({"temperature": -math.ulp(0.0)}, ValueError, r"temperature \(0 = greedy\) must be >= 0, got -5e-324"),
    ({"temperature": float("nan")}, ValueError, r"temperature \(0 = greedy\) must be >= 0, got nan"),
    ({"temperature": "1"}, TypeError, "temperature .* must be a number, got str"),
    ({"top_p": 0.0}, ValueError, r"top_p must be in \(0, 1\], got 0.0"),
    ({"top_p": 1.5}, ValueError, r"top_p must be in \(0, 1\], got 1.5"),
    ({"top_p": math.nextafter(1.0, 2.0)}, ValueError, r"top_p must be in \(0, 1\], got 1.0000000000000002"),
    ({"top_k": 0}, ValueError, "top_k must be >= 1, got 0"),
    ({"top_k": 2.0}, TypeError, "top_k must be an int, got float 2.0"),
])
def test_bad_sampling_arguments(kwargs, error, message):
    model = make()
    kwargs = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(error, match=message):
        generate(model, prompt(), **kwargs)


@pytest.mark.parametrize(("idx", "error", "message"), [
    (torch.zeros(1, 0, dtype=torch.long), ValueError, "token ids are empty"),
    (torch.tensor([[3, V]]), ValueError, rf"token ids must be in \[0, {V}\)"),
    (torch.tensor([[1.0, 2.0]]), TypeError, "integer tensor"),
    (torch.tensor([1, 2]), ValueError, r"shape \(batch, time\)"),
    (torch.zeros(1, 25, dtype=torch.long), ValueError, "sequence too long"),
])
def test_bad_prompts(idx, error, message):
    with pytest.raises(error, match=message):
        generate(make(), idx, 1)


def test_decode_steps_run_in_inference_mode_on_one_position_tensor_advanced_in_place():
    """What cached_loop states: no autograd bookkeeping (inference mode, not just no_grad), and one position
    tensor on the device, advanced in place, for every step."""
    seen = []

    def recording_step(model, token, input_pos, cache):
        seen.append((input_pos, int(input_pos), torch.is_inference_mode_enabled()))
        return decode_one_token(model, token, input_pos, cache)

    generate(make(), prompt(), 5, temperature=0.0, decode=recording_step)  # 5-token prompt: steps at 5 .. 8
    assert len({id(pos) for pos, _, _ in seen}) == 1
    assert [(value, inference) for _, value, inference in seen] == [(5, True), (6, True), (7, True), (8, True)]


def test_decode_must_be_a_function():
    with pytest.raises(TypeError, match="decode must be a function like decode_one_token, got str"):
        generate(make(), prompt(), 2, decode="compiled")


def test_generate_refuses_a_bidirectional_model():
    with pytest.raises(ValueError, match=r"generate needs a causal model \(cfg.causal=True\)"):
        generate(make(causal=False), prompt(), 2)


@pytest.mark.parametrize("use_cache", [True, False])
def test_outputs_are_ordinary_tensors_usable_with_autograd(use_cache):
    # generate runs under inference_mode for speed; what it returns must still work in a training step
    model = make(pos="rope", norm="rmsnorm", ffn="swiglu").train()
    out, logits = generate(model, prompt(), 4, temperature=0.0, use_cache=use_cache, return_logits=True)
    assert not out.is_inference() and not logits.is_inference()
    model.loss(out[:, :-1], out[:, 1:]).backward()
    assert model.tok_emb.weight.grad is not None


def count_host_reads(monkeypatch):
    """Count the calls that copy a tensor's values to Python (each one a device-to-host sync on a GPU)."""
    calls = []
    for name in ("item", "tolist", "__int__", "__float__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name):
            calls.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return calls


def test_decode_steps_read_nothing_back_and_a_prompt_is_checked_once(monkeypatch):
    model = make().eval()
    idx = prompt()
    cache = model.make_cache(idx.shape[0], 12)
    calls = count_host_reads(monkeypatch)
    with torch.no_grad():
        logits = prefill(model, idx, cache)
        # the ids' and positions' ranges, min and max, in one copy
        assert calls == ["tolist"]
        calls.clear()
        for pos in range(idx.shape[1], 10):
            logits = decode_one_token(model, logits.argmax(-1, keepdim=True), pos, cache)
    assert calls == []
    # and the whole of generate: the prompt's check, then nothing
    generate(model, idx, 6, temperature=0.0)
    assert calls == ["tolist"]


def test_a_mutated_step_that_reads_back_is_caught(monkeypatch):
    """The host-read count can fail: a decode step that checks its token (as forward does by default)
    reads each token back."""
    model, idx = make(), prompt()

    def checking_step(model, token, input_pos, cache):
        return model(token, input_pos, cache)[:, -1]

    calls = count_host_reads(monkeypatch)
    generate(model, idx, 6, temperature=0.0, decode=checking_step)
    assert calls == ["tolist"] * 6


def test_a_compiled_decode_step_gives_generates_ids():
    """torch.compile(decode_one_token) over the same forward (dynamo's tracing only, no code generation, so the
    test takes seconds): the same greedy ids, and one graph for every position."""
    from transformer_steps.device import compile_unavailable_reason

    if compile_unavailable_reason() and "C++" not in compile_unavailable_reason():
        pytest.skip(compile_unavailable_reason())
    import torch._dynamo

    torch._dynamo.reset()
    frames = []
    step = torch.compile(decode_one_token, backend=lambda gm, inputs: frames.append(gm) or gm.forward)
    for changes in ({}, {"pos": "rope", "norm": "rmsnorm", "ffn": "swiglu", "n_kv_heads": 2}):
        model, idx = make(**changes), prompt()
        want = generate(model, idx, 10, temperature=0.0)
        assert torch.equal(generate(model, idx, 10, temperature=0.0, decode=step), want)
    # one graph per model, reused at every position
    assert len(frames) == 2


def test_a_training_loss_reads_back_once_per_tensor(monkeypatch):
    model = make()
    idx = prompt()
    calls = count_host_reads(monkeypatch)
    model.loss(idx[:, :-1], idx[:, 1:])
    assert calls == ["tolist", "tolist"]  # targets' range, then the ids' range
