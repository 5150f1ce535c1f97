"""Feed-forward networks by hand: the ReLU/GELU MLP, SwiGLU, and the top-k mixture of experts."""

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import randn
from transformer_steps import ModelConfig, TransformerLM
from transformer_steps.ffn import MLP, MoE, SwiGLU, act, make_ffn
from transformer_steps.train import TrainConfig, train


def make(ffn, seed=0, **changes):
    cfg = ModelConfig(vocab_size=5, max_seq_len=4, d_model=8, n_layers=1, n_heads=2, ffn=ffn, d_ff=12,
                      **{"n_experts": 4, "experts_per_token": 2, **changes})
    module = make_ffn(cfg)
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):  # biases start at zero: make every parameter count
            p.copy_(randn(*p.shape, seed=seed + i))
    return module


def test_activations():
    x = torch.linspace(-4, 4, 33)
    torch.testing.assert_close(act("relu")(x), x.clamp(min=0))
    gelu_tanh = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))  # GPT-2's formula
    torch.testing.assert_close(act("gelu")(x), gelu_tanh)
    assert not torch.allclose(act("gelu")(x), F.gelu(x), atol=1e-5)  # differs from the exact erf GELU
    with pytest.raises(ValueError, match="unknown activation 'swish'; allowed: relu, gelu"):
        act("swish")


@pytest.mark.parametrize("ffn", ["relu", "gelu"])
def test_mlp_by_hand(ffn):
    mlp = make(ffn)
    assert isinstance(mlp, MLP)
    x = randn(2, 3, 8, seed=10)
    W1, b1, W2, b2 = mlp.fc.weight.T, mlp.fc.bias, mlp.proj.weight.T, mlp.proj.bias  # row-vector x W
    h = x @ W1 + b1
    h = h.clamp(min=0) if ffn == "relu" else 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    torch.testing.assert_close(mlp(x), h @ W2 + b2)
    assert mlp.fc.weight.shape == (12, 8) and mlp.proj.weight.shape == (8, 12)


def test_mlp_without_bias():
    mlp = make("gelu", bias=False)
    assert mlp.fc.bias is None and mlp.proj.bias is None


def test_swiglu_by_hand():
    ffn = make("swiglu")
    assert isinstance(ffn, SwiGLU)
    x = randn(2, 3, 8, seed=11)
    W_gate, W_up = ffn.gate_up.weight.chunk(2)  # rows [0, d_ff) gate, [d_ff, 2 d_ff) up
    b_gate, b_up = ffn.gate_up.bias.chunk(2)
    a = x @ W_gate.T + b_gate
    silu = a * torch.sigmoid(a)
    want = (silu * (x @ W_up.T + b_up)) @ ffn.down.weight.T + ffn.down.bias
    torch.testing.assert_close(ffn(x), want)


def moe_by_hand(moe, x):
    """One token at a time: softmax over experts, keep the k largest, renormalise, sum the k experts."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.zeros_like(flat)
    for n, token in enumerate(flat):
        probs = torch.softmax(token @ moe.router.weight.T, dim=-1)
        best = sorted(range(moe.n_experts), key=lambda e: -probs[e])[: moe.k]
        total = sum(probs[e] for e in best)
        for e in best:
            out[n] += probs[e] / total * moe.experts[e](token)
    return out.view(x.shape)


def test_moe_routing_gates_and_output():
    moe = make("moe")
    assert isinstance(moe, MoE) and len(moe.experts) == 4 and all(isinstance(e, SwiGLU) for e in moe.experts)
    x = randn(3, 5, 8, seed=12)
    with torch.no_grad():
        y = moe(x)
        torch.testing.assert_close(y, moe_by_hand(moe, x))
    ids, gates = moe.last_expert_ids, moe.last_gates
    assert ids.shape == gates.shape == (15, 2)
    torch.testing.assert_close(gates.sum(-1), torch.ones(15))
    assert (gates > 0).all()
    assert all(len(set(row)) == 2 for row in ids.tolist())  # exactly k distinct experts per token
    probs = torch.softmax(x.reshape(15, 8) @ moe.router.weight.T, dim=-1)
    assert torch.equal(ids, probs.topk(2, dim=-1).indices)


def test_moe_expert_load_counts_tokens():
    moe = make("moe")
    with pytest.raises(RuntimeError, match="needs a forward pass first"):
        moe.expert_load()
    with torch.no_grad():
        moe(randn(4, 6, 8, seed=13))
    load = moe.expert_load()
    assert load.shape == (4,) and int(load.sum()) == 24 * 2
    assert load.tolist() == [int((moe.last_expert_ids == e).sum()) for e in range(4)]
    assert (load <= 24).all()  # an expert sees a token at most once


@pytest.mark.parametrize("k", [1, 2])
def test_moe_balance_loss_is_one_when_balanced_and_n_experts_when_one_expert_takes_all(k):
    moe = make("moe", experts_per_token=k)  # 4 experts, 8 tokens
    even = torch.arange(8 * k).remainder(4).view(8, k)  # each expert chosen 2k times
    # each token's probability 0.6 on its own choices: each expert's mean probability is still 1/4
    probs = 0.1 + 0.6 / k * F.one_hot(even, 4).sum(1).float()
    assert moe.balance_loss(probs, even).item() == pytest.approx(1.0)
    one = torch.zeros(8, k, dtype=torch.long) + torch.arange(k)  # experts 0 .. k-1 take every token
    concentrated = F.one_hot(torch.zeros(8, dtype=torch.long), 4).float()
    assert moe.balance_loss(concentrated, one).item() == pytest.approx(4 / k)  # n_experts for top-1
    # in a training forward pass: a zero router gives equal probabilities, so the loss is 1 however ties route
    with torch.no_grad():
        moe.router.weight.zero_()
    moe.train()(randn(2, 4, 8, seed=14))
    assert moe.aux_loss.item() == pytest.approx(1.0)


def test_moe_with_every_expert_is_a_softmax_weighted_sum():
    cfg = ModelConfig(vocab_size=5, max_seq_len=4, d_model=8, n_layers=1, n_heads=2, ffn="moe", d_ff=12,
                      n_experts=3, experts_per_token=3)
    moe = MoE(cfg)
    x = randn(7, 8, seed=15)
    probs = torch.softmax(x @ moe.router.weight.T, dim=-1)
    want = sum(probs[:, e, None] * moe.experts[e](x) for e in range(3))
    torch.testing.assert_close(moe(x), want)
    assert moe.expert_load().tolist() == [7, 7, 7]


def test_bf16_router_probabilities_and_gates_are_computed_in_float32():
    """A bf16 MoE: the softmax over experts and the renormalised top-k gates in float32, rounded to bf16 once,
    equal a float64 reference rounded once (a bf16 softmax and division round twice: about a third differ)."""
    cfg = ModelConfig(vocab_size=5, max_seq_len=4, d_model=32, n_layers=1, n_heads=2, ffn="moe", d_ff=12,
                      n_experts=8, experts_per_token=3)
    torch.manual_seed(0)
    moe = MoE(cfg).bfloat16()
    x = randn(256, 32, seed=17).bfloat16()
    with torch.no_grad():
        moe(x)
        top_p, top_i = torch.softmax(moe.router(x).double(), dim=-1).topk(3, dim=-1)
    assert moe.last_gates.dtype == torch.bfloat16 and torch.equal(moe.last_expert_ids, top_i)
    assert torch.equal(moe.last_gates, (top_p / top_p.sum(-1, keepdim=True)).bfloat16())


def test_moe_router_and_experts_get_gradients():
    moe = make("moe")
    moe(randn(2, 5, 8, seed=16)).pow(2).sum().backward()
    assert moe.router.weight.grad is not None and moe.router.weight.grad.abs().sum() > 0
    used = set(moe.last_expert_ids.flatten().tolist())
    for e, expert in enumerate(moe.experts):
        assert (expert.down.weight.grad is not None) == (e in used)


def skewed_moe_model(aux_weight):
    """A one-layer MoE model whose router sends every token to expert 0 at the start."""
    cfg = ModelConfig(vocab_size=32, max_seq_len=16, d_model=16, n_layers=1, n_heads=2, ffn="moe", n_experts=4,
                      experts_per_token=1, moe_aux_weight=aux_weight)
    torch.manual_seed(0)
    model = TransformerLM(cfg)
    with torch.no_grad():
        model.blocks[0].ffn.router.weight[0] += 0.05  # expert 0 scores higher for inputs with a positive sum ...
        model.blocks[0].norm2.bias += 1.0  # ... and the FFN's inputs now have one
    return model


def busiest_expert_share(model, x):
    with torch.no_grad():
        model.train()(x)
    load = model.blocks[0].ffn.expert_load()
    return (load.max() / load.sum()).item()


def test_model_loss_adds_the_weighted_balance_loss_in_training_only():
    x = torch.randint(32, (4, 16), generator=torch.Generator().manual_seed(2))
    with_aux, without = skewed_moe_model(0.1).train(), skewed_moe_model(0.0).train()
    loss_with, loss_without = with_aux.loss(x[:, :-1], x[:, 1:]), without.loss(x[:, :-1], x[:, 1:])
    aux = with_aux.blocks[0].ffn.aux_loss
    torch.testing.assert_close(loss_with, loss_without + 0.1 * aux)
    with torch.no_grad():
        with_aux.eval()(x)
    assert with_aux.blocks[0].ffn.aux_loss is None  # not computed in eval (decode steps)
    torch.testing.assert_close(with_aux.loss(x[:, :-1], x[:, 1:]), without.eval().loss(x[:, :-1], x[:, 1:]))


def test_training_with_the_balance_loss_spreads_a_skewed_router():
    data = torch.randint(32, (4_000,), generator=torch.Generator().manual_seed(1))
    x = torch.randint(32, (8, 16), generator=torch.Generator().manual_seed(2))
    run = TrainConfig(steps=40, batch_size=8, block_size=16, lr=1e-2, min_lr=1e-3, warmup_steps=0, eval_batches=1)
    shares = {}
    for weight in (0.0, 0.1):
        model = skewed_moe_model(weight)
        assert busiest_expert_share(model, x) == 1.0  # all 128 tokens on one expert
        train(model, data, data, run, progress=False)
        shares[weight] = busiest_expert_share(model, x)
    assert shares[0.0] == 1.0  # the language-model loss alone leaves the router collapsed
    assert shares[0.1] < 0.5  # balanced would be 0.25
