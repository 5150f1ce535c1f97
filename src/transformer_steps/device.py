"""Device choice: the package never hard-codes one."""

from __future__ import annotations

import contextlib
import shutil

import torch


def pick_device() -> torch.device:
    """CUDA if present, then Apple's MPS, then CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def autocast_context(device):
    """bf16 autocast on CUDA (matmuls in bf16, norms/softmax kept in float32 by the modules); no-op elsewhere."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compile_unavailable_reason(device="cpu") -> str | None:
    """Why torch.compile cannot run here (None when it can): no torch.compile, or no C++ compiler for a CPU."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if torch.device(device).type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "torch.compile on a CPU needs a C++ compiler (g++ or clang++) on PATH; none found"
    return None
