"""The training loop, checkpoints and the shipped model."""

import itertools
import math

import pytest
import torch

from transformer_steps import ModelConfig, TransformerLM
from transformer_steps.config import FFNS, NORM_POSITIONS, NORMS, POSITIONS
from transformer_steps.data import load_char_dataset
from transformer_steps.train import (
    SHIPPED_CHECKPOINT,
    TrainConfig,
    estimate_loss,
    load_checkpoint,
    load_pretrained,
    lr_at,
    main,
    parse_args,
    save_checkpoint,
    train,
)

TINY = {"max_seq_len": 32, "d_model": 32, "n_layers": 1, "n_heads": 2}
TINY_ARGS = ["--steps", "12", "--d-model", "32", "--layers", "1", "--heads", "2", "--block-size", "32",
             "--batch-size", "4", "--eval-batches", "2", "--eval-every", "4", "--warmup-steps", "2",
             "--final-eval-batches", "2", "--threads", "1", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def char_data():
    return load_char_dataset()


def tiny_model(vocab_size, seed=0, **overrides):
    torch.manual_seed(seed)
    return TransformerLM(ModelConfig(vocab_size=vocab_size, **{**TINY, **overrides}))


def test_lr_warmup_then_cosine():
    cfg = TrainConfig(steps=100, warmup_steps=10, lr=1e-3, min_lr=1e-4)
    lrs = [lr_at(s, cfg) for s in range(cfg.steps)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a <= b for a, b in itertools.pairwise(lrs[:10]))
    assert all(a >= b for a, b in itertools.pairwise(lrs[9:]))
    assert lrs[-1] == pytest.approx(1e-4)
    assert lr_at(55, cfg) == pytest.approx(1e-4 + 0.5 * 9e-4 * (1 + math.cos(math.pi * 45 / 89)))


def test_bad_config_is_rejected(char_data):
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match=r"warmup_steps must be in \[0, 9\], got 10"):
        TrainConfig(steps=10, warmup_steps=10)
    with pytest.raises(TypeError, match="steps must be an int, got float 2.0"):
        TrainConfig(steps=2.0)
    with pytest.raises(ValueError, match=r"min_lr must be in \(0, 0.001\], got 0.01"):
        TrainConfig(lr=1e-3, min_lr=1e-2)
    with pytest.raises(TypeError, match="lr must be a number, got str"):
        TrainConfig(lr="3e-3")
    tok, train_ids, val_ids = char_data
    with pytest.raises(ValueError, match="max_seq_len"):
        train(tiny_model(tok.vocab_size), train_ids, val_ids, TrainConfig(block_size=64), progress=False)
    with pytest.raises(ValueError, match="vocab_size"):
        train(tiny_model(10), train_ids, val_ids, TrainConfig(block_size=32), progress=False)


def test_twenty_steps_lower_the_loss_and_are_reproducible(char_data):
    tok, train_ids, val_ids = char_data
    cfg = TrainConfig(steps=20, batch_size=8, block_size=32, lr=3e-3, warmup_steps=2, eval_batches=4)
    runs = [train(tiny_model(tok.vocab_size), train_ids, val_ids, cfg, progress=False, eval_every=10)
            for _ in range(2)]
    history = runs[0]
    assert history["steps"] == [0, 10, 20]
    assert history["val_loss"][0] > math.log(tok.vocab_size) - 0.2  # starts near uniform guessing
    assert history["val_loss"][-1] < history["val_loss"][0] - 0.5
    assert history["train_loss"][-1] < history["train_loss"][0] - 0.5
    assert runs[0]["val_loss"] == runs[1]["val_loss"]  # same seed, same numbers


@pytest.mark.parametrize("tie", [True, False])
def test_checkpoint_round_trip_gives_identical_logits(tmp_path, char_data, tie):
    tok, _, val_ids = char_data
    model = tiny_model(tok.vocab_size, seed=3, tie_embeddings=tie)
    history = {"steps": [0], "val_loss": [4.0]}
    path = save_checkpoint(tmp_path / "m.pt", model, TrainConfig(), tok.chars, history)
    loaded, loaded_tok, loaded_history = load_checkpoint(path)
    x = val_ids[:32].view(1, -1)
    torch.testing.assert_close(loaded(x), model.eval()(x), rtol=0, atol=0)
    assert loaded_tok.chars == tok.chars and loaded_history == history
    assert (loaded.lm_head.weight is loaded.tok_emb.weight) == tie


def test_cli_resume_continues_exactly(tmp_path):
    whole = main([*TINY_ARGS, "--out", str(tmp_path / "whole.pt")])
    split_path = str(tmp_path / "split.pt")
    first = main([*TINY_ARGS, "--out", split_path, "--max-minutes", "0"])  # budget spent after one step
    assert first["steps"][-1] == 1
    resumed = main([*TINY_ARGS, "--out", split_path, "--resume"])
    assert resumed["steps"][-1] == 12
    assert resumed["val_loss"][-1] == whole["val_loss"][-1]
    assert resumed["final_val_loss"] == whole["final_val_loss"]


def test_a_checkpoint_that_does_not_fit_its_config_is_a_clear_error(tmp_path, char_data):
    tok, _, _ = char_data
    model = tiny_model(tok.vocab_size, ffn="swiglu")
    path = save_checkpoint(tmp_path / "ok.pt", model, TrainConfig(), tok.chars, {"steps": [0]})
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["model"]["blocks.0.attn.q_proj.weight"] = checkpoint["model"].pop("blocks.0.attn.qkv.weight")
    torch.save(checkpoint, tmp_path / "renamed.pt")
    with pytest.raises(ValueError, match=r"does not match its config: missing \['blocks.0.attn.qkv.weight'\]"):
        load_checkpoint(tmp_path / "renamed.pt")


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "absent.pt")


@pytest.mark.skipif(not SHIPPED_CHECKPOINT.is_file(), reason="the shipped checkpoint is not built yet")
def test_shipped_checkpoint_meets_the_target(char_data):
    tok, _, val_ids = char_data
    model, shipped_tok, history = load_pretrained()
    assert shipped_tok.chars == tok.chars
    assert history["final_val_loss"] <= 1.80
    assert history["val_loss"][-1] < history["val_loss"][0] - 2.0
    # Re-evaluate on fresh random windows of the validation split: close to the recorded figure.
    cfg = TrainConfig(batch_size=16, block_size=model.cfg.max_seq_len, eval_batches=25)
    val = estimate_loss(model, val_ids, cfg, seed=7)
    assert val == pytest.approx(history["final_val_loss"], abs=0.06)


def test_cli_offers_every_config_choice_and_builds_what_it_is_told(tmp_path):
    args = parse_args(["--ffn", "moe", "--experts", "2", "--kv-heads", "1", "--norm-position", "post"])
    assert (args.ffn, args.experts, args.kv_heads, args.norm_position) == ("moe", 2, 1, "post")
    for flag, allowed in (("--ffn", FFNS), ("--norm", NORMS), ("--pos", POSITIONS), ("--norm-position", NORM_POSITIONS)):
        for choice in allowed:
            assert getattr(parse_args([flag, choice]), flag[2:].replace("-", "_")) == choice
    with pytest.raises(SystemExit):
        parse_args(["--ffn", "swish"])
    history = main([*TINY_ARGS, "--steps", "3", "--ffn", "moe", "--experts", "2", "--kv-heads", "1",
                    "--out", str(tmp_path / "moe.pt")])
    model, _, _ = load_checkpoint(tmp_path / "moe.pt")
    assert (model.cfg.ffn, model.cfg.n_experts, model.cfg.n_kv_heads) == ("moe", 2, 1)
    assert history["steps"][-1] == 3
