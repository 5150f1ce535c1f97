"""float64 models stay float64 end to end: the chapters' tiny training runs rely on it to print the same
digits on every CPU (float32's last-bit differences between CPU kernels grow during training)."""

import pytest
import torch

from transformer_steps import ModelConfig, TransformerLM
from transformer_steps.attention import attention
from transformer_steps.norms import layer_norm, rms_norm
from transformer_steps.precision import default_dtype, upcast
from transformer_steps.train import TrainConfig, train, train_char_model


@pytest.mark.parametrize("dtype, expected", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                             (torch.float32, torch.float32), (torch.float64, torch.float64)])
def test_upcast_never_lowers_precision(dtype, expected):
    assert upcast(torch.ones(2, dtype=dtype)).dtype == expected


def test_norms_and_softmax_of_float64_inputs_are_computed_in_float64():
    x = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w = torch.ones(8, dtype=torch.float64)
    exact_ln = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    exact_rms = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    # float32 arithmetic would miss these by ~1e-7; float64 gets them to round-off
    torch.testing.assert_close(layer_norm(x, w, None, 1e-5), exact_ln, atol=1e-13, rtol=0)
    torch.testing.assert_close(rms_norm(x, w, 1e-6), exact_rms, atol=1e-13, rtol=0)
    _, weights = attention(x[None], x[None], x[None])
    torch.testing.assert_close(weights[0], torch.softmax(x @ x.T / 8**0.5, -1), atol=1e-15, rtol=0)


def test_default_dtype_is_scoped_and_rejects_non_float_dtypes():
    before = torch.get_default_dtype()
    with default_dtype(torch.float64):
        assert torch.get_default_dtype() == torch.float64
    assert torch.get_default_dtype() == before
    with pytest.raises(RuntimeError), default_dtype(torch.float64):
        raise RuntimeError("restored on the way out")
    assert torch.get_default_dtype() == before
    for bad in (torch.int64, "float64"):
        with pytest.raises(TypeError, match="floating torch.dtype"), default_dtype(bad):
            pass


@pytest.mark.parametrize("pos", ["rope", "sinusoidal", "learned"])
def test_a_model_built_under_float64_has_float64_parameters_tables_and_loss(pos):
    cfg = ModelConfig(vocab_size=32, max_seq_len=16, d_model=16, n_layers=2, n_heads=2, pos=pos,
                      norm="rmsnorm" if pos == "rope" else "layernorm")
    with default_dtype(torch.float64):
        model = TransformerLM(cfg)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert {b.dtype for b in model.buffers() if b.is_floating_point()} <= {torch.float64}  # tables, if any
    idx = torch.randint(32, (2, 16), generator=torch.Generator().manual_seed(0))
    assert model(idx).dtype == torch.float64
    assert model.loss(idx[:, :-1], idx[:, 1:]).dtype == torch.float64
    # built without default_dtype: float32 parameters and tables
    plain = TransformerLM(cfg)
    assert {p.dtype for p in plain.parameters()} == {torch.float32}
    assert {b.dtype for b in plain.buffers() if b.is_floating_point()} <= {torch.float32}


def test_float64_training_from_the_same_weights_differs_from_float32_only_by_round_off():
    cfg = ModelConfig(vocab_size=16, max_seq_len=8, d_model=16, n_layers=1, n_heads=2)
    data = torch.randint(16, (2_000,), generator=torch.Generator().manual_seed(1))
    run = TrainConfig(steps=5, batch_size=4, block_size=8, warmup_steps=1, eval_batches=2)
    torch.manual_seed(0)
    model32 = TransformerLM(cfg)
    with default_dtype(torch.float64):
        model64 = TransformerLM(cfg)
    model64.load_state_dict(model32.state_dict())  # the same initial values, widened
    losses32 = train(model32, data, data, run, progress=False)["val_loss"]
    losses64 = train(model64, data, data, run, progress=False)["val_loss"]
    assert next(model64.parameters()).dtype == torch.float64 and losses32 != losses64  # float64 really ran
    torch.testing.assert_close(torch.tensor(losses32), torch.tensor(losses64), atol=1e-5, rtol=0)


def test_train_char_model_runs_with_its_default_model_config():
    model, tokenizer, history = train_char_model(cfg=TrainConfig(steps=2, batch_size=2, block_size=16,
                                                                 warmup_steps=0, eval_batches=1))
    assert model.cfg.vocab_size == tokenizer.vocab_size
    assert model.cfg.replace(vocab_size=63) == ModelConfig.preset("char-tiny")
    assert history["steps"] == [0, 1, 2]
    assert next(model.parameters()).dtype == torch.float32
