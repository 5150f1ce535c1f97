"""Serving speed and memory, part (g) of the benchmark, ratios from one run on one thread:
`python -m transformer_steps.course.bench_serving [--quick]`.

(g1) the engine (continuous batching, max batch 16) against sequential `generate`, on the same 32 requests
(prompts of 16-128 tokens, outputs of 8-256) with the 12.6M-parameter model of part (e), float32, greedy:
generated tokens/s, target >= 4x. (g2) continuous against static batching, the same trace and engine:
target >= 1.5x; the engine's static batching lets a finished request leave its batch (see Engine), and for
comparison the bench also times static batching that keeps computing the finished rows until the batch's longest
ends, as a batched `generate` does (the same engine with every max_new_tokens raised to its batch's largest, the
ids cut back). Every decode step's CPU time is kept, and a line fitted to it against the batch size (a fixed
part per step, a part per row) says what the step counts and row counts of the two modes predict. (g3) the engine on from_hf(m) against transformers' `m.generate_batch` (its continuous
batching over a paged cache) on the (b)-shaped random Llama, 16 requests of 8-64 prompt tokens and 32 new
tokens: target >= 3x. (g4) memory: peak KV slots in use over slots reserved, paged (target >= 90%) and, for
comparison, with max_seq_len reserved per running sequence. (g5) prefix caching: 32 requests that share a
96-token system prompt, each with its own 8-32 tokens after it, arriving one per step: prefill tokens computed
fall by >= 70%. Ids are compared on each side of every ratio. Each side is timed once, after a warm-up.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from ..config import ModelConfig
from ..generate import generate
from ..model import TransformerLM
from ..serving import Engine
from .bench import DECODE_CFG, QUICK_DECODE_CFG, random_hf_llama, verdict

TARGETS = {"sequential": 4.0, "static": 1.5, "hf": 3.0, "paged_use": 0.9, "prefix_saved": 0.7}


def trace(n: int, prompt_lens: tuple[int, int], new_tokens: tuple[int, int], vocab_size: int, seed: int = 0):
    """n requests: (prompt ids, max_new_tokens), lengths uniform in the given inclusive ranges."""
    rng = random.Random(seed)
    return [([rng.randrange(vocab_size) for _ in range(rng.randint(*prompt_lens))], rng.randint(*new_tokens))
            for _ in range(n)]


def clock(fn):
    """(result, wall seconds, CPU seconds) of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - start, time.process_time() - cpu


def sequential(model, requests) -> list[list[int]]:
    return [generate(model, torch.tensor([p]), n, temperature=0.0)[0, len(p):].tolist() for p, n in requests]


def bench_batching(model: TransformerLM, requests, max_batch_size: int = 16) -> dict:
    """(g1, g2) sequential generate, the continuous engine and the static one on the same requests."""
    prompts, counts = [p for p, _ in requests], [n for _, n in requests]
    tokens = sum(counts)

    # static batching where a finished row keeps computing: every request of a batch (max_batch_size of them, in
    # arrival order; they all arrive at once) runs as long as the batch's longest
    batches = [counts[i:i + max_batch_size] for i in range(0, len(counts), max_batch_size)]
    padded = [max(batch) for batch in batches for _ in batch]
    steps, rows, decode_cpu = {}, {}, []  # decode_cpu: (batch size, CPU seconds) of every decode step

    def engine(name, continuous, n):
        e = Engine(model, max_batch_size=max_batch_size, continuous=continuous)
        ids = [e.add_request(p, k) for p, k in zip(prompts, n)]
        while e.has_work():  # run(), with each decode step's CPU time kept
            start = time.process_time()
            e.step()
            if e.trace[-1][0] == "decode":
                decode_cpu.append((len(e.trace[-1][1]), time.process_time() - start))
        steps[name] = (e.stats.prefill_steps + e.stats.decode_steps, e.stats.decode_steps)
        rows[name] = e.stats.generated_tokens - len(prompts)  # decode rows: the first token comes from prefill
        done = {r.id: r.generated for r in e.pop_finished()}
        return [done[i][:k] for i, k in zip(ids, counts)]

    # warm-up: a few requests through each path
    sequential(model, requests[:2]), Engine(model).run(prompts[:4], [4] * 4)
    out = {}
    for name, fn in (("sequential", lambda: sequential(model, requests)),
                     ("continuous", lambda: engine("continuous", True, counts)),
                     ("static", lambda: engine("static", False, counts)),
                     ("static_padded", lambda: engine("static_padded", False, padded))):
        ids, wall, cpu = clock(fn)
        out[name] = {"ids": ids, "s": wall, "cpu_s": cpu, "tok_s": tokens / wall}
    out["tokens"] = tokens
    for name, (n_steps, n_decode) in steps.items():
        out[name].update(steps=n_steps, decode_steps=n_decode, decode_rows=rows[name])
    out["identical"] = (out["sequential"]["ids"] == out["continuous"]["ids"] == out["static"]["ids"]
                        == out["static_padded"]["ids"])
    out["step_cost"] = fit_line(decode_cpu)
    return out


def fit_line(points) -> tuple[float, float]:
    """Least squares y = a + b x: a decode step's CPU seconds as a fixed part (the weights read, the Python)
    plus a part per row (the rows' matmuls, and their keys and values gathered and attended over)."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def bench_memory(model: TransformerLM, requests, max_batch_size: int = 16, block_size: int = 16) -> dict:
    """(g4) step by step: KV slots holding a token, against the slots held (whole blocks), and against
    max_seq_len reserved per running sequence; at the step with the most tokens cached."""
    engine = Engine(model, max_batch_size=max_batch_size, block_size=block_size)
    for p, n in requests:
        engine.add_request(p, n)
    best = (0, 1, 1)
    while engine.has_work():
        engine.step()
        running = engine.scheduler.running
        used = sum(r.n_cached for r in running)
        if used > best[0]:
            best = (used, engine.cache.blocks_in_use * block_size, len(running) * model.cfg.max_seq_len)
    used, paged, contiguous = best
    return {"used": used, "paged_reserved": paged, "contiguous_reserved": contiguous, "paged": used / paged,
            "contiguous": used / contiguous, "peak_blocks": engine.stats.peak_blocks_in_use}


def bench_prefix(model: TransformerLM, system_len: int = 96, n: int = 32, tail: tuple[int, int] = (8, 32),
                 new_tokens: int = 32, seed: int = 0) -> dict:
    """(g5) n requests with a shared system prompt, one arriving per step, with and without prefix caching."""
    rng = random.Random(seed)
    vocab = model.cfg.vocab_size
    system = [rng.randrange(vocab) for _ in range(system_len)]
    prompts = [system + [rng.randrange(vocab) for _ in range(rng.randint(*tail))] for _ in range(n)]
    out = {}
    for caching in (False, True):
        engine, ids = Engine(model, prefix_caching=caching), []
        for p in prompts:  # one arrival per step
            ids.append(engine.add_request(p, new_tokens))
            engine.step()
        while engine.has_work():
            engine.step()
        out[caching] = {"ids": [engine.requests[i].generated for i in ids], "stats": engine.stats}
    off, on = out[False]["stats"], out[True]["stats"]
    return {"prefill_off": off.prefill_tokens, "prefill_on": on.prefill_tokens, "reused": on.reused_prefix_tokens,
            "saved": 1 - on.prefill_tokens / off.prefill_tokens, "blocks_off": off.peak_blocks_in_use,
            "blocks_on": on.peak_blocks_in_use, "identical": out[False]["ids"] == out[True]["ids"]}


def bench_vs_generate_batch(n_layers: int, hidden: int, requests, new_tokens: int) -> dict:
    """(g3) the engine on from_hf(m) against m.generate_batch, the same random Llama, greedy."""
    from transformers import GenerationConfig

    from ..hf import from_hf

    max_len = max(len(p) for p in requests) + new_tokens
    hf_model = random_hf_llama(n_layers, hidden, 4096, max_len)
    model = from_hf(hf_model)
    config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)

    def theirs(prompts):
        out = hf_model.generate_batch(inputs=prompts, generation_config=config, progress_bar=False)
        # keyed by request id, in the order given
        return [list(r.generated_tokens) for r in sorted(out.values(), key=lambda r: int(r.request_id.split("_")[-1]))]

    def ours(prompts):
        return Engine(model, max_batch_size=16).run(prompts, new_tokens)

    theirs(requests[:2]), ours(requests[:2])  # warm-up
    a, a_s, a_cpu = clock(lambda: ours(requests))
    b, b_s, b_cpu = clock(lambda: theirs(requests))
    tokens = len(requests) * new_tokens
    return {"ours_s": a_s, "hf_s": b_s, "ours_cpu": a_cpu, "hf_cpu": b_cpu, "ours_tok_s": tokens / a_s,
            "hf_tok_s": tokens / b_s, "ratio": b_s / a_s, "identical": a == b}


def main(argv=None) -> list[tuple[str, str, str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, targets not judged")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: g1,g3,g4,g5 (g2 runs with g1)")
    args = parser.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    torch.set_num_threads(1)  # one thread: the ratios, not the core count
    q = args.quick
    cfg = ModelConfig(**(QUICK_DECODE_CFG if q else DECODE_CFG))
    torch.manual_seed(0)
    model = TransformerLM(cfg).eval()
    n, prompt_lens, new_lens = (8, (4, 16), (2, 24)) if q else (32, (16, 128), (8, 256))
    requests = trace(n, prompt_lens, new_lens, cfg.vocab_size)
    print(f"torch {torch.__version__}, 1 thread, quick={q}; the (e) model: {model.num_parameters() / 1e6:.1f}M "
          f"parameters, float32, greedy; {n} requests, prompts {prompt_lens}, outputs {new_lens}")
    rows = []

    def judged(name, value, text, target, at_least=True):
        ok = value >= target if at_least else value <= target
        rows.append((name, text, f">= {target}" + (" (full sizes)" if q else ""), "info" if q else verdict(ok)))

    if "g1" not in skip:
        print(f"\n(g1, g2) the same {n} requests: sequential generate, the engine (max batch 16, continuous), "
              "the same engine with static batching, and static with the finished rows kept computing")
        r = bench_batching(model, requests)
        for name in ("sequential", "continuous", "static", "static_padded"):
            steps = f"; {r[name]['steps']} steps, {r[name]['decode_rows']} decode rows" if "steps" in r[name] else ""
            print(f"    {name:13} {r[name]['s']:.2f} s (CPU {r[name]['cpu_s']:.2f}) = {r[name]['tok_s']:.0f} tok/s "
                  f"({r['tokens']} tokens{steps})")

        def ratio(slow):  # the same tokens: the ratio of the times, wall (CPU)
            return r[slow]["s"] / r["continuous"]["s"], r[slow]["cpu_s"] / r["continuous"]["cpu_s"]

        (g1, g1_cpu), (g2, g2_cpu), (g2p, g2p_cpu) = ratio("sequential"), ratio("static"), ratio("static_padded")
        a, b = r["step_cost"]
        (sc, rc), (ss, rs) = ((r[name]["decode_steps"], r[name]["decode_rows"]) for name in ("continuous", "static"))
        print(f"    a decode step's CPU time, fitted: {1e3 * a:.1f} ms + {1e3 * b:.2f} ms per row; so continuous / "
              f"static = ({ss} steps x a + {rs} rows x b) / ({sc} x a + {rc} x b) = "
              f"{(ss * a + rs * b) / (sc * a + rc * b):.2f}x, at most {ss / sc:.2f}x (b = 0)")
        judged("(g1) engine / sequential generate tok/s", g1, f"{g1:.2f}x ({g1_cpu:.2f}x)", TARGETS["sequential"])
        judged("(g2) continuous / static tok/s", g2, f"{g2:.2f}x ({g2_cpu:.2f}x)", TARGETS["static"])
        rows.append(("(g2) continuous / static, finished rows kept", f"{g2p:.2f}x ({g2p_cpu:.2f}x)", "report",
                     "info"))
        rows.append(("(g1, g2) ids identical", str(r["identical"]), "True", verdict(r["identical"])))
    if "g3" not in skip:
        hf_requests = trace(16, (8, 64), (0, 0), 4096, seed=1)
        prompts, new_tokens = [p for p, _ in hf_requests], 8 if q else 32
        layers, hidden = (2, 64) if q else (4, 128)
        print(f"\n(g3) engine(from_hf(m)) vs m.generate_batch: random Llama, {layers} layers, hidden {hidden}, "
              f"16 requests of 8-64 prompt tokens, {new_tokens} new tokens")
        try:
            r = bench_vs_generate_batch(layers, hidden, prompts, new_tokens)
        except ImportError:
            print("    skipped: transformers is not installed")
        else:
            print(f"    ours         {r['ours_s']:.2f} s (CPU {r['ours_cpu']:.2f}) = {r['ours_tok_s']:.0f} tok/s")
            print(f"    transformers {r['hf_s']:.2f} s (CPU {r['hf_cpu']:.2f}) = {r['hf_tok_s']:.0f} tok/s")
            cpu = r["hf_cpu"] / r["ours_cpu"]
            judged("(g3) generate_batch / engine time", r["ratio"], f"{r['ratio']:.2f}x ({cpu:.2f}x)", TARGETS["hf"])
            rows.append(("(g3) ids identical", str(r["identical"]), "True", verdict(r["identical"])))
    if "g4" not in skip:
        r = bench_memory(model, requests)
        print(f"\n(g4) at the step with the most tokens cached: {r['used']} slots in use; paged: "
              f"{r['paged_reserved']} held (peak {r['peak_blocks']} blocks of 16); max_seq_len per running "
              f"sequence: {r['contiguous_reserved']} reserved")
        judged("(g4) paged: slots in use / held", r["paged"], f"{r['paged']:.1%}", TARGETS["paged_use"])
        rows.append(("(g4) contiguous: slots in use / reserved", f"{r['contiguous']:.1%}", "report", "info"))
    if "g5" not in skip:
        system_len, tail = (32, (2, 6)) if q else (96, (8, 32))
        r = bench_prefix(model, system_len, n, tail, new_tokens=8 if q else 32)
        print(f"\n(g5) {n} requests sharing a {system_len}-token system prompt, one arriving per step: prefill "
              f"tokens {r['prefill_off']} -> {r['prefill_on']} ({r['reused']} reused); peak blocks "
              f"{r['blocks_off']} -> {r['blocks_on']}")
        judged("(g5) prefill tokens saved", r["saved"], f"{r['saved']:.1%}", TARGETS["prefix_saved"])
        rows.append(("(g5) ids identical", str(r["identical"]), "True", verdict(r["identical"])))
    widths = [max(len(row[i]) for row in rows + [("check", "measured", "target", "result")]) for i in range(4)]
    print("\nratios of wall times (in brackets: of CPU times, steadier on a shared machine); PASS/FAIL judges wall")
    for row in [("check", "measured", "target", "result"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    return rows


if __name__ == "__main__":
    main()
