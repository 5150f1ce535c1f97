"""TransformerLM: every variant trains (finite gradients), what a block does, the whole model by hand, weight
tying, parameter counts, causality, plain PyTorch storage (safetensors), and the input checks."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import perturb, tiny_model
from transformer_steps import Block, ModelConfig, TransformerLM
from transformer_steps.config import FFNS, NORM_POSITIONS, NORMS, POSITIONS
from transformer_steps.norms import LayerNorm

V, D = 13, 16


def make(seed=0, **changes):
    return tiny_model(seed, **{"max_seq_len": 12, **changes}).train()


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


def test_the_same_seed_gives_the_same_weights_whichever_kernel():
    sdpa, reference = make(attn_impl="sdpa"), make(attn_impl="reference")
    for (name, a), b in zip(sdpa.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("changes", [{}, {"tie_embeddings": False, "ffn": "swiglu", "pos": "rope"}])
def test_every_parameter_is_plain_row_major_and_safetensors_round_trips(tmp_path, changes):
    safetensors = pytest.importorskip("safetensors.torch")
    model = perturb(make(**changes))
    assert all(p.is_contiguous() for p in model.parameters())
    # safetensors stores a tied matrix once: save_model and load_model know the tie
    safetensors.save_model(model, tmp_path / "model.safetensors")
    copy = make(seed=1, **changes)
    safetensors.load_model(copy, tmp_path / "model.safetensors")
    for (name, a), b in zip(model.state_dict().items(), copy.state_dict().values()):
        assert torch.equal(a, b), name
    assert (copy.lm_head.weight is copy.tok_emb.weight) == model.cfg.tie_embeddings
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(copy.eval()(x), model.eval()(x), rtol=0, atol=0)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_for_cpu_decode_is_an_opt_in_layout_with_the_same_values_and_outputs(norm):
    from transformer_steps.fastpath import BuiltinLayerNorm, BuiltinRMSNorm, for_cpu_decode
    from transformer_steps.norms import LayerNorm, RMSNorm

    plain = perturb(make(tie_embeddings=False, ffn="swiglu", norm=norm)).eval()
    fast = for_cpu_decode(make(tie_embeddings=False, ffn="swiglu", norm=norm).eval())
    fast.load_state_dict(plain.state_dict())
    # every norm computed in one kernel, with the same parameters (the state dict keys stay)
    norms = [m for m in fast.modules() if isinstance(m, (LayerNorm, RMSNorm))]
    assert norms and all(type(m) in (BuiltinLayerNorm, BuiltinRMSNorm) for m in norms)
    assert list(fast.state_dict()) == list(plain.state_dict())
    linears = [m.weight for m in fast.modules() if isinstance(m, nn.Linear)]
    # the longer side contiguous: column-major where out > in, row-major where out <= in
    assert any(not w.is_contiguous() for w in linears)
    assert all(w.t().is_contiguous() if w.shape[0] > w.shape[1] else w.is_contiguous() for w in linears)
    for (name, a), b in zip(fast.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(a, b), name
    with torch.no_grad():
        torch.testing.assert_close(fast(ids()), plain(ids()))
    with pytest.raises(TypeError, match="for_cpu_decode needs an nn.Module, got dict"):
        for_cpu_decode({})


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


def test_a_pre_ln_block_with_silent_branches_is_the_identity():
    """Pre-LN keeps a clean residual path: zero both branches' output projections and x passes unchanged,
    whatever the norms do. Post-LN normalises the sum instead, so its output rows have zero mean and unit
    variance, and x does not pass."""
    torch.manual_seed(0)
    x = 3 + torch.randn(2, 5, D, generator=torch.Generator().manual_seed(3))
    for norm_position in ("pre", "post"):
        block = perturb(Block(make(norm_position=norm_position).cfg))
        with torch.no_grad():
            for layer in (block.attn.o_proj, block.ffn.proj):
                layer.weight.zero_()
                layer.bias.zero_()
            y = block(x)
        if norm_position == "pre":
            assert torch.equal(y, x)
        else:
            norm = block.norm2
            z = (y - norm.bias) / norm.weight
            torch.testing.assert_close(z.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
            torch.testing.assert_close(z.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)


def rope_by_hand(x, base=10000.0):
    """Dimensions j and j + hs/2 of position p as one complex number, turned by the angle p * base^(-2j/hs)."""
    T, half = x.shape[-2], x.shape[-1] // 2
    angle = torch.arange(T)[:, None] * base ** (-2 * torch.arange(half) / (2 * half))
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones_like(angle), angle)
    return torch.cat((z.real, z.imag), dim=-1)


def attention_by_hand(attn, x, rope):
    B, T, C = x.shape
    nh, hs = attn.n_heads, attn.head_dim
    q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in (x @ attn.qkv.weight.T + attn.qkv.bias).split(C, -1))
    if rope:  # q and k turn; v does not
        q, k = rope_by_hand(q), rope_by_hand(k)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(torch.ones(T, T).triu(1).bool(), -math.inf)
    y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
    return y @ attn.o_proj.weight.T + attn.o_proj.bias


def mlp_by_hand(mlp, h):
    return F.gelu(h @ mlp.fc.weight.T + mlp.fc.bias, approximate="tanh") @ mlp.proj.weight.T + mlp.proj.bias


def layer_norm_by_hand(norm, h):
    return F.layer_norm(h, h.shape[-1:], norm.weight, norm.bias, norm.eps)


@pytest.mark.parametrize(("pos", "norm_position"), [(pos, "pre") for pos in POSITIONS] + [("rope", "post")])
def test_model_by_hand(pos, norm_position):
    """The default block (Pre-LN, GELU MLP, multi-head attention), and Post-LN, written out from the weights."""
    model = perturb(make(pos=pos, norm_position=norm_position, tie_embeddings=False)).eval()
    x = ids(T=7)
    h = model.tok_emb.weight[x]
    if pos == "learned":
        h = h + model.pos_emb.weight[:7]
    if pos == "sinusoidal":
        t = torch.arange(7)[:, None].float()
        angle = t / 10000 ** (torch.arange(0, D, 2) / D)
        h = h + torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2)
    for block in model.blocks:
        if norm_position == "pre":  # x + f(LN(x))
            h = h + attention_by_hand(block.attn, layer_norm_by_hand(block.norm1, h), rope=pos == "rope")
            h = h + mlp_by_hand(block.ffn, layer_norm_by_hand(block.norm2, h))
        else:  # LN(x + f(x)), and no final norm
            h = layer_norm_by_hand(block.norm1, h + attention_by_hand(block.attn, h, rope=pos == "rope"))
            h = layer_norm_by_hand(block.norm2, h + mlp_by_hand(block.ffn, h))
    want = (layer_norm_by_hand(model.norm_f, h) if norm_position == "pre" else h) @ model.lm_head.weight.T
    with torch.no_grad():
        torch.testing.assert_close(model(x), want)
    assert (model.pos_emb is None) == (pos != "learned")


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_the_head_always_reads_normalised_rows(norm_position):
    """Post-LN blocks end in a norm and Pre-LN models add a final one: either way the head's input rows have
    zero mean and unit variance (LayerNorm weights start at one, biases at zero; a tiny eps, since the
    residual stream's variance at init is small), once and only once."""
    model = make(norm_position=norm_position, norm_eps=1e-10).eval()
    seen = []
    model.lm_head.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    with torch.no_grad():
        model(ids(T=8))
    h = seen[0]
    torch.testing.assert_close(h.mean(-1), torch.zeros(2, 8), atol=1e-5, rtol=0)
    torch.testing.assert_close(h.var(-1, unbiased=False), torch.ones(2, 8), atol=1e-3, rtol=0)
    norms = sum(isinstance(m, LayerNorm) for m in model.modules())
    assert norms == 2 * model.cfg.n_layers + (norm_position == "pre")


def test_weight_tying_shares_storage_and_saves_v_times_d():
    tied, untied = make(tie_embeddings=True), make(tie_embeddings=False)
    assert tied.lm_head.weight is tied.tok_emb.weight  # one Parameter: one storage, one gradient
    assert untied.lm_head.weight.data_ptr() != untied.tok_emb.weight.data_ptr()
    assert untied.num_parameters() - tied.num_parameters() == V * D


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


@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
def test_residual_projections_start_smaller_by_sqrt_of_twice_the_layers(ffn):
    """GPT-2's init: every weight N(0, 0.02), but the two projections that write into the residual stream
    N(0, 0.02 / sqrt(2 * n_layers)), so that 2 * n_layers additions leave the stream's variance put."""
    model = tiny_model(d_model=64, n_heads=4, n_layers=8, ffn=ffn)
    writers = ("attn.o_proj.weight", "ffn.proj.weight", "ffn.down.weight")
    for name, p in model.named_parameters():
        if name.endswith(writers):
            assert p.std().item() == pytest.approx(0.02 / 4, rel=0.1), name
        elif name.endswith("weight") and p.dim() == 2:
            assert p.std().item() == pytest.approx(0.02, rel=0.1), name


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


@pytest.mark.parametrize("pos", ["rope", "sinusoidal"])
def test_a_float64_model_keeps_float64_position_tables(pos):
    """Tables in float32 would put float32 round-off into a float64 model's every layer."""
    from transformer_steps.positions import rope_cos_sin, sinusoidal_encoding
    from transformer_steps.precision import default_dtype

    with default_dtype(torch.float64):
        model = make(pos=pos)
    tables = (model.rope_cos, model.rope_sin) if pos == "rope" else (model.pos_table,)
    want = (rope_cos_sin(torch.arange(12), model.cfg.head_dim, dtype=torch.float64) if pos == "rope"
            else (sinusoidal_encoding(12, D, dtype=torch.float64),))
    for table, expected in zip(tables, want):
        assert table.dtype == torch.float64 and torch.equal(table, expected)


def test_a_bf16_models_loss_is_computed_in_float32():
    """The cross-entropy of bf16 logits in float32: it matches a float64 reference to float32 precision, where a
    bf16 log-softmax would be off in the third digit."""
    model = perturb(make(), scale=0.5).bfloat16()
    x, y = ids(T=12), ids(T=12, seed=1)
    loss = model.loss(x, y)
    with torch.no_grad():
        want = F.cross_entropy(model(x).double().flatten(0, 1), y.flatten())
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
def test_dropout_only_in_training_mode(ffn):
    model = make(dropout=0.5, ffn=ffn)
    x = ids()
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))
    # without dropout, training mode computes what eval does
    same = make(ffn=ffn)
    assert torch.equal(same.train()(x), same.eval()(x))


def test_input_pos_shifts_the_positions():
    model = perturb(make(pos="learned")).eval()
    x = ids(T=3)
    with torch.no_grad():
        shifted = model(x, torch.arange(4, 7))
        assert not torch.allclose(shifted, model(x))
        # a learned table: the first block reads rows 4, 5, 6 added to the tokens
        seen = []
        model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
        model(x, torch.arange(4, 7))
        torch.testing.assert_close(seen[0], model.tok_emb(x) + model.pos_emb.weight[4:7])
    nopos = perturb(make(pos="none")).eval()
    with torch.no_grad():
        # without positions, where the tokens sit does not matter
        torch.testing.assert_close(nopos(x, torch.arange(4, 7)), nopos(x))


@pytest.mark.parametrize(("bad", "error", "message"), [
    (torch.tensor([[1, 2, V]]), ValueError, rf"token ids must be in \[0, {V}\), got values in \[1, {V}\]"),
    (torch.tensor([[-1, 2]]), ValueError, rf"token ids must be in \[0, {V}\), got values in \[-1, 2\]"),
    (torch.tensor([[1.0, 2.0]]), TypeError, "must be an integer tensor.*float32"),
    (torch.tensor([[True, False]]), TypeError, "must be an integer tensor.*bool"),
    (torch.tensor([1, 2, 3]), ValueError, r"shape \(batch, time\), got 1 dims \(3,\)"),
    (torch.zeros(1, 2, 3, dtype=torch.long), ValueError, r"got 3 dims \(1, 2, 3\)"),
    (torch.zeros(2, 0, dtype=torch.long), ValueError, r"token ids are empty \(2, 0\)"),
    (torch.zeros(0, 3, dtype=torch.long), ValueError, r"token ids are empty \(0, 3\)"),
    (torch.zeros(1, 13, dtype=torch.long), ValueError, r"sequence too long: positions 0..12 need max_seq_len >= 13, but max_seq_len is 12"),
    ([[1, 2]], TypeError, "token ids must be a torch.Tensor, got list"),
])
def test_bad_token_ids(bad, error, message):
    model = make()
    with pytest.raises(error, match=message):
        model(bad)


def test_the_input_checks_accept_their_last_valid_values():
    """Ids 0 and V - 1, max_seq_len tokens, positions up to max_seq_len - 1: with positions given or not."""
    model = make()
    x = torch.tensor([[0, V - 1] * 6])  # 12 tokens, the model's max_seq_len
    assert model(x).shape == model(x, torch.arange(12)).shape == (1, 12, V)
    assert model(x[:, :3], torch.arange(9, 12)).shape == (1, 3, V)
    assert model.loss(x, x.flip(1)).isfinite()
    with pytest.raises(ValueError, match=rf"token ids must be in \[0, {V}\), got values in \[-1, {V - 1}\]"):
        model(torch.tensor([[-1, V - 1]]), torch.arange(2))
    with pytest.raises(ValueError, match=rf"targets must be in \[0, {V}\), got values in \[-1, 0\]"):
        model.loss(x[:, :2], torch.tensor([[-1, 0]]))


def test_bad_positions_and_cache_and_config():
    model = make()
    x = ids(T=3)
    with pytest.raises(ValueError, match="positions must be >= 0, got -1"):
        model(x, torch.arange(-1, 2))
    with pytest.raises(TypeError, match="input_pos must be a torch.long tensor of positions, got int"):
        model(x, 4)
    with pytest.raises(TypeError, match="input_pos must be a torch.long tensor of positions, got torch.float32"):
        model(x, torch.arange(3.0))
    with pytest.raises(ValueError, match=r"input_pos must hold one position per token, \(3,\), got \(2,\)"):
        model(x, torch.arange(2))
    with pytest.raises(ValueError, match=r"positions 10..12 need max_seq_len >= 13, but max_seq_len is 12"):
        model(x, torch.arange(10, 13))
    with pytest.raises(ValueError, match=r"one KVCache per layer \(2\), got 1"):
        model(x, torch.arange(3), model.make_cache(2)[:1])
    with pytest.raises(ValueError, match=r"the cache holds 1 sequences, but idx has 2"):
        model(x, torch.arange(3), model.make_cache(1))
    with pytest.raises(ValueError, match=r"the cache holds 3 sequences, but idx has 2"):
        model(x, torch.arange(3), model.make_cache(3))
    with pytest.raises(ValueError, match="input_pos is on meta and idx on cpu: put both on one device"):
        model(x, torch.arange(3, device="meta"))
    with pytest.raises(TypeError, match="cache must be a list of KVCache"):
        model(x, torch.arange(3), [None, None])
    with pytest.raises(ValueError, match="a KV cache needs a causal model"):
        make(causal=False)(x, torch.arange(3), make().make_cache(2))
    with pytest.raises(TypeError, match="TransformerLM needs a ModelConfig, got dict"):
        TransformerLM({"vocab_size": V})


def test_a_cache_without_positions_starts_at_zero():
    model = perturb(make()).eval()
    x = ids(T=5)
    cache = model.make_cache(2)
    with torch.no_grad():
        torch.testing.assert_close(model(x, cache=cache), model(x))
        # the next token at position 5 reads the five cached positions
        torch.testing.assert_close(model(x[:, :1], torch.tensor([5]), cache)[:, 0],
                                   model(torch.cat([x, x[:, :1]], dim=1))[:, 5])


@pytest.mark.parametrize("start", [0, 5])
def test_a_users_ids_are_checked_at_any_position(start):
    """A chunk of a prompt at a later position is checked too: an id past the vocabulary would otherwise
    reach nn.Embedding (an IndexError on a CPU, a device-side assert that kills the process on CUDA)."""
    model = make()
    cache = model.make_cache(1)
    model(ids(B=1, T=5), torch.arange(5), cache)
    with pytest.raises(ValueError, match=rf"token ids must be in \[0, {V}\), got values in \[1, {V}\]"):
        model(torch.tensor([[1, V]]), torch.arange(start, start + 2), cache)


def test_loss_rejects_targets_outside_the_vocabulary():
    cfg = ModelConfig(vocab_size=13, max_seq_len=8, d_model=8, n_layers=1, n_heads=2)
    model = TransformerLM(cfg)
    idx = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"targets must be in \[0, 13\), got values in \[0, 13\]"):
        model.loss(idx, torch.tensor([[0, 1, 2, 13]]))
    with pytest.raises(TypeError, match="targets must be an integer tensor of token ids, got torch.float32"):
        model.loss(idx, torch.zeros(1, 4))
