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
    assert result["params"] == TransformerLM(TINY).num_parameters() and result["threads"] == torch.get_num_threads()
    with pytest.raises(ValueError, match="new_tokens"):
        bench.bench_weight_streaming(TINY, prompt_len=4, new_tokens=1, device="cpu")


def test_compiled_bench_fields_are_consistent():
    """With dynamo's "eager" backend (tracing, no C++ compile): the fields, not the speed."""
    pytest.importorskip("torch._dynamo")
    cfg = TINY.replace(pos="rope", norm="rmsnorm", ffn="swiglu", n_kv_heads=1, bias=False)
    result = bench.bench_compiled(cfg, prompt_len=4, new_tokens=8, device="cpu", repeats=1, backend="eager")
    assert result["identical"] is True and result["cold_compile_s"] > 0 and result["warm_compile_s"] > 0


def fake_clock(monkeypatch, seconds):
    """side_by_side (and timed, which calls it) report the given (best, median, cpu) seconds per name, in
    order for a name timed more than once; each function still runs once, for its result."""
    def side_by_side(fns, device, repeats=3, warmup=1):
        return {name: bench.Timing(*seconds[name].pop(0), fn()) for name, fn in fns.items()}

    monkeypatch.setattr(bench, "side_by_side", side_by_side)


def test_decode_ratio_is_naive_time_over_cached_time(monkeypatch):
    fake_clock(monkeypatch, {"fn": [(0.2, 0.3, 0.1), (0.6, 0.7, 0.4)]})  # cached, then naive
    result = bench.bench_decode(TINY, prompt_len=4, new_tokens=3, device="cpu", repeats=1)
    assert (result["ratio"], result["cpu_ratio"]) == (pytest.approx(3.0), pytest.approx(4.0))


def test_streaming_fraction_is_bound_time_over_decode_time_per_step(monkeypatch):
    # 5 tokens: 4 decode steps. The bound streams 0.1 s a step; the default model decodes 0.2 s a step at best
    # (1.0 s for 5 tokens, 0.2 s for 1), 0.3 s at the median; the opt-in 0.1 s
    fake_clock(monkeypatch, {"bound": [(0.4, 0.4, 0.8)], "default": [(1.0, 1.4, 1.0)], "default_one": [(0.2, 0.2, 0.2)],
                             "for_cpu_decode": [(0.6, 0.6, 0.6)], "for_cpu_decode_one": [(0.2, 0.2, 0.2)]})
    result = bench.bench_weight_streaming(TINY, prompt_len=4, new_tokens=5, device="cpu", repeats=1)
    assert result["bound_s"] == pytest.approx(0.1) and result["bound_bytes_per_s"] == pytest.approx(
        10 * result["matrix_bytes"])
    assert result["default"]["decode_s"] == pytest.approx(0.2) and result["default"]["fraction"] == pytest.approx(0.5)
    assert result["default"]["decode_median_s"] == pytest.approx(0.3)
    assert result["default"]["cpu_fraction"] == pytest.approx(1.0)
    assert result["for_cpu_decode"]["fraction"] == pytest.approx(1.0)


@pytest.mark.parametrize(("eager_s", "payoff", "ratio"), [(0.9, 30.0, 2.0), (0.3, math.inf, 0.5)])
def test_compile_payoff_is_compile_time_over_the_saving_per_token(monkeypatch, eager_s, payoff, ratio):
    """A 3 s cold compile that saves 0.1 s a token pays off after 30 tokens; one that saves nothing never."""
    pytest.importorskip("torch._dynamo")
    # 5 tokens, 4 steps: compiled 0.1 s a step; eager 0.2 s a step, or 0.05 s (faster than compiled)
    fake_clock(monkeypatch, {"fn": [(3.0, 3.0, 3.0), (1.0, 1.0, 1.0)], "compiled": [(0.5, 0.5, 0.5)],
                             "compiled_one": [(0.1, 0.1, 0.1)], "eager": [(eager_s, eager_s, eager_s)],
                             "eager_one": [(0.1, 0.1, 0.1)]})
    cfg = TINY.replace(pos="rope", norm="rmsnorm", ffn="swiglu", n_kv_heads=1, bias=False)
    result = bench.bench_compiled(cfg, prompt_len=4, new_tokens=5, device="cpu", repeats=1, backend="eager")
    assert (result["cold_compile_s"], result["warm_compile_s"]) == (3.0, 1.0)
    assert result["payoff_tokens"] == pytest.approx(payoff)
    assert result["ratio"] == pytest.approx(ratio)


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
