"""Shared pytest set-up: one torch thread per test, the helpers many test files use, and a skip for
`gpu`-marked tests where CUDA is absent. torch is imported only when a test needs it, so that
`pytest tests/test_lint.py` stays fast."""

import sys

import pytest


def randn(*shape, seed=0):
    """A seeded standard-normal tensor from its own CPU generator: the same numbers in every test run."""
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def perturb(module, seed=1, scale=0.2):
    """Move every parameter off its init (zero biases, unit norm weights) so each one matters; returns module."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return module


def tiny_model(seed=0, scale=0.0, **changes):
    """A seeded tiny TransformerLM (vocabulary 13, width 16, 2 layers of 4 heads, 24 positions, 3 experts for
    ffn="moe") with changes to its config, in eval mode; scale > 0 moves every parameter off its init
    (perturb), so that biases, norms and the next-token distributions matter."""
    import torch

    from transformer_steps import ModelConfig, TransformerLM

    torch.manual_seed(seed)
    cfg = ModelConfig(**{"vocab_size": 13, "max_seq_len": 24, "d_model": 16, "n_layers": 2, "n_heads": 4,
                         "n_experts": 3, **changes})
    model = TransformerLM(cfg).eval()
    return perturb(model, seed=seed + 1, scale=scale) if scale else model


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny tensors: extra threads only spin, and the test machine is shared."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch  # imported only when a gpu test was collected

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
