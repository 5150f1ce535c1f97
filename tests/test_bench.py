"""The benchmark's functions at tiny sizes: the compared paths agree (ids, values). Timings are never asserted."""

import math
import os

import pytest
import torch

from transformer_steps import ModelConfig, TransformerLM
from transformer_steps.course import bench

TINY = ModelConfig(vocab_size=64, max_seq_len=64, d_model=32, n_layers=2, n_heads=2)


def test_side_by_side_takes_turns_after_the_warm_up():
    calls = []
    timings = bench.side_by_side({"a": lambda: calls.append("a") or len(calls),
                                  "b": lambda: calls.append("b") or len(calls)}, "cpu", repeats=2, warmup=1)
    assert calls == ["a", "b"] * 3  # one warm-up round, then two timed rounds, alternating
    assert timings["a"].result == 5 and timings["b"].result == 6  # each side keeps its last result


def test_cached_and_naive_decode_agree():
    result = bench.bench_decode(TINY, prompt_len=4, new_tokens=12, device="cpu", repeats=1)
    assert result["identical"] is True and result["tokens"] == 12
    assert result["cached"].result.shape == (1, 4 + 12)  # the timed calls really generated the tokens
    assert result["ratio"] == result["naive"].best / result["cached"].best  # the ratio is of the two timings


def test_sdpa_and_reference_attention_agree():
    result = bench.bench_attention(TINY.replace(n_kv_heads=1), seq_len=16, device="cpu", repeats=1)
    assert result["op_max_abs_diff"] <= 1e-5
    assert result["model_max_abs_diff"] <= 1e-5


def test_ours_and_transformers_generate_the_same_ids():
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = bench.bench_vs_hf(n_layers=1, hidden=32, prompt_len=4, new_tokens=10, device="cpu", repeats=1)
    assert result["identical"] is True


def test_decode_bytes_per_token_counts_weights_once_and_the_kv_cache():
    cfg = TINY.replace(tie_embeddings=False, pos="rope", n_kv_heads=1)
    model = TransformerLM(cfg)
    weights, kv = bench.decode_bytes_per_token(model, context_len=10)
    every_param = sum(p.numel() for p in model.parameters()) * 4
    assert weights == every_param - (cfg.vocab_size - 1) * cfg.d_model * 4  # one embedding row is read
    assert kv == 2 * cfg.n_layers * 1 * 10 * cfg.head_dim * 4


def test_per_step_subtracts_the_one_token_generate_and_flags_noise():
    full, one = bench.Timing(0.5, 0.7, 0.6, None), bench.Timing(0.1, 0.1, 0.2, None)
    assert bench.per_step(full, one, steps=4) == pytest.approx((0.1, 0.15, 0.1))
    assert all(math.isnan(x) for x in bench.per_step(one, full, steps=4))  # the difference was swamped


def test_streaming_matrix_is_square_and_holds_the_bytes_to_within_a_row():
    matrix = bench.streaming_matrix(1e6, "cpu")
    rows, cols = matrix.shape
    assert matrix.dtype == torch.float32 and abs(rows - cols) <= 1
    assert abs(matrix.numel() * 4 - 1e6) <= 4 * cols


def test_weight_streaming_fields_are_consistent():
    result = bench.bench_weight_streaming(TINY, prompt_len=4, new_tokens=8, device="cpu", repeats=1)
    weights, kv = bench.decode_bytes_per_token(TransformerLM(TINY), context_len=4 + 8 / 2)
    assert (result["weight_bytes"], result["kv_bytes"]) == (weights, kv)
    assert abs(result["matrix_bytes"] - (weights + kv)) <= 4 * result["matrix_shape"][1]
    # the default model and the opt-in layout decode the same ids, each with its own timing
    assert result["identical"] is True
    for layout in ("default", "for_cpu_decode"):
        r = result[layout]
        assert r["fraction"] == pytest.approx(result["bound_s"] / r["decode_s"], nan_ok=True)
        assert r["cpu_fraction"] == pytest.approx(result["bound_cpu_s"] / r["decode_cpu_s"], nan_ok=True)
    assert result["bound_bytes_per_s"] == pytest.approx(result["matrix_bytes"] / result["bound_s"])
    assert result["params"] == TransformerLM(TINY).num_parameters() and result["threads"] == torch.get_num_threads()
    with pytest.raises(ValueError, match="new_tokens"):
        bench.bench_weight_streaming(TINY, prompt_len=4, new_tokens=1, device="cpu")


def test_compiled_bench_fields_are_consistent():
    """With dynamo's "eager" backend (tracing, no C++ compile): the fields, not the speed."""
    pytest.importorskip("torch._dynamo")
    cfg = TINY.replace(pos="rope", norm="rmsnorm", ffn="swiglu", n_kv_heads=1, bias=False)
    result = bench.bench_compiled(cfg, prompt_len=4, new_tokens=8, device="cpu", repeats=1, backend="eager")
    assert result["identical"] is True and result["cold_compile_s"] > 0 and result["warm_compile_s"] > 0
    assert result["saving_s"] == pytest.approx(result["eager_s"] - result["compiled_s"], nan_ok=True)
    if result["saving_s"] > 0:  # tracing alone may or may not beat eager: either way the payoff is consistent
        assert result["payoff_tokens"] == pytest.approx(result["cold_compile_s"] / result["saving_s"])
    else:
        assert math.isinf(result["payoff_tokens"]) or math.isnan(result["payoff_tokens"])


def test_gpu_bandwidth_refuses_a_cpu_device():
    with pytest.raises(ValueError, match="CUDA"):
        bench.bench_gpu_bandwidth(TINY, 4, 4, 1e12, device="cpu")


@pytest.mark.gpu
def test_gpu_bandwidth_runs():
    result = bench.bench_gpu_bandwidth(TINY, 4, 8, 4.8e12, device="cuda", repeats=1)
    assert 0 < result["fraction_of_peak"] and result["params"] == TransformerLM(TINY).num_parameters()


def test_quick_run_prints_a_table_with_correctness_rows(capsys):
    threads = torch.get_num_threads()
    try:
        rows = bench.main(["--quick", "--device", "cpu", "--repeats", "1", "--threads", "1", "--skip", "hf,compile"])
    finally:
        torch.set_num_threads(threads)  # main sets it for the whole process
    out = capsys.readouterr().out
    correctness = [row for row in rows if row[2] in ("True", "<= 1e-05")]
    assert len(correctness) == 4 and all(row[3] == "PASS" for row in correctness)
    assert "GPU bandwidth: skipped" in out or torch.cuda.is_available()
    assert out.rstrip().splitlines()[-len(rows) - 1].split() == ["check", "measured", "target", "result"]
