"""The model on CUDA: bf16 autocast, the SDPA (flash) path against the reference path, and cached == naive
decoding, and no host sync per decoded token. Marked `gpu`: skipped where torch.cuda.is_available() is False (see conftest.py)."""

import pytest
import torch

from conftest import tiny_model
from transformer_steps import CausalSelfAttention, autocast_context, generate
from transformer_steps.generate import decode_one_token, prefill

pytestmark = pytest.mark.gpu
DEVICE = torch.device("cuda")


def make(**changes):
    # a Llama-shaped model off its init: the next-token distributions are not flat
    return tiny_model(0, scale=0.3, **{"vocab_size": 97, "max_seq_len": 64, "d_model": 64, "n_kv_heads": 2,
                                       "norm": "rmsnorm", "ffn": "swiglu", "pos": "rope", "bias": False,
                                       **changes})


def prompt(B=2, T=16, seed=0):
    return torch.randint(0, 97, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("changes", [{}, {"norm": "layernorm", "ffn": "gelu", "pos": "learned", "bias": True},
                                     {"ffn": "moe", "n_experts": 4}])
def test_bf16_autocast_forward_is_close_to_float32_on_cpu(changes):
    model, idx = make(**changes), prompt()
    with torch.no_grad():
        want = model(idx)
        model.to(DEVICE)
        with autocast_context(DEVICE):
            got = model(idx.to(DEVICE))
    assert got.device.type == "cuda" and got.dtype == torch.bfloat16
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float().cpu(), want, atol=0.1, rtol=0.05)


def test_bf16_autocast_backward_gives_finite_grads():
    model, idx = make().to(DEVICE), prompt().to(DEVICE)
    with autocast_context(DEVICE):
        loss = model.loss(idx, idx.roll(-1, dims=1))
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.float32, name
        assert torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_sdpa_path_matches_reference_path_on_cuda(n_kv_heads):
    fast = make(n_kv_heads=n_kv_heads).to(DEVICE)
    ref = make(n_kv_heads=n_kv_heads, attn_impl="reference").to(DEVICE)
    ref.load_state_dict(fast.state_dict())
    idx = prompt(T=48).to(DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(fast(idx), ref(idx), atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_bf16_attention_paths_agree_on_cuda(n_kv_heads):
    """One layer in bf16 (flash kernels): the paths may differ by a few bf16 steps, not more."""
    model = make(n_kv_heads=n_kv_heads).to(DEVICE, torch.bfloat16)
    fast = model.blocks[0].attn
    ref = CausalSelfAttention(model.cfg.replace(attn_impl="reference")).to(DEVICE, torch.bfloat16)
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(2, 48, 64, generator=torch.Generator().manual_seed(3)).to(DEVICE, torch.bfloat16)
    rope = (model.rope_cos[:48], model.rope_sin[:48])
    with torch.no_grad():
        got, want = fast(x, rope=rope), ref(x, rope=rope)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), atol=0.02 * want.abs().max().item(), rtol=0)


def test_chunked_prefill_on_cuda_uses_the_right_mask():
    model, idx = make().to(DEVICE), prompt(T=20).to(DEVICE)
    cache = model.make_cache(2)
    with torch.no_grad():
        full = model(idx)
        pieces = [model(idx[:, a:b], torch.arange(a, b, device=DEVICE), cache) for a, b in ((0, 8), (8, 13), (13, 20))]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.8, "top_k": 20, "top_p": 0.9}])
def test_cached_equals_naive_ids_on_cuda(sampling):
    model, idx = make().to(DEVICE), prompt().to(DEVICE)
    runs = []
    for use_cache in (True, False):
        gen = torch.Generator(device=DEVICE).manual_seed(5)
        runs.append(generate(model, idx, 32, **sampling, use_cache=use_cache, generator=gen, return_logits=True))
    (ids_c, logits_c), (ids_n, logits_n) = runs
    assert ids_c.device.type == DEVICE.type and ids_c.shape == (2, 48)
    assert torch.equal(ids_c, ids_n)
    torch.testing.assert_close(logits_c, logits_n, atol=1e-3, rtol=1e-4)


def test_bf16_model_generates_with_a_bf16_cache():
    model, idx = make().to(DEVICE, torch.bfloat16), prompt().to(DEVICE)
    assert model.make_cache(2)[0].k.dtype == torch.bfloat16
    out = generate(model, idx, 24, temperature=0.0)
    assert out.shape == (2, 40) and torch.equal(out[:, :16], idx)
    assert int(out.min()) >= 0 and int(out.max()) < 97


def test_decode_steps_never_wait_for_the_host():
    """A decode step only queues kernels: CUDA's sync debug mode raises on any call that synchronises (a
    .item(), a device-to-host copy), and the profiler sees no synchronisation and no DtoH copy in the loop.
    The prompt's id check before the loop reads back once (tests/test_generate.py counts it on a CPU)."""
    model, idx = make().to(DEVICE), prompt().to(DEVICE)
    cache = model.make_cache(2, 48)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.inference_mode():
        token = prefill(model, idx, cache).argmax(-1, keepdim=True)
        # as generate does: the position lives on the device and advances in place
        input_pos = torch.tensor([16], device=DEVICE)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities) as prof:
            torch.cuda.set_sync_debug_mode("error")
            try:
                for _ in range(16, 48):
                    token = decode_one_token(model, token, input_pos, cache).argmax(-1, keepdim=True)
                    input_pos += 1
            finally:
                torch.cuda.set_sync_debug_mode("default")
    events = prof.events()
    assert any(e.device_type == torch.autograd.DeviceType.CUDA for e in events)  # it saw the GPU's kernels
    names = {e.name for e in events}
    # a read-back is a DtoH copy and a cudaStreamSynchronize (the profiler's own stop syncs the whole device)
    assert not {n for n in names if "StreamSynchronize" in n or "DtoH" in n}, sorted(names)
