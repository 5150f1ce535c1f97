"""Training: the loop the chapters call for short seeded runs, and the CLI that made the shipped model.

    python -m transformer_steps.train                      # default: the shipped character model
    python -m transformer_steps.train --steps 200 --out tiny.pt
    python -m transformer_steps.train --out run.pt --resume  # continue an interrupted run

AdamW, linear warmup then cosine decay, gradient clipping; batches are drawn by a seeded CPU
torch.Generator, so a run with the same seed sees the same data on any device.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm  # the plain bar: tqdm.auto warns in Jupyter without ipywidgets

from .config import FFNS, NORM_POSITIONS, NORMS, POSITIONS, ModelConfig
from .data import get_batch, load_char_dataset
from .device import autocast_context, pick_device
from .model import TransformerLM
from .precision import default_dtype
from .tokenizer import CharTokenizer
from .validate import check_int, check_number

SHIPPED_CHECKPOINT = Path(__file__).with_name("checkpoints") / "shakespeare_char.pt"

# The shipped character model: a Llama-style block (RMSNorm, SwiGLU, RoPE), see checkpoints/README.md.
DEFAULT_MODEL = dataclasses.asdict(ModelConfig.preset("char-tiny"))


@dataclass
class TrainConfig:
    steps: int = 2200
    batch_size: int = 8
    block_size: int = 256
    lr: float = 2e-3
    min_lr: float = 1e-4  # the cosine decays from lr to min_lr at the last step
    warmup_steps: int = 100
    weight_decay: float = 0.1  # on matrices and embeddings only, not on norms or biases
    beta2: float = 0.99  # small batches: a shorter second-moment memory trains faster
    grad_clip: float = 1.0
    eval_batches: int = 20
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "block_size", "eval_batches"):
            check_int(name, getattr(self, name), 1)
        check_int("warmup_steps", self.warmup_steps, 0, self.steps - 1)
        check_int("seed", self.seed)
        check_number("lr", self.lr, 0.0, min_open=True)
        check_number("min_lr", self.min_lr, 0.0, self.lr, min_open=True)
        check_number("weight_decay", self.weight_decay, 0.0)
        check_number("beta2", self.beta2, 0.0, 1.0, min_open=True, max_open=True)
        check_number("grad_clip", self.grad_clip, 0.0, min_open=True)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup, then cosine down to min_lr."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - 1 - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on 2-D weights (matmuls, embeddings), none on norm gains and biases."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.beta2))


@torch.no_grad()
def estimate_loss(model, data: torch.Tensor, cfg: TrainConfig, *, batches: int | None = None,
                  seed: int = 1234, device=None) -> float:
    """Mean cross-entropy (nats/token) over `batches` random windows drawn with a fixed seed.

    The same seed gives the same windows at every evaluation, so successive values are comparable.
    """
    batches = cfg.eval_batches if batches is None else batches
    device = next(model.parameters()).device if device is None else torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    total = 0.0
    for _ in range(batches):
        x, y = get_batch(data, cfg.batch_size, cfg.block_size, generator, device)
        with autocast_context(device):
            total += model.loss(x, y).item()
    model.train(was_training)
    return total / batches


def new_history() -> dict[str, list]:
    return {"steps": [], "train_loss": [], "val_loss": [], "lr": [], "seconds": [], "cpu_seconds": []}


def train(model, train_ids: torch.Tensor, val_ids: torch.Tensor, cfg: TrainConfig, *, progress: bool = True,
          log_every: int | None = None, eval_every: int | None = None, device=None,
          max_minutes: float | None = None, resume: dict | None = None, on_eval=None) -> dict[str, list]:
    """Train `model` in place for cfg.steps steps; return the history.

    history["steps"][i] is the number of optimizer steps done when history["train_loss"][i] and
    history["val_loss"][i] were estimated (estimate_loss on each split). Evaluations run at step 0,
    every `eval_every` steps (default: 10 per run) and at the end.
    log_every: with progress=False, print the training-batch loss (3 decimals) every log_every steps.
    max_minutes: stop early (after a final evaluation) when this call's wall-clock budget is spent.
    resume: the dict returned by `load_training_state`, to continue a saved run.
    on_eval(step, history, optimizer, generator): called after each evaluation (the CLI saves there).
    """
    if cfg.block_size > model.cfg.max_seq_len:
        raise ValueError(f"block_size ({cfg.block_size}) exceeds the model's max_seq_len ({model.cfg.max_seq_len})")
    top = int(max(train_ids.max(), val_ids.max()))
    if top >= model.cfg.vocab_size:
        raise ValueError(f"data has token id {top} but the model's vocab_size is {model.cfg.vocab_size}")
    eval_every = eval_every or max(1, cfg.steps // 10)
    device = next(model.parameters()).device if device is None else torch.device(device)
    model.to(device).train()
    optimizer = make_optimizer(model, cfg)
    generator = torch.Generator().manual_seed(cfg.seed)
    history, step = new_history(), 0
    if resume is not None:
        optimizer.load_state_dict(resume["optimizer"])
        generator.set_state(resume["generator"])
        history, step = resume["history"], resume["step"]
    session_start = time.perf_counter()
    # Wall and CPU seconds add up over resumes; CPU time tells the cost apart from other processes' load.
    start = session_start - (history["seconds"][-1] if history["seconds"] else 0.0)
    cpu_start = time.process_time() - (history["cpu_seconds"][-1] if history["cpu_seconds"] else 0.0)

    def evaluate():
        history["steps"].append(step)
        history["train_loss"].append(estimate_loss(model, train_ids, cfg, device=device))
        history["val_loss"].append(estimate_loss(model, val_ids, cfg, device=device))
        history["lr"].append(lr_at(min(step, cfg.steps - 1), cfg))
        history["seconds"].append(time.perf_counter() - start)
        history["cpu_seconds"].append(time.process_time() - cpu_start)
        if on_eval is not None:
            on_eval(step, history, optimizer, generator)

    if not history["steps"]:
        evaluate()
    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, unit="step", dynamic_ncols=True)
    while step < cfg.steps:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        x, y = get_batch(train_ids, cfg.batch_size, cfg.block_size, generator, device)
        with autocast_context(device):
            loss = model.loss(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        step += 1
        bar.update(1)
        if log_every and step % log_every == 0:
            if progress:
                bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{history['val_loss'][-1]:.3f}")
            else:
                print(f"step {step:5d}  loss {loss.item():.3f}")
        out_of_time = max_minutes is not None and time.perf_counter() - session_start > 60 * max_minutes
        if step % eval_every == 0 or step == cfg.steps or out_of_time:
            evaluate()
            bar.set_postfix(train=f"{history['train_loss'][-1]:.3f}", val=f"{history['val_loss'][-1]:.3f}")
        if out_of_time:
            bar.write(f"stopping at step {step}: the {max_minutes} min budget is spent")
            break
    bar.close()
    return history


def train_char_model(model_cfg: ModelConfig | None = None, cfg: TrainConfig | None = None, *,
                     progress: bool = False, log_every: int | None = None, eval_every: int | None = None,
                     dtype: torch.dtype = torch.float32):
    """A short, reproducible run on the course corpus: returns (model, tokenizer, history).

    The seed (cfg.seed) fixes both the initial weights (torch.manual_seed) and the batches; the
    model's vocab_size is set from the corpus. Runs on CPU; with dtype=torch.float64 (weights created
    and trained in float64) the losses come out the same to many digits on every CPU.
    """
    cfg = cfg or TrainConfig()
    tokenizer, train_ids, val_ids = load_char_dataset()
    model_cfg = (model_cfg or ModelConfig(**DEFAULT_MODEL)).replace(vocab_size=tokenizer.vocab_size)
    torch.manual_seed(cfg.seed)
    with default_dtype(dtype):
        model = TransformerLM(model_cfg)
    history = train(model, train_ids, val_ids, cfg, progress=progress, log_every=log_every,
                    eval_every=eval_every, device="cpu")
    return model, tokenizer, history


def save_checkpoint(path, model, cfg: TrainConfig, chars, history, *, optimizer=None, generator=None,
                    step: int | None = None) -> Path:
    """Write weights, both configs, the character vocabulary and the history to `path`.

    With optimizer/generator/step it also stores what `--resume` needs; without, the file holds only
    what inference needs (the shipped checkpoint). Weights are saved in float32.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        state.pop("lm_head.weight")  # the same matrix as tok_emb.weight; restored by the model's tie
    checkpoint = {
        "model_config": dataclasses.asdict(model.cfg),
        "train_config": dataclasses.asdict(cfg),
        "model": state,
        "chars": "".join(chars),
        "history": history,
    }
    if optimizer is not None:
        checkpoint.update(optimizer=optimizer.state_dict(), generator=generator.get_state(), step=step)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(checkpoint, tmp)
    tmp.replace(path)  # never leave a half-written checkpoint behind
    return path


def _read(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint(path=None, device="cpu"):
    """Return (model in eval mode, CharTokenizer, history) from a checkpoint (default: the shipped one)."""
    checkpoint = _read(SHIPPED_CHECKPOINT if path is None else path)
    model = TransformerLM(ModelConfig(**checkpoint["model_config"]))
    missing, unexpected = model.load_state_dict(checkpoint["model"], strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and model.cfg.tie_embeddings)]  # stored once
    if unexpected or missing:
        raise ValueError(f"checkpoint does not match its config: missing {missing}, unexpected {unexpected}")
    return model.to(device).eval(), CharTokenizer(checkpoint["chars"]), checkpoint["history"]


def load_pretrained(device="cpu"):
    """The character-level Shakespeare model shipped with the package: (model, tokenizer, history)."""
    return load_checkpoint(SHIPPED_CHECKPOINT, device)


def load_training_state(path) -> dict:
    """What `train(..., resume=...)` needs, plus the model, from a checkpoint saved during training."""
    checkpoint = _read(path)
    if "optimizer" not in checkpoint:
        raise ValueError(f"{path} holds no optimizer state (an inference-only checkpoint): cannot resume")
    model, tokenizer, history = load_checkpoint(path)
    return {"model": model.train(), "tokenizer": tokenizer, "history": history, "step": checkpoint["step"],
            "optimizer": checkpoint["optimizer"], "generator": checkpoint["generator"],
            "train_config": TrainConfig(**checkpoint["train_config"])}


def parse_args(argv=None):
    d, m = TrainConfig(), DEFAULT_MODEL
    p = argparse.ArgumentParser(prog="python -m transformer_steps.train",
                                description="Train the character-level Shakespeare model.")
    p.add_argument("--out", type=Path, default=Path("shakespeare_char.pt"), help="checkpoint path")
    p.add_argument("--resume", action="store_true", help="continue the run saved at --out")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--block-size", type=int, default=d.block_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--min-lr", type=float, default=d.min_lr)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--eval-batches", type=int, default=d.eval_batches)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--final-eval-batches", type=int, default=100,
                   help="batches for the val loss printed and stored at the end")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--d-model", type=int, default=m["d_model"])
    p.add_argument("--layers", type=int, default=m["n_layers"])
    p.add_argument("--heads", type=int, default=m["n_heads"])
    p.add_argument("--kv-heads", type=int, default=m["n_kv_heads"],
                   help="fewer than --heads: grouped-query attention (default: as many as --heads)")
    p.add_argument("--norm", default=m["norm"], choices=NORMS)
    p.add_argument("--norm-position", default=m["norm_position"], choices=NORM_POSITIONS)
    p.add_argument("--ffn", default=m["ffn"], choices=FFNS)
    p.add_argument("--experts", type=int, default=m["n_experts"], help="with --ffn moe")
    p.add_argument("--pos", default=m["pos"], choices=POSITIONS)
    p.add_argument("--dropout", type=float, default=m["dropout"])
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--max-minutes", type=float, default=None, help="wall-clock budget; stops early")
    p.add_argument("--no-progress", action="store_true", help="print lines instead of a progress bar")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else pick_device()
    tokenizer, train_ids, val_ids = load_char_dataset()
    if args.resume:
        state = load_training_state(args.out)
        model, cfg = state["model"], state["train_config"]
        if state["tokenizer"].chars != tokenizer.chars:
            raise ValueError(f"{args.out} was trained on a different character set than the shipped corpus")
        print(f"resuming {args.out} at step {state['step']} of {cfg.steps}")
    else:
        state = None
        cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, block_size=args.block_size, lr=args.lr,
                          min_lr=args.min_lr, warmup_steps=args.warmup_steps, weight_decay=args.weight_decay,
                          eval_batches=args.eval_batches, seed=args.seed)
        model_cfg = ModelConfig(**{**DEFAULT_MODEL, "vocab_size": tokenizer.vocab_size,
                                   "max_seq_len": args.block_size, "d_model": args.d_model,
                                   "n_layers": args.layers, "n_heads": args.heads, "n_kv_heads": args.kv_heads,
                                   "norm": args.norm, "norm_position": args.norm_position, "ffn": args.ffn,
                                   "n_experts": args.experts, "pos": args.pos, "dropout": args.dropout})
        torch.manual_seed(cfg.seed)
        model = TransformerLM(model_cfg)
    print(f"device {device}, threads {torch.get_num_threads()}, {model.num_parameters():,} parameters, "
          f"{len(train_ids):,} train / {len(val_ids):,} val characters")
    print(f"model {dataclasses.asdict(model.cfg)}\ntrain {dataclasses.asdict(cfg)}")

    def save(step, history, optimizer, generator):
        save_checkpoint(args.out, model, cfg, tokenizer.chars, history, optimizer=optimizer,
                        generator=generator, step=step)
        if args.no_progress:
            print(f"step {step:5d}  train {history['train_loss'][-1]:.4f}  val {history['val_loss'][-1]:.4f}  "
                  f"lr {history['lr'][-1]:.2e}  {history['seconds'][-1]:.0f} s wall  {history['cpu_seconds'][-1]:.0f} s cpu",
                  flush=True)

    history = train(model, train_ids, val_ids, cfg, progress=not args.no_progress, eval_every=args.eval_every,
                    device=device, max_minutes=args.max_minutes, resume=state, on_eval=save)
    final = estimate_loss(model, val_ids, cfg, batches=args.final_eval_batches, seed=4321, device=device)
    steps_done = history["steps"][-1]
    print(f"{steps_done} steps in {history['seconds'][-1]:.0f} s wall ({history['cpu_seconds'][-1]:.0f} s cpu); "
          f"val loss {final:.4f} nats/char "
          f"over {args.final_eval_batches} batches")
    if steps_done < cfg.steps:
        print(f"stopped early: {args.out} keeps the optimizer state; continue with --resume")
        return history
    history["final_val_loss"] = final
    history["final_val_batches"] = args.final_eval_batches
    save_checkpoint(args.out, model, cfg, tokenizer.chars, history)  # finished: keep only what inference needs
    print(f"saved {args.out}")
    return history


if __name__ == "__main__":
    main()
