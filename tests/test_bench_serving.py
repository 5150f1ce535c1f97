"""Part (g) of the benchmark at tiny sizes: each side gives the same ids, and the memory and prefix figures
are what they claim. Timings are never asserted."""

import torch

from transformer_steps import ModelConfig, TransformerLM
from transformer_steps.course import bench_serving

TINY = ModelConfig(vocab_size=64, max_seq_len=64, d_model=32, n_layers=2, n_heads=2)


def model():
    torch.manual_seed(0)
    return TransformerLM(TINY).eval()


def test_the_trace_is_seeded_and_within_its_ranges():
    requests = bench_serving.trace(20, (3, 9), (1, 5), 64, seed=3)
    assert requests == bench_serving.trace(20, (3, 9), (1, 5), 64, seed=3)
    assert all(3 <= len(p) <= 9 and 1 <= n <= 5 and max(p) < 64 for p, n in requests)


def test_sequential_continuous_and_static_give_the_same_ids():
    requests = bench_serving.trace(6, (2, 10), (1, 12), 64)
    r = bench_serving.bench_batching(model(), requests, max_batch_size=4)
    assert r["identical"] is True and r["tokens"] == sum(n for _, n in requests)
    assert [len(ids) for ids in r["continuous"]["ids"]] == [n for _, n in requests]
    # static batching: a finished request leaves its batch (the same decode rows as continuous batching), or
    # keeps computing until the batch's longest ends; both take the same steps
    counts = [n for _, n in requests]
    assert r["static"]["decode_rows"] == r["continuous"]["decode_rows"] == sum(counts) - len(counts)
    assert r["static_padded"]["decode_rows"] == 4 * (max(counts[:4]) - 1) + 2 * (max(counts[4:]) - 1)
    assert r["static_padded"]["steps"] == r["static"]["steps"] > r["continuous"]["steps"]
    assert r["static"]["decode_steps"] == r["static"]["steps"] - 2  # two batches of 4, one prefill step each
    a, b = r["step_cost"]  # fitted to every decode step of the three engine runs: CPU seconds are positive
    assert a > 0 and b != 0


def test_the_step_cost_line_is_fitted_to_the_decode_steps():
    assert bench_serving.fit_line([(1, 7.0), (2, 9.0), (4, 13.0), (16, 37.0)]) == (5.0, 2.0)
    assert bench_serving.fit_line([(3, 1.0), (3, 2.0)]) == (1.5, 0.0)  # one batch size: no slope to fit


def test_paged_memory_holds_less_than_a_block_per_sequence_spare():
    requests = bench_serving.trace(6, (2, 10), (4, 12), 64)
    r = bench_serving.bench_memory(model(), requests, max_batch_size=4, block_size=4)
    assert r["used"] <= r["paged_reserved"] < r["used"] + 4 * 4  # at most 3 spare slots per running sequence
    assert r["contiguous"] < r["paged"] <= 1


def test_prefix_caching_saves_prefill_and_keeps_the_ids():
    r = bench_serving.bench_prefix(model(), system_len=32, n=6, tail=(2, 5), new_tokens=4)
    assert r["identical"] is True
    assert r["reused"] == 5 * 32 and r["prefill_off"] - r["prefill_on"] == r["reused"]


def test_quick_main_prints_every_row_with_equal_ids():
    rows = bench_serving.main(["--quick", "--skip", "g3"])
    checks = {row[0]: row for row in rows}
    assert {"(g1) engine / sequential generate tok/s", "(g2) continuous / static tok/s",
            "(g4) paged: slots in use / held", "(g5) prefill tokens saved"} <= set(checks)
    assert all(row[3] == "PASS" for name, row in checks.items() if "ids identical" in name)
