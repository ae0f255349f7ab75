"""Derived quantities of a ModelSpec: parameters, KV-cache bytes, FLOPs. Plain functions.

Parameter counts follow the published convention: *total* counts every stored weight except the
multi-token-prediction module; *active* counts the weights one token multiplies with (attention, the
dense FFNs, the shared experts and top-k routed experts, the LM head), not the embedding lookup.
"""

from __future__ import annotations

from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.model import ModelSpec, WeightComponent

__all__ = [
    "attention_params",
    "dense_mlp_params",
    "expert_params",
    "layer_params",
    "params_total",
    "params_active",
    "embedding_params",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "flops_per_token",
    "weight_bytes",
    "q_width",
    "kv_width",
    "describe",
    "summary",
]


def q_width(spec: ModelSpec) -> int:
    """Width of the concatenated query heads."""
    return spec.num_attention_heads * spec.head_dim


def kv_width(spec: ModelSpec) -> int:
    """Per-token width of what the KV cache stores for one layer (K and V together; MLA: the latent)."""
    if spec.mla is not None:
        return spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim
    return 2 * spec.num_kv_heads * spec.head_dim


def attention_params(spec: ModelSpec) -> int:
    """Weights of one attention block: projections, their norms and biases, sinks."""
    h = spec.hidden_size
    if spec.mla is not None:
        m = spec.mla
        n = spec.num_attention_heads
        q_out = n * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        q = h * q_out if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * q_out
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        kv += m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + n * m.v_head_dim * h + h
    qd = q_width(spec)
    kvd = spec.num_kv_heads * spec.head_dim
    params = h * qd + 2 * h * kvd + qd * h
    if spec.attention_bias:
        params += qd + 2 * kvd + h
    if spec.qk_norm:
        params += 2 * spec.head_dim
    if spec.attention_sinks:
        params += spec.num_attention_heads
    return params + h  # input norm


def dense_mlp_params(spec: ModelSpec, width: int | None = None) -> int:
    """Weights of one dense (or one expert's) FFN of hidden ``width``."""
    width = spec.intermediate_size if width is None else width
    matrices = 3 if spec.gated_mlp else 2
    return matrices * spec.hidden_size * width


def expert_params(spec: ModelSpec) -> int:
    """Weights of one routed expert, biases included."""
    assert spec.moe is not None
    params = dense_mlp_params(spec, spec.moe.expert_intermediate_size)
    if spec.moe.expert_bias:
        params += 2 * spec.moe.expert_intermediate_size + spec.hidden_size
    return params


def layer_params(spec: ModelSpec, layer: int, *, active: bool = False) -> int:
    """Weights of one transformer layer; with ``active``, only those one token uses."""
    params = attention_params(spec) + spec.hidden_size  # post-attention norm
    if not spec.is_moe_layer(layer):
        return params + dense_mlp_params(spec)
    moe = spec.moe
    assert moe is not None
    experts = moe.experts_per_token if active else moe.num_experts
    params += experts * expert_params(spec) + spec.hidden_size * moe.num_experts  # router
    if moe.num_shared_experts:
        params += moe.num_shared_experts * dense_mlp_params(spec, moe.shared_expert_intermediate_size)
    return params


def embedding_params(spec: ModelSpec) -> int:
    """Embedding table plus a separate LM head unless tied, plus the final norm."""
    table = spec.vocab_size * spec.hidden_size
    return table * (1 if spec.tie_word_embeddings else 2) + spec.hidden_size


def params_total(spec: ModelSpec) -> int:
    """Every stored weight.

    >>> from shardplan.tools.catalogs.models import load_model
    >>> round(params_total(load_model("llama-3.1-70b")) / 1e9, 1)
    70.6
    """
    return sum(layer_params(spec, layer) for layer in range(spec.num_layers)) + embedding_params(spec)


def params_active(spec: ModelSpec) -> int:
    """Weights one token multiplies with: everything but unused experts and the embedding lookup."""
    head = spec.vocab_size * spec.hidden_size + spec.hidden_size
    return sum(layer_params(spec, layer, active=True) for layer in range(spec.num_layers)) + head


def weight_bytes(spec: ModelSpec) -> float:
    """Bytes of all weights in their storage formats (parts may differ: gpt-oss's routed experts, the attention
    of NVIDIA's FP4 DeepSeek-R1; ``ModelSpec.weight_format``)."""
    moe = spec.moe
    moe_layers = sum(1 for layer in range(spec.num_layers) if spec.is_moe_layer(layer))
    parts: dict[WeightComponent, float] = {
        "attention": spec.num_layers * attention_params(spec),
        "dense_ffn": (spec.num_layers - moe_layers) * dense_mlp_params(spec),
        "lm_head": 0 if spec.tie_word_embeddings else spec.vocab_size * spec.hidden_size,
    }
    if moe is not None:
        parts["experts"] = moe_layers * moe.num_experts * expert_params(spec)
        parts["router"] = moe_layers * spec.hidden_size * moe.num_experts
        parts["shared_experts"] = moe_layers * moe.num_shared_experts * dense_mlp_params(
            spec, moe.shared_expert_intermediate_size)
    rest = params_total(spec) - sum(parts.values())  # the embedding table and the norms
    return rest * DTYPE_BYTES[spec.weight_dtype] + sum(
        params * DTYPE_BYTES[spec.weight_format(part)] for part, params in parts.items()
    )


def kv_bytes_per_token(spec: ModelSpec) -> float:
    """KV-cache bytes one token adds across all layers (before any sliding-window cap)."""
    return kv_width(spec) * spec.num_layers * DTYPE_BYTES[spec.kv_dtype]


def kv_cache_bytes(spec: ModelSpec, tokens: int) -> float:
    """KV-cache bytes of one sequence of ``tokens``; sliding-window layers keep only their window."""
    per_layer = kv_width(spec) * DTYPE_BYTES[spec.kv_dtype]
    total = 0.0
    for kind in spec.layer_types:
        kept = min(tokens, spec.sliding_window) if kind == "sliding" and spec.sliding_window else tokens
        total += per_layer * kept
    return total


def attention_flops(spec: ModelSpec, layer: int, q_tokens: int, kv_tokens: int, *, causal: bool) -> float:
    """Score and value FLOPs of one layer's attention for ``q_tokens`` queries over ``kv_tokens`` keys."""
    if spec.layer_types[layer] == "sliding" and spec.sliding_window:
        kv_tokens = min(kv_tokens, spec.sliding_window)
    if spec.mla is not None:
        per_pair = spec.num_attention_heads * (spec.head_dim + spec.mla.v_head_dim)
    else:
        per_pair = spec.num_attention_heads * 2 * spec.head_dim
    pairs: float = q_tokens * kv_tokens
    if causal and q_tokens == kv_tokens:
        pairs = q_tokens * (kv_tokens + 1) / 2
    return 2.0 * per_pair * pairs


def flops_per_token(spec: ModelSpec, context: int = 0) -> float:
    """Forward FLOPs for one new token attending to ``context`` cached tokens: 2 x active + attention."""
    attention = sum(attention_flops(spec, layer, 1, context + 1, causal=False) for layer in range(spec.num_layers))
    return 2.0 * params_active(spec) + attention


def describe(spec: ModelSpec) -> dict[str, object]:
    """A model's architecture and derived sizes as plain data (what ``show-model`` and ``describe_model`` show)."""
    moe = spec.moe
    return {
        "name": spec.name,
        "architecture": spec.architecture,
        "params_total": params_total(spec),
        "params_active": params_active(spec),
        "weight_bytes": weight_bytes(spec),
        "layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "attention_heads": spec.num_attention_heads,
        "kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size,
        "attention": "mla" if spec.mla else ("mha" if spec.num_kv_heads == spec.num_attention_heads else "gqa"),
        "sliding_window": spec.sliding_window,
        "sliding_layers": spec.layer_types.count("sliding"),
        "experts": moe.num_experts if moe else 0,
        "experts_per_token": moe.experts_per_token if moe else 0,
        "shared_experts": moe.num_shared_experts if moe else 0,
        "dense_layers": moe.first_dense_layers if moe else spec.num_layers,
        "kv_bytes_per_token": kv_bytes_per_token(spec),
        "flops_per_token": flops_per_token(spec),
        "weight_dtype": spec.weight_dtype,
        "expert_dtype": spec.expert_dtype,
        "weight_formats": dict(spec.weight_formats),
        "kv_dtype": spec.kv_dtype,
        "warnings": list(spec.warnings),
    }


def summary(spec: ModelSpec) -> dict[str, object]:
    """One catalog row: name, architecture, total and active parameters, MoE or not, layers."""
    return {
        "name": spec.name,
        "architecture": spec.architecture,
        "params_total": params_total(spec),
        "params_active": params_active(spec),
        "moe": spec.is_moe,
        "layers": spec.num_layers,
    }
