"""TransformerLM: every variant trains (finite gradients), blocks and the whole model by hand, weight tying,
parameter counts, causality, and the token-id checks."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import perturb
from torch import nn

from transformer_steps import Block, ModelConfig, TransformerLM
from transformer_steps.config import FFNS, NORM_POSITIONS, NORMS, POSITIONS
from transformer_steps.norms import LayerNorm, RMSNorm

V, D = 13, 16


def make(seed=0, **changes):
    torch.manual_seed(seed)
    cfg = ModelConfig(**{"vocab_size": V, "max_seq_len": 12, "d_model": D, "n_layers": 2, "n_heads": 4,
                         "n_experts": 3, **changes})
    return TransformerLM(cfg)


def ids(B=2, T=6, seed=0, high=V):
    return torch.randint(0, high, (B, T), generator=torch.Generator().manual_seed(seed))


VARIANTS = list(itertools.product(NORMS, NORM_POSITIONS, FFNS, POSITIONS))


@pytest.mark.parametrize(("norm", "norm_position", "ffn", "pos"), VARIANTS)
def test_every_variant_runs_forward_and_backward(norm, norm_position, ffn, pos):
    model = make(norm=norm, norm_position=norm_position, ffn=ffn, pos=pos, n_kv_heads=2)
    x = ids()
    logits = model(x)
    assert logits.shape == (2, 6, V) and logits.dtype == torch.float32 and torch.isfinite(logits).all()
    loss = model.loss(x, ids(seed=1))
    loss.backward()
    assert torch.isfinite(loss)
    grads = {name: p.grad for name, p in model.named_parameters()}
    for name, grad in grads.items():
        if ".experts." in name and grad is None:
            continue  # an expert no token was routed to gets no gradient
        assert grad is not None, f"{name} got no gradient"
        assert torch.isfinite(grad).all(), f"{name} has a non-finite gradient"
    assert grads["tok_emb.weight"].abs().sum() > 0
    assert grads["blocks.0.attn.qkv.weight"].abs().sum() > 0


@pytest.mark.parametrize(("norm", "norm_position", "ffn", "pos"),
                         [("layernorm", "pre", "gelu", "learned"), ("rmsnorm", "post", "swiglu", "rope"),
                          ("layernorm", "post", "moe", "sinusoidal"), ("rmsnorm", "pre", "relu", "none")])
@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_sdpa_and_reference_models_agree(norm, norm_position, ffn, pos, n_kv_heads):
    kw = {"norm": norm, "norm_position": norm_position, "ffn": ffn, "pos": pos, "n_kv_heads": n_kv_heads}
    fast, ref = make(**kw), make(**kw, attn_impl="reference")
    ref.load_state_dict(fast.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fast(ids(T=9)), ref(ids(T=9)))


def long_side_contiguous(w):
    out_features, in_features = w.shape
    return w.stride() == ((1, out_features) if out_features > in_features else (in_features, 1))


@pytest.mark.parametrize("changes", [{}, {"tie_embeddings": False, "ffn": "swiglu"}, {"ffn": "moe"}])
def test_sdpa_model_stores_each_linear_weight_with_its_longer_side_contiguous(changes):
    """fastpath.long_rows_: the same values as the reference model's row-major weights, another layout, kept
    through load_state_dict, a dtype change and an optimizer step."""
    fast, ref = make(**changes), make(**changes, attn_impl="reference")
    linears = [m.weight for m in fast.modules() if isinstance(m, nn.Linear)]
    assert any(w.shape[0] > w.shape[1] for w in linears) and any(w.shape[0] < w.shape[1] for w in linears)
    assert all(long_side_contiguous(w) for w in linears)
    assert all(m.weight.is_contiguous() for m in ref.modules() if isinstance(m, nn.Linear))
    for (name, a), b in zip(fast.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), name
    fast.load_state_dict(perturb(ref).state_dict())
    opt = torch.optim.AdamW(fast.parameters(), lr=0.1)
    fast.loss(ids(), ids(seed=1)).backward()
    opt.step()
    assert all(long_side_contiguous(w) for w in linears)
    assert all(long_side_contiguous(m.weight) for m in fast.double().modules() if isinstance(m, nn.Linear))


def test_an_out_of_place_draw_gives_a_row_major_models_values():
    """What fastpath.long_rows_'s docstring tells a user: an in-place normal_ depends on the layout, copy_ of a
    fresh draw does not."""
    fast, ref = make(), make(attn_impl="reference")
    w_fast, w_ref = fast.blocks[0].attn.qkv.weight, ref.blocks[0].attn.qkv.weight  # (3 D, D): column-major
    with torch.no_grad():
        w_ref.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(5))
        w_fast.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(5))
        assert not torch.equal(w_fast, w_ref)  # the same seed, other numbers
        w_fast.copy_(torch.empty(w_fast.shape).normal_(0.0, 0.02, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(w_fast, w_ref)


@pytest.mark.parametrize("pos", POSITIONS)
def test_a_future_token_never_changes_earlier_logits(pos):
    model = perturb(make(pos=pos)).eval()
    x = ids(T=8)
    y = x.clone()
    y[:, 5] = (y[:, 5] + 1) % V
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_bidirectional_model_sees_the_future():
    model = perturb(make(causal=False)).eval()
    x = ids(T=8)
    y = x.clone()
    y[:, 5] = (y[:, 5] + 1) % V
    with torch.no_grad():
        assert not torch.allclose(model(x)[:, :5], model(y)[:, :5])


@pytest.mark.parametrize("norm_position", ["pre", "post"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_block_by_hand(norm_position, norm):
    cfg = make(norm=norm, norm_position=norm_position).cfg
    torch.manual_seed(0)
    block = perturb(Block(cfg))
    assert isinstance(block.norm1, LayerNorm if norm == "layernorm" else RMSNorm)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(3))
    attn, ffn, n1, n2 = block.attn, block.ffn, block.norm1, block.norm2
    if norm_position == "pre":
        h = x + attn(n1(x))
        want = h + ffn(n2(h))
    else:
        h = n1(x + attn(x))
        want = n2(h + ffn(h))
    torch.testing.assert_close(block(x), want)


@pytest.mark.parametrize("pos", POSITIONS)
def test_model_by_hand(pos):
    model = perturb(make(pos=pos, tie_embeddings=False)).eval()
    x = ids(T=7)
    h = model.tok_emb.weight[x]
    if pos == "learned":
        h = h + model.pos_emb.weight[:7]
    if pos == "sinusoidal":
        t = torch.arange(7)[:, None].float()
        angle = t / 10000 ** (torch.arange(0, D, 2) / D)
        h = h + torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2)
    rope = (model.rope_cos[:7], model.rope_sin[:7], model.rope_sin_signed[:7]) if pos == "rope" else None
    for block in model.blocks:
        h = block(h, rope=rope)
    want = model.norm_f(h) @ model.lm_head.weight.T
    with torch.no_grad():
        torch.testing.assert_close(model(x), want)
    assert (model.pos_emb is None) == (pos != "learned")


def test_post_norm_model_has_no_final_norm():
    assert isinstance(make(norm_position="post").norm_f, nn.Identity)
    assert isinstance(make(norm_position="pre", norm="rmsnorm").norm_f, RMSNorm)


def test_weight_tying_shares_storage_and_saves_v_times_d():
    tied, untied = make(tie_embeddings=True), make(tie_embeddings=False)
    assert tied.lm_head.weight is tied.tok_emb.weight
    assert tied.lm_head.weight.data_ptr() == tied.tok_emb.weight.data_ptr()
    assert untied.lm_head.weight.data_ptr() != untied.tok_emb.weight.data_ptr()
    assert untied.num_parameters() - tied.num_parameters() == V * D
    with torch.no_grad():  # one write shows through both
        tied.tok_emb.weight[3, 0] = 7.0
    assert tied.lm_head.weight[3, 0] == 7.0
    tied.loss(ids(), ids(seed=1)).backward()
    assert tied.lm_head.weight.grad is tied.tok_emb.weight.grad


@pytest.mark.parametrize("changes", [{}, {"tie_embeddings": False}, {"pos": "rope", "norm": "rmsnorm", "bias": False},
                                     {"ffn": "moe", "n_kv_heads": 2}, {"norm_position": "post"}])
def test_parameter_table_sums_to_num_parameters(changes):
    model = make(**changes)
    table = model.parameter_table()
    assert set(table) == {"token embedding", "positions", "attention", "ffn", "norms", "lm head"}
    assert sum(table.values()) == model.num_parameters() == sum(p.numel() for p in model.parameters())
    assert table["token embedding"] == V * D
    assert table["lm head"] == (0 if model.cfg.tie_embeddings else V * D)
    assert table["positions"] == (12 * D if model.cfg.pos == "learned" else 0)
    assert model.num_parameters(exclude_embeddings=True) == model.num_parameters() - V * D - table["positions"]


def test_parameter_counts_by_formula():
    model = make(bias=True)  # LayerNorm, GELU, learned positions, tied, MHA
    attn = 4 * (D * D + D)
    ffn = D * 4 * D + 4 * D + 4 * D * D + D
    norms = 2 * 2 * D
    table = model.parameter_table()
    assert table["attention"] == 2 * attn and table["ffn"] == 2 * ffn and table["norms"] == 2 * norms + 2 * D
    gqa = make(n_kv_heads=1, bias=False).parameter_table()["attention"]
    assert gqa == 2 * (2 * D * D + 2 * D * (D // 4))  # q and o full, k and v one head each


def test_loss_is_cross_entropy_and_about_log_v_at_init():
    model = make()
    x, y = ids(), ids(seed=1)
    loss = model.loss(x, y)
    torch.testing.assert_close(loss, F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1)))
    assert abs(loss.item() - math.log(V)) < 0.1  # small init: nearly uniform predictions
    with pytest.raises(ValueError, match=r"targets must have the shape of idx \(2, 6\), got \(2, 5\)"):
        model.loss(x, y[:, :5])


def test_dropout_only_in_training_mode():
    model = make(dropout=0.5)
    x = ids()
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    torch.testing.assert_close(model(x), model(x))


@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
def test_every_dropout_runs_in_training_and_none_in_eval(ffn):
    model = make(dropout=0.5, ffn=ffn)
    called = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            module.register_forward_hook(lambda m, args, out, name=name: called.append(name))
    expected = ["dropout"] + [f"blocks.{i}.{part}" for i in range(len(model.blocks))
                              for part in ("attn.resid_dropout", "ffn.dropout")]
    model.train()(ids())
    assert called == expected
    called.clear()
    model.eval()(ids())
    assert called == []


def test_start_pos_shifts_the_positions():
    model = perturb(make(pos="learned")).eval()
    x = ids(T=3)
    with torch.no_grad():
        shifted = model(x, start_pos=4)
        assert not torch.allclose(shifted, model(x))
    nopos = perturb(make(pos="none")).eval()
    with torch.no_grad():  # without positions the start does not matter
        torch.testing.assert_close(nopos(x, start_pos=4), nopos(x))


@pytest.mark.parametrize(("bad", "error", "message"), [
    (torch.tensor([[1, 2, V]]), ValueError, rf"token ids must be in \[0, {V}\), got values in \[1, {V}\]"),
    (torch.tensor([[-1, 2]]), ValueError, rf"token ids must be in \[0, {V}\), got values in \[-1, 2\]"),
    (torch.tensor([[1.0, 2.0]]), TypeError, "must be an integer tensor.*float32"),
    (torch.tensor([[True, False]]), TypeError, "must be an integer tensor.*bool"),
    (torch.tensor([1, 2, 3]), ValueError, r"shape \(batch, time\), got 1 dims \(3,\)"),
    (torch.zeros(1, 2, 3, dtype=torch.long), ValueError, r"got 3 dims \(1, 2, 3\)"),
    (torch.zeros(2, 0, dtype=torch.long), ValueError, r"token ids are empty \(2, 0\)"),
    (torch.zeros(0, 3, dtype=torch.long), ValueError, r"token ids are empty \(0, 3\)"),
    (torch.zeros(1, 13, dtype=torch.long), ValueError, "sequence too long: positions up to 13 but max_seq_len is 12"),
    ([[1, 2]], TypeError, "token ids must be a torch.Tensor, got list"),
])
def test_bad_token_ids(bad, error, message):
    model = make()
    with pytest.raises(error, match=message):
        model(bad)


def test_bad_start_pos_and_cache_and_config():
    model = make()
    x = ids(T=3)
    with pytest.raises(ValueError, match="start_pos must be >= 0, got -1"):
        model(x, start_pos=-1)
    with pytest.raises(TypeError, match="start_pos must be an int, got float 1.0"):
        model(x, start_pos=1.0)
    with pytest.raises(ValueError, match="positions up to 13 but max_seq_len is 12"):
        model(x, start_pos=10)
    with pytest.raises(ValueError, match=r"one KVCache per layer \(2\), got 1"):
        model(x, cache=model.make_cache(2)[:1])
    with pytest.raises(TypeError, match="TransformerLM needs a ModelConfig, got dict"):
        TransformerLM({"vocab_size": V})


def test_loss_rejects_targets_outside_the_vocabulary():
    cfg = ModelConfig(vocab_size=13, max_seq_len=8, d_model=8, n_layers=1, n_heads=2)
    model = TransformerLM(cfg)
    idx = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"targets must be in \[0, 13\), got values in \[0, 13\]"):
        model.loss(idx, torch.tensor([[0, 1, 2, 13]]))
    with pytest.raises(TypeError, match="targets must be an integer tensor of token ids, got torch.float32"):
        model.loss(idx, torch.zeros(1, 4))
