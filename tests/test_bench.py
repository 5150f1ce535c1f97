"""The benchmark's functions at tiny sizes: the compared paths agree (ids, values). Timings are never asserted."""

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
    assert result["identical"] is True
    assert result["cached"].best > 0 and result["naive"].cpu > 0 and result["tokens"] == 12


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
        rows = bench.main(["--quick", "--device", "cpu", "--repeats", "1", "--threads", "1", "--skip", "hf"])
    finally:
        torch.set_num_threads(threads)  # main sets it for the whole process
    out = capsys.readouterr().out
    correctness = [row for row in rows if row[2] in ("True", "<= 1e-05")]
    assert len(correctness) == 3 and all(row[3] == "PASS" for row in correctness)
    assert "GPU bandwidth: skipped" in out or torch.cuda.is_available()
    assert out.rstrip().splitlines()[-len(rows) - 1].split() == ["check", "measured", "target", "result"]
