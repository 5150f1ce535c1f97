"""Speed checks, measured side by side in one run: `python -m transformer_steps.bench [--quick] [--device cpu]`.

(a) KV-cached vs naive greedy decoding; (b) our generate on from_hf(m) vs m.generate for the same tiny
Llama; (c) the SDPA attention path vs the readable reference path (the op alone and a whole-model
prefill); (d) on CUDA only: decode tokens/s and achieved memory bandwidth for a ~1B-parameter bf16 model.
Each timing is the best (and median) wall time and the best CPU time of a few repeats after a warm-up. In (b)
and (c) the two sides take turns, repeat by repeat; (a) times the cached side, then the naive one (fewer
repeats: it is the slow one), and (d) is one model on an unshared GPU. Ratios use the best wall times
(CPU-time ratios in brackets: steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import NamedTuple

import torch

from ..attention import attention, causal_mask
from ..config import ModelConfig
from ..generate import generate
from ..kv_cache import kv_bytes
from ..model import TransformerLM

DECODE_CFG = {"vocab_size": 4096, "max_seq_len": 1024, "d_model": 384, "n_layers": 6, "n_heads": 6}
QUICK_DECODE_CFG = {"vocab_size": 256, "max_seq_len": 128, "d_model": 64, "n_layers": 2, "n_heads": 2}
# ~1.0B parameters, Llama-shaped (GQA, SwiGLU, RoPE, untied head)
GPU_CFG = {"vocab_size": 32000, "max_seq_len": 2048, "d_model": 2048, "n_layers": 20, "n_heads": 16,
           "n_kv_heads": 4, "norm": "rmsnorm", "ffn": "swiglu", "pos": "rope", "bias": False,
           "tie_embeddings": False}
TARGETS = {"decode": 10.0, "hf": 2.0, "sdpa": 1.3, "max_abs_diff": 1e-5}


def synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class Timing(NamedTuple):
    best: float  # wall-clock seconds, fastest repeat
    median: float
    cpu: float  # process CPU seconds of the fastest-CPU repeat: less sensitive to other jobs on a shared machine
    result: object


def side_by_side(fns: dict, device, repeats: int = 3, warmup: int = 1) -> dict[str, Timing]:
    """Time each fn() `repeats` times after `warmup` untimed runs, taking turns (a, b, a, b, ...), so a burst of
    load on a shared machine hits both sides instead of one; Timing per name."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    cpu_times = {name: [] for name in fns}
    results = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            synchronize(device)
            start, cpu_start = time.perf_counter(), time.process_time()
            results[name] = fn()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
            cpu_times[name].append(time.process_time() - cpu_start)
    return {name: Timing(min(times[name]), statistics.median(times[name]), min(cpu_times[name]), results[name])
            for name in fns}


def timed(fn, device, repeats: int = 3, warmup: int = 1) -> Timing:
    """Best and median wall time and best CPU time of fn() over `repeats` runs after `warmup` untimed ones."""
    return side_by_side({"fn": fn}, device, repeats, warmup)["fn"]


def random_prompt(batch: int, length: int, vocab_size: int, device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, length), generator=gen).to(device)


def bench_decode(cfg: ModelConfig, prompt_len: int, new_tokens: int, device, repeats: int = 3,
                 naive_repeats: int = 1) -> dict:
    """Greedy decoding with the KV cache vs recomputing the whole prefix every step."""
    torch.manual_seed(0)
    model = TransformerLM(cfg).to(device).eval()
    idx = random_prompt(1, prompt_len, cfg.vocab_size, device)
    cached = timed(lambda: generate(model, idx, new_tokens, temperature=0.0), device, repeats)
    # the naive loop is the slow one: warm it up on a few tokens, then time it fewer times
    generate(model, idx, min(new_tokens, 8), temperature=0.0, use_cache=False)
    naive = timed(lambda: generate(model, idx, new_tokens, temperature=0.0, use_cache=False), device,
                  naive_repeats, warmup=0)
    return {"cached": cached, "naive": naive, "ratio": naive.best / cached.best, "cpu_ratio": naive.cpu / cached.cpu,
            "identical": torch.equal(cached.result, naive.result), "tokens": new_tokens}


def random_hf_llama(n_layers: int, hidden: int, vocab_size: int, max_len: int, seed: int = 0):
    """A random-weight transformers LlamaForCausalLM (GQA, untied head), weights perturbed off their init."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=ModelConfig(vocab_size=1, max_seq_len=1, d_model=hidden, n_layers=1,
                                                    n_heads=4, ffn="swiglu").ffn_dim,  # our SwiGLU size
                      num_hidden_layers=n_layers, vocab_size=vocab_size, max_position_embeddings=max_len,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():  # norms leave their ones, logits leave their near-ties
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return model.eval()


def bench_vs_hf(n_layers: int, hidden: int, prompt_len: int, new_tokens: int, device, repeats: int = 3) -> dict:
    """Greedy decoding with our generate on from_hf(m) vs transformers' m.generate, same weights."""
    from ..hf import from_hf

    vocab_size = 4096
    hf_model = random_hf_llama(n_layers, hidden, vocab_size, prompt_len + new_tokens).to(device)
    model = from_hf(hf_model)
    idx = random_prompt(1, prompt_len, vocab_size, device)
    mask = torch.ones_like(idx)
    t = side_by_side({"ours": lambda: generate(model, idx, new_tokens, temperature=0.0),
                      "hf": lambda: hf_model.generate(idx, attention_mask=mask, max_new_tokens=new_tokens,
                                                      do_sample=False)}, device, repeats)
    ours, theirs = t["ours"], t["hf"]
    return {"ours": ours, "hf": theirs, "ratio": theirs.best / ours.best, "cpu_ratio": theirs.cpu / ours.cpu,
            "identical": torch.equal(ours.result, theirs.result), "tokens": new_tokens}


def bench_attention(cfg: ModelConfig, seq_len: int, device, repeats: int = 5) -> dict:
    """Causal prefill of seq_len tokens: the attention op alone, (1, nh, T, hs), and the whole model."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, cfg.n_heads, seq_len, cfg.head_dim, generator=gen).to(device) for _ in range(3))
    mask = causal_mask(seq_len, seq_len, device)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with torch.inference_mode():
        op = side_by_side({"sdpa": lambda: sdpa(q, k, v, is_causal=True),
                           "ref": lambda: attention(q, k, v, mask)[0]}, device, repeats)
        op_sdpa, op_ref = op["sdpa"], op["ref"]
        torch.manual_seed(0)
        fast_model = TransformerLM(cfg.replace(attn_impl="sdpa")).to(device).eval()
        ref_model = TransformerLM(cfg.replace(attn_impl="reference")).to(device).eval()
        ref_model.load_state_dict(fast_model.state_dict())
        idx = random_prompt(1, seq_len, cfg.vocab_size, device)
        whole = side_by_side({"sdpa": lambda: fast_model(idx), "ref": lambda: ref_model(idx)}, device, repeats)
        model_sdpa, model_ref = whole["sdpa"], whole["ref"]
    return {"op_sdpa": op_sdpa, "op_ref": op_ref, "op_ratio": op_ref.best / op_sdpa.best,
            "op_cpu_ratio": op_ref.cpu / op_sdpa.cpu,
            "op_max_abs_diff": (op_sdpa.result - op_ref.result).abs().max().item(),
            "model_sdpa": model_sdpa, "model_ref": model_ref, "model_ratio": model_ref.best / model_sdpa.best,
            "model_cpu_ratio": model_ref.cpu / model_sdpa.cpu,
            "model_max_abs_diff": (model_sdpa.result - model_ref.result).abs().max().item(), "seq_len": seq_len}


def decode_bytes_per_token(model: TransformerLM, context_len: float, batch: int = 1) -> tuple[float, float]:
    """(weight bytes, KV-cache bytes) one decode step reads at a context of context_len positions.

    Every matrix is read once per step; of an untied token embedding only one row per sequence is read.
    """
    cfg = model.cfg
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if not cfg.tie_embeddings:
        emb = model.tok_emb.weight
        weight_bytes -= (emb.shape[0] - batch) * emb.shape[1] * emb.element_size()
    if model.pos_emb is not None:
        pos = model.pos_emb.weight
        weight_bytes -= (pos.shape[0] - 1) * pos.shape[1] * pos.element_size()
    elem = model.tok_emb.weight.element_size()
    return float(weight_bytes), float(kv_bytes(cfg.n_layers, batch, cfg.kv_heads, context_len, cfg.head_dim, elem))


def bench_gpu_bandwidth(cfg: ModelConfig, prompt_len: int, new_tokens: int, peak_bytes_per_s: float,
                        device="cuda", repeats: int = 3) -> dict:
    """Decode tokens/s of a bf16 model and the memory bandwidth that implies, as a fraction of the peak."""
    if torch.device(device).type != "cuda":
        raise ValueError(f"the bandwidth benchmark needs a CUDA device, got {device}")
    with torch.device(device):
        torch.manual_seed(0)
        model = TransformerLM(cfg).to(torch.bfloat16).eval()
    idx = random_prompt(1, prompt_len, cfg.vocab_size, device)
    if new_tokens < 2:
        raise ValueError(f"new_tokens must be >= 2 (one prefill token, then decode steps), got {new_tokens}")
    # generate(n) = prefill + (n - 1) decode steps: subtracting generate(1) leaves the decode steps alone
    full = timed(lambda: generate(model, idx, new_tokens, temperature=0.0), device, repeats)
    prefill_only = timed(lambda: generate(model, idx, 1, temperature=0.0), device, repeats)
    steps = new_tokens - 1
    weight_bytes, cache_bytes = decode_bytes_per_token(model, prompt_len + new_tokens / 2)
    tps = steps / (full.best - prefill_only.best)
    achieved = (weight_bytes + cache_bytes) * tps
    return {"params": model.num_parameters(), "tps": tps, "median_tps": steps / (full.median - prefill_only.median),
            "weight_bytes": weight_bytes, "kv_bytes": cache_bytes, "bytes_per_s": achieved,
            "fraction_of_peak": achieved / peak_bytes_per_s, "gpu": torch.cuda.get_device_name(device)}


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv=None) -> list[tuple[str, str, str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, speed targets not judged")
    parser.add_argument("--device", default="auto", help="auto (CUDA, MPS, CPU), cpu, cuda, ...")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: usable cores not already busy, by the load average)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per measurement (best is used)")
    parser.add_argument("--naive-repeats", type=int, default=1, help="timed repeats of the slow naive decode")
    parser.add_argument("--peak-bw", type=float, default=4.8e12, help="GPU peak memory bandwidth, B/s (H200)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: decode,hf,attention,gpu")
    args = parser.parse_args(argv)
    from ..device import pick_device

    device = pick_device() if args.device == "auto" else torch.device(args.device)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if args.threads is None:  # more threads than free cores make every op wait for a descheduled thread
        args.threads = max(1, min(cores, cores - round(load)))
    torch.set_num_threads(args.threads)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    q = args.quick
    decode_cfg = ModelConfig(**(QUICK_DECODE_CFG if q else DECODE_CFG))
    prompt_len, new_tokens = (8, 24) if q else (16, 512)
    hf_layers, hf_hidden, hf_tokens = (2, 64, 24) if q else (4, 128, 256)
    seq_len = 64 if q else 512
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()} ({cores} usable cores, "
          f"load average {load:.1f}), repeats {args.repeats} "
          f"(naive decode {args.naive_repeats}), quick={q}; each time: best wall (median wall, best CPU) of the repeats")
    rows = []  # (check, measured, target, verdict)

    def speed(name, ratio, cpu_ratio, target):
        rows.append((name, f"{ratio:.2f}x ({cpu_ratio:.2f}x)", f">= {target}x" + (" (full sizes)" if q else ""),
                     "info" if q else verdict(ratio >= target)))

    def show(label, t: Timing, unit=1.0, suffix="s", decimals=3):
        return (f"{label} {t.best * unit:.{decimals}f} {suffix} (median {t.median * unit:.{decimals}f}, "
                f"CPU {t.cpu * unit:.{decimals}f})")

    if "decode" not in skip:
        print(f"\n(a) greedy decode, KV cache vs naive: {decode_cfg}, prompt {prompt_len}, {new_tokens} new tokens")
        r = bench_decode(decode_cfg, prompt_len, new_tokens, device, args.repeats, args.naive_repeats)
        print(f"    {show('cached', r['cached'])} = {new_tokens / r['cached'].best:.1f} tok/s")
        print(f"    {show('naive ', r['naive'])} = {new_tokens / r['naive'].best:.1f} tok/s")
        speed("(a) naive / cached decode time", r["ratio"], r["cpu_ratio"], TARGETS["decode"])
        rows.append(("(a) cached ids == naive ids", str(r["identical"]), "True", verdict(r["identical"])))
    if "hf" not in skip:
        print(f"\n(b) our generate(from_hf(m)) vs m.generate: random Llama, {hf_layers} layers, hidden {hf_hidden}, "
              f"4 heads / 2 kv heads, vocab 4096, prompt {prompt_len}, {hf_tokens} greedy tokens")
        # Judged on one thread: one token of a 128-wide model is too little work to split, and a second thread
        # mostly adds synchronisation. Both sides run under the same thread count; the other count is reported.
        thread_counts = [1] + ([args.threads] if args.threads > 1 and device.type == "cpu" else [])
        try:
            for threads in thread_counts:
                torch.set_num_threads(threads)
                r = bench_vs_hf(hf_layers, hf_hidden, prompt_len, hf_tokens, device, args.repeats)
                for label, key in (("ours        ", "ours"), ("transformers", "hf")):
                    print(f"    {threads} thread(s) {show(label, r[key])} = {hf_tokens / r[key].best:.1f} tok/s")
                if threads == 1:
                    speed("(b) transformers / ours time, 1 thread", r["ratio"], r["cpu_ratio"], TARGETS["hf"])
                    rows.append(("(b) ours ids == transformers ids", str(r["identical"]), "True",
                                 verdict(r["identical"])))
                else:
                    rows.append((f"(b) transformers / ours time, {threads} threads",
                                 f"{r['ratio']:.2f}x ({r['cpu_ratio']:.2f}x)", "report", "info"))
        except ImportError:
            print("    skipped: transformers is not installed")
        torch.set_num_threads(args.threads)
    if "attention" not in skip:
        print(f"\n(c) causal prefill T={seq_len}, SDPA vs reference attention: op on (1, {decode_cfg.n_heads}, "
              f"{seq_len}, {decode_cfg.head_dim}), and the (a) model")
        r = bench_attention(decode_cfg, seq_len, device, max(args.repeats, 5))
        for label, key in (("op    sdpa     ", "op_sdpa"), ("op    reference", "op_ref"),
                           ("model sdpa     ", "model_sdpa"), ("model reference", "model_ref")):
            print(f"    {show(label, r[key], 1e3, 'ms', 2)}")
        speed("(c) op: reference / SDPA time", r["op_ratio"], r["op_cpu_ratio"], TARGETS["sdpa"])
        # the whole model: attention is a minority of a 512-token prefill here, so this one is reported, not judged
        rows.append(("(c) model: reference / SDPA time", f"{r['model_ratio']:.2f}x ({r['model_cpu_ratio']:.2f}x)",
                     "report", "info"))
        for part in ("op", "model"):
            diff = r[f"{part}_max_abs_diff"]
            rows.append((f"(c) {part}: max |SDPA - reference|", f"{diff:.2e}", f"<= {TARGETS['max_abs_diff']:.0e}",
                         verdict(diff <= TARGETS["max_abs_diff"])))
    if "gpu" not in skip:
        if device.type != "cuda":
            print(f"\n(d) GPU bandwidth: skipped (device is {device.type}; needs CUDA)")
        else:
            gpu_cfg = ModelConfig(**GPU_CFG) if not q else decode_cfg
            gpu_tokens = 32 if q else 256
            print(f"\n(d) bf16 decode bandwidth: {gpu_cfg}, prompt {prompt_len}, {gpu_tokens} tokens, "
                  f"peak {args.peak_bw:.3g} B/s")
            r = bench_gpu_bandwidth(gpu_cfg, prompt_len, gpu_tokens, args.peak_bw, device, args.repeats)
            print(f"    {r['gpu']}: {r['params'] / 1e9:.3f}B parameters, {r['tps']:.1f} tok/s ({r['median_tps']:.1f}); "
                  f"{r['weight_bytes'] / 1e9:.3f} GB weights + {r['kv_bytes'] / 1e9:.4f} GB KV per token -> "
                  f"{r['bytes_per_s'] / 1e9:.0f} GB/s = {r['fraction_of_peak']:.1%} of peak")
            rows.append(("(d) decode bandwidth / peak", f"{r['fraction_of_peak']:.1%}", "report", "info"))
    widths = [max(len(row[i]) for row in rows + [("check", "measured", "target", "result")]) for i in range(4)]
    print("\nratios use the best wall times (in brackets: best CPU times); PASS/FAIL judges the wall-time ratio")
    for row in [("check", "measured", "target", "result"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    return rows


if __name__ == "__main__":
    main()
