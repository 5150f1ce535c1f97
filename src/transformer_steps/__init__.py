"""transformer_steps: the decoder-only Transformer that 'Transformer, Step by Step' computes."""

from .attention import CausalSelfAttention, attention, causal_mask
from .block import Block
from .config import PRESETS, ModelConfig
from .device import autocast_context, pick_device
from .generate import decode_one_token, generate, prefill, sample_next
from .kv_cache import KVCache
from .model import TransformerLM

__all__ = [
    "PRESETS", "Block", "CausalSelfAttention", "KVCache", "ModelConfig", "TransformerLM", "attention",
    "autocast_context", "causal_mask", "decode_one_token", "from_hf", "generate", "pick_device", "prefill",
    "sample_next",
]


def from_hf(hf_model):
    """Convert a transformers GPT2LMHeadModel or LlamaForCausalLM into a TransformerLM (see hf.py)."""
    from .hf import from_hf as _from_hf  # transformers is imported only here

    return _from_hf(hf_model)
