"""compiled.py: the static-shape decode step computes generate's logits (uncompiled, every model variant), the
compiled one generates generate's greedy ids and compiles once (one tiny model), and every bad argument."""

import pytest
import torch
from conftest import perturb

from transformer_steps import ModelConfig, TransformerLM, decode_one_token, generate
from transformer_steps.compiled import CompiledDecoder, compile_unavailable_reason, generate_compiled

V = 19


def make(seed=0, **changes):
    torch.manual_seed(seed)
    cfg = ModelConfig(**{"vocab_size": V, "max_seq_len": 32, "d_model": 16, "n_layers": 2, "n_heads": 4,
                         "n_experts": 3, **changes})
    return perturb(TransformerLM(cfg), seed=seed + 1, scale=0.5).eval()  # peaked, not flat, next-token logits


def prompt(B=2, T=5, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# the variants of test_generate: learned/sinusoidal/RoPE/no positions, Pre/Post-LN, GQA, MoE, reference attention
VARIANTS = [{}, {"pos": "rope", "norm": "rmsnorm", "ffn": "swiglu", "n_kv_heads": 2, "bias": False,
                 "tie_embeddings": False},
            {"pos": "sinusoidal", "norm_position": "post", "ffn": "relu"}, {"pos": "none", "ffn": "moe", "n_kv_heads": 1},
            {"attn_impl": "reference", "pos": "rope", "n_kv_heads": 2}]


@pytest.mark.parametrize("changes", VARIANTS)
def test_static_step_computes_the_forwards_logits_at_every_position(changes):
    model, idx = make(**changes), prompt()
    decoder = CompiledDecoder(model, batch_size=2, max_len=20, backend=None)  # the static step, uncompiled
    cache = model.make_cache(2, 20)
    with torch.inference_mode():
        token = model(idx, cache=cache)[:, -1:].argmax(-1)
        decoder.prefill(idx)
        for pos in range(5, 20):
            expected = decode_one_token(model, token, pos, cache)
            got = decoder.step(token, pos)  # attends over all 20 positions, the unwritten ones masked
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            token = expected.argmax(-1, keepdim=True)
    assert decoder.cache[0].length == 20


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_uncompiled_decoder_gives_generates_ids_and_masks_a_stale_cache(mode):
    model = make(**VARIANTS[1])
    decoder = CompiledDecoder(model, batch_size=2, max_len=24, mode=mode, backend=None)
    long, short = prompt(T=9, seed=1), prompt(T=3, seed=2)
    assert torch.equal(decoder.generate(long, 15), generate(model, long, 15, temperature=0.0))
    # positions 3..23 still hold the long sequence's keys: the mask must hide those past each step's position
    assert torch.equal(decoder.generate(short, 6), generate(model, short, 6, temperature=0.0))
    assert torch.equal(decoder.generate(short, 0), short)


def test_the_traced_step_compiles_once_for_every_position():
    """dynamo's tracing with the "eager" backend (no C++ compiler needed): one graph, no recompiles."""
    pytest.importorskip("torch._dynamo")
    model, idx = make(**VARIANTS[1]), prompt()
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        out = generate_compiled(model, idx, 10, max_len=20, backend="eager")
    assert torch.equal(out, generate(model, idx, 10, temperature=0.0))


@pytest.mark.slow
def test_compiled_greedy_ids_equal_generate():
    """The one inductor compile of the suite (15-20 s cold): the generated C++ step, on one tiny Llama."""
    reason = compile_unavailable_reason("cpu")
    if reason:
        pytest.skip(reason)
    model = make(**VARIANTS[1])
    decoder = CompiledDecoder(model, batch_size=2, max_len=24)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for idx, n in ((prompt(T=9, seed=1), 15), (prompt(T=3, seed=2), 6)):  # the second over a stale cache
            assert torch.equal(decoder.generate(idx, n), generate(model, idx, n, temperature=0.0))


def test_compile_unavailable_reason_names_what_is_missing(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "C++ compiler" in compile_unavailable_reason("cpu")


def test_bad_arguments():
    model = make()
    with pytest.raises(TypeError, match="TransformerLM"):
        CompiledDecoder(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"max_len must be in \[1, 32\]"):
        CompiledDecoder(model, max_len=33)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        CompiledDecoder(model, batch_size=1.0)
    with pytest.raises(ValueError, match="unknown mode"):
        CompiledDecoder(model, mode="fast")
    with pytest.raises(TypeError, match="backend"):
        CompiledDecoder(model, backend=3)
    with pytest.raises(ValueError, match="causal"):
        CompiledDecoder(make(causal=False))
    decoder = CompiledDecoder(model, batch_size=2, max_len=8, backend=None)
    with pytest.raises(ValueError, match="batch_size=2"):
        decoder.generate(prompt(B=1), 2)
    with pytest.raises(ValueError, match=r"max_len \(8\)"):
        decoder.generate(prompt(T=5), 4)
    with pytest.raises(TypeError, match="token ids"):
        decoder.generate(prompt().float(), 2)
    decoder.prefill(prompt(T=5))
    with pytest.raises(ValueError, match="next position, 5"):
        decoder.step(prompt(T=1), 6)
