"""Load Hugging Face GPT-2 and Llama models into a TransformerLM (transformers is imported only in here).

The two families differ in ways the chapters teach: GPT-2 stores its projections as Conv1D (x W, weight
(in, out)) with q, k, v fused in one matrix, learned positions, LayerNorm with biases, GELU and a tied head;
Llama uses nn.Linear (weight (out, in)), RoPE, RMSNorm, SwiGLU, grouped-query attention and usually an
untied head.
"""

from __future__ import annotations

import torch

from .config import ModelConfig
from .model import TransformerLM

SUPPORTED = "transformers GPT2LMHeadModel or LlamaForCausalLM"
GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")  # both are GPT-2's tanh GELU, our ffn="gelu"


def from_hf(hf_model) -> TransformerLM:
    """A TransformerLM with the config and weights of a transformers GPT2LMHeadModel or LlamaForCausalLM.

    The result is in eval mode, on the input's device, with the input's parameter dtype. Settings the
    package cannot reproduce exactly (RoPE scaling, other activations, ...) raise ValueError.

    >>> from transformers import GPT2LMHeadModel
    >>> model = from_hf(GPT2LMHeadModel.from_pretrained("gpt2"))
    >>> generate(model, torch.tensor([[464, 2068]]), 20, temperature=0.0)  # == hf_model.generate(greedy)
    """
    if not isinstance(hf_model, torch.nn.Module):
        raise TypeError(f"from_hf needs a {SUPPORTED}, got {type(hf_model).__name__}")
    from transformers import GPT2LMHeadModel, LlamaForCausalLM

    if isinstance(hf_model, GPT2LMHeadModel):
        cfg, state = _gpt2_config(hf_model.config), _gpt2_state(hf_model)
    elif isinstance(hf_model, LlamaForCausalLM):
        cfg, state = _llama_config(hf_model.config), _llama_state(hf_model)
    else:
        raise TypeError(f"from_hf supports a {SUPPORTED}, got {type(hf_model).__name__}")
    ref = next(hf_model.parameters())
    model = TransformerLM(cfg)
    ours = model.state_dict()
    if ours.keys() != state.keys():  # strict: every tensor of ours is filled, and the mapping names nothing we lack
        raise ValueError(f"weight mapping mismatch: missing {sorted(ours.keys() - state.keys())}, "
                         f"unexpected {sorted(state.keys() - ours.keys())}")
    with torch.no_grad():
        for name, value in state.items():
            dest, row = ours[name], 0
            for part in value if isinstance(value, list) else [value]:
                # a fused matrix of ours stacks theirs row-wise; copying in place keeps one copy of the weights
                if part.shape[1:] != dest.shape[1:] or row + part.shape[0] > dest.shape[0]:
                    raise ValueError(f"{name}: cannot place a {tuple(part.shape)} part in {tuple(dest.shape)}")
                dest.narrow(0, row, part.shape[0]).copy_(part)
                row += part.shape[0]
            if row != dest.shape[0]:
                raise ValueError(f"{name}: the parts fill {row} of {dest.shape[0]} rows")
    # the position tables follow the dtype too: attention would cast them to it anyway (the same bits)
    return model.to(device=ref.device, dtype=ref.dtype).eval()


def _gpt2_config(c) -> ModelConfig:
    if c.activation_function not in GPT2_ACTIVATIONS:
        raise ValueError(f"GPT-2 activation_function {c.activation_function!r} is not supported; allowed: "
                         f"{', '.join(GPT2_ACTIVATIONS)} (the tanh GELU)")
    if not c.scale_attn_weights:
        raise ValueError("GPT-2 scale_attn_weights=False is not supported: attention always scales by 1/sqrt(hs)")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if getattr(c, flag, False):
            raise ValueError(f"GPT-2 {flag}=True is not supported; it must be False")
    return ModelConfig(vocab_size=c.vocab_size, max_seq_len=c.n_positions, d_model=c.n_embd, n_layers=c.n_layer,
                       n_heads=c.n_head, d_ff=c.n_inner, norm="layernorm", ffn="gelu", pos="learned",
                       tie_embeddings=bool(c.tie_word_embeddings), bias=True, norm_eps=c.layer_norm_epsilon)


def _gpt2_state(m) -> dict[str, torch.Tensor]:
    t = m.transformer
    state = {"tok_emb.weight": t.wte.weight, "pos_emb.weight": t.wpe.weight,
             "norm_f.weight": t.ln_f.weight, "norm_f.bias": t.ln_f.bias, "lm_head.weight": m.lm_head.weight}
    for i, h in enumerate(t.h):
        p = f"blocks.{i}."
        # Conv1D computes x W with W (in, out); nn.Linear wants (out, in): transpose.
        # c_attn = [Wq | Wk | Wv] is already our fused qkv.
        state.update({
            p + "norm1.weight": h.ln_1.weight, p + "norm1.bias": h.ln_1.bias,
            p + "attn.qkv.weight": h.attn.c_attn.weight.T, p + "attn.qkv.bias": h.attn.c_attn.bias,
            p + "attn.o_proj.weight": h.attn.c_proj.weight.T, p + "attn.o_proj.bias": h.attn.c_proj.bias,
            p + "norm2.weight": h.ln_2.weight, p + "norm2.bias": h.ln_2.bias,
            p + "ffn.fc.weight": h.mlp.c_fc.weight.T, p + "ffn.fc.bias": h.mlp.c_fc.bias,
            p + "ffn.proj.weight": h.mlp.c_proj.weight.T, p + "ffn.proj.bias": h.mlp.c_proj.bias,
        })
    return state


def _llama_rope(c) -> tuple[str, float, dict]:
    """(rope_type, base, all parameters): transformers 5 keeps them in rope_parameters, 4.x in rope_theta/rope_scaling."""
    params = getattr(c, "rope_parameters", None)
    if params is None:
        params = dict(getattr(c, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(c, "rope_theta", 10000.0))
    rope_type = params.get("rope_type", params.get("type", "default"))
    return rope_type, float(params["rope_theta"]), params


def _llama_config(c) -> ModelConfig:
    if c.hidden_act != "silu":
        raise ValueError(f"Llama hidden_act {c.hidden_act!r} is not supported; allowed: silu (SwiGLU)")
    rope_type, base, params = _llama_rope(c)
    if rope_type != "default":
        raise ValueError(f"Llama RoPE scaling {rope_type!r} is not supported; allowed: 'default' (no scaling)")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"partial_rotary_factor {params['partial_rotary_factor']} is not supported; allowed: 1.0")
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if head_dim * c.num_attention_heads != c.hidden_size:
        raise ValueError(f"Llama head_dim ({head_dim}) must equal hidden_size / num_attention_heads "
                         f"({c.hidden_size} / {c.num_attention_heads})")
    attention_bias, mlp_bias = bool(c.attention_bias), bool(getattr(c, "mlp_bias", False))
    if attention_bias != mlp_bias:  # our one `bias` switch covers every Linear but the head
        raise ValueError(f"attention_bias ({attention_bias}) and mlp_bias ({mlp_bias}) must be equal")
    return ModelConfig(vocab_size=c.vocab_size, max_seq_len=c.max_position_embeddings, d_model=c.hidden_size,
                       n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads,
                       n_kv_heads=c.num_key_value_heads or c.num_attention_heads, d_ff=c.intermediate_size,
                       norm="rmsnorm", ffn="swiglu", pos="rope", rope_base=base,
                       tie_embeddings=bool(c.tie_word_embeddings), bias=attention_bias, norm_eps=c.rms_norm_eps)


def _llama_state(m) -> dict[str, list[torch.Tensor]]:
    sources = {"tok_emb": ["model.embed_tokens"], "norm_f": ["model.norm"], "lm_head": ["lm_head"]}
    for i in range(m.config.num_hidden_layers):
        ours, hf = f"blocks.{i}.", f"model.layers.{i}."
        sources.update({
            ours + "norm1": [hf + "input_layernorm"], ours + "norm2": [hf + "post_attention_layernorm"],
            ours + "attn.qkv": [hf + "self_attn.q_proj", hf + "self_attn.k_proj", hf + "self_attn.v_proj"],
            ours + "attn.o_proj": [hf + "self_attn.o_proj"],
            ours + "ffn.gate_up": [hf + "mlp.gate_proj", hf + "mlp.up_proj"], ours + "ffn.down": [hf + "mlp.down_proj"],
        })
    theirs = dict(m.named_parameters(remove_duplicate=False))
    # nn.Linear on both sides (weight (out, in)); a fused matrix of ours takes the list of theirs, row-wise
    return {f"{ours}.{kind}": [theirs[f"{hf}.{kind}"] for hf in names]
            for ours, names in sources.items() for kind in ("weight", "bias") if f"{names[0]}.{kind}" in theirs}
