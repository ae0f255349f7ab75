"""Per-rank problem sizes of each operator: shapes, FLOPs, bytes. Plain functions, no graph.

All figures are for one rank of the operator's group and ``tokens`` tokens that rank processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardplan.contracts.arithmetic.model_math import attention_flops, expert_params
from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.model import ModelSpec

__all__ = ["Work", "gemm", "memory_op", "qkv_projection", "attention", "expert_ffn", "activated_experts"]


@dataclass(frozen=True)
class Work:
    """What an operator costs one rank."""

    flops: float
    bytes_read: float
    bytes_written: float
    shape: dict[str, int] = field(default_factory=dict)


def gemm(tokens: int, n: int, k: int, weight_bytes: float, act_bytes: float) -> Work:
    """``tokens x k`` activations times a ``k x n`` weight shard."""
    return Work(
        2.0 * tokens * n * k,
        n * k * weight_bytes + tokens * k * act_bytes,
        tokens * n * act_bytes,
        {"m": tokens, "n": n, "k": k},
    )


def memory_op(tokens: int, width: int, act_bytes: float, reads: int = 1, flops_per_element: float = 1.0) -> Work:
    """Element-wise work (norms, residual adds): ``reads`` tensors in, one out."""
    elements = tokens * width
    return Work(
        flops_per_element * elements, reads * elements * act_bytes, elements * act_bytes, {"m": tokens, "n": width}
    )


def _heads_per_rank(spec: ModelSpec, tp: int) -> tuple[int, int]:
    q_heads = spec.num_attention_heads // tp
    kv_heads = max(1, spec.num_kv_heads // tp) if spec.mla is None else 1
    return q_heads, kv_heads


def qkv_projection(spec: ModelSpec, tokens: int, tp: int, input_width: int | None = None) -> Work:
    """Q, K, V projections (column-parallel). MLA: down-projections replicated, up-projections split.

    ``input_width``: the width the projection reads when it is not the residual stream's (an EAGLE-3 head's layer
    reads the token's embedding beside the hidden state, ``2 h``); GQA layers only."""
    wb, ab = DTYPE_BYTES[spec.weight_format("attention")], DTYPE_BYTES[spec.activation_dtype]
    h = spec.hidden_size
    if spec.mla is not None:
        m = spec.mla
        heads = spec.num_attention_heads // tp
        q_in = m.q_lora_rank or h
        replicated = (h * m.q_lora_rank if m.q_lora_rank else 0) + h * (m.kv_lora_rank + m.qk_rope_head_dim)
        split = q_in * heads * spec.head_dim + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
        params = replicated + split
        n = heads * (spec.head_dim + m.v_head_dim)
        return Work(
            2.0 * tokens * params, params * wb + tokens * h * ab, tokens * n * ab, {"m": tokens, "n": n, "k": h}
        )
    q_heads, kv_heads = _heads_per_rank(spec, tp)
    n = (q_heads + 2 * kv_heads) * spec.head_dim
    return gemm(tokens, n, input_width or h, wb, ab)


def attention(
    spec: ModelSpec, layer: int, sequences: int, q_len: int, kv_len: int, tp: int, *, prefill: bool, cached: int = 0
) -> Work:
    """Attention of ``sequences`` sequences, ``q_len`` queries each over ``kv_len`` keys, on one TP rank.

    Prefill is causal over the prompt (work grows with the square of its length); decode reads the
    cached K/V of ``kv_len`` tokens (bound by KV bytes). MLA decodes in the latent space. A prefill behind
    ``cached`` prefix tokens (the prefix cache held them) computes only the rest of the prompt: its queries
    attend causally among themselves and to every cached key, as FlashAttention's varlen prefill with a KV
    cache does (the queries sit at the end of the keys), so the whole prompt's causal work less the prefix's.
    """
    ab, kb = DTYPE_BYTES[spec.activation_dtype], DTYPE_BYTES[spec.kv_dtype]
    q_heads, kv_heads = _heads_per_rank(spec, tp)
    window = spec.sliding_window if spec.layer_types[layer] == "sliding" else None
    seen = min(kv_len, window) if window else kv_len
    if prefill and cached and not window:
        pairs = attention_flops(spec, layer, q_len, kv_len - cached, causal=True)
        flops = (pairs + attention_flops(spec, layer, q_len, cached, causal=False)) * sequences / tp
    else:
        flops = attention_flops(spec, layer, q_len, kv_len, causal=prefill) * sequences / tp
    if spec.mla is not None:
        m = spec.mla
        cached_bytes = (m.kv_lora_rank + m.qk_rope_head_dim) * kb
        if not prefill:
            # Weight absorption: each head scores against the latent and sums latents.
            flops = 2.0 * sequences * q_len * seen * q_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
    else:
        cached_bytes = 2 * kv_heads * spec.head_dim * kb
    q_bytes = sequences * q_len * q_heads * spec.head_dim * ab
    kv_bytes = sequences * seen * cached_bytes
    return Work(
        flops,
        q_bytes + kv_bytes,
        q_bytes,
        {"batch": sequences, "q_len": q_len, "kv_len": seen, "heads": q_heads, "head_dim": spec.head_dim},
    )


def activated_experts(local_experts: int, total_experts: int, top_k: int, tokens: int) -> float:
    """Expected experts of a rank's ``local_experts`` that at least one of ``tokens`` routes to."""
    miss = (1.0 - top_k / total_experts) ** tokens
    return local_experts * (1.0 - miss)


def expert_ffn(spec: ModelSpec, stage_tokens: int, local_experts: int, ep: int, etp: int) -> Work:
    """Routed-expert FFNs on one rank of an expert group, for ``stage_tokens`` tokens routed top-k
    across ``ep`` groups holding ``local_experts`` experts each, every expert split ``etp`` ways.

    Weights are read only for experts some token activates, which is what makes small-batch decode of
    MoE models cheaper than their size suggests.
    """
    moe = spec.moe
    assert moe is not None
    wb = DTYPE_BYTES[spec.weight_format("experts")]
    ab = DTYPE_BYTES[spec.activation_dtype]
    per_expert = expert_params(spec) / etp
    pairs = stage_tokens * moe.experts_per_token / ep  # (token, expert) pairs landing on this group
    active = activated_experts(local_experts, moe.num_experts, moe.experts_per_token, stage_tokens)
    routed = max(1, int(round(pairs)))
    return Work(
        2.0 * pairs * per_expert,
        active * per_expert * wb + routed * spec.hidden_size * ab,
        routed * spec.hidden_size * ab,
        {
            "m": routed,
            "n": spec.hidden_size,
            "k": moe.expert_intermediate_size // etp,
            "experts": max(1, round(active)),
        },
    )
