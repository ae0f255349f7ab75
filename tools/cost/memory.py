"""Memory per GPU: weight shard, KV cache, activations and workspace, for the worst-loaded GPU."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from shardplan.bisection import largest_passing
from shardplan.contracts.arithmetic.feasibility import split_layers
from shardplan.contracts.arithmetic.model_math import attention_params, dense_mlp_params, expert_params, kv_width
from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.hardware import GPU
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.reports import MemoryReport
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.drafters import drafter_for, drafter_layout
from shardplan.tools.catalogs.eagle_heads import AUX_LAYERS
from shardplan.tools.cost.calibration import calibration

__all__ = [
    "weight_bytes_per_gpu",
    "kv_bytes_per_sequence_per_gpu",
    "shared_prefix_kv",
    "memory_report",
    "memory_reports",
    "peak_memory",
    "pool_peaks",
    "largest_fitting",
    "drafter_bytes_per_gpu",
]

GB = 1e9


def _attention_bytes_per_rank(spec: ModelSpec, tp: int) -> float:
    wb = DTYPE_BYTES[spec.weight_format("attention")]
    if spec.mla is not None:
        m, h = spec.mla, spec.hidden_size
        replicated = (h * m.q_lora_rank if m.q_lora_rank else 0) + h * (m.kv_lora_rank + m.qk_rope_head_dim)
        return (replicated + (attention_params(spec) - replicated) / tp) * wb
    kv_share = max(1, spec.num_kv_heads // tp) / spec.num_kv_heads
    kv = 2 * spec.hidden_size * spec.num_kv_heads * spec.head_dim
    return ((attention_params(spec) - kv) / tp + kv * kv_share) * wb


def _ffn_bytes_per_rank(spec: ModelSpec, layer: int, phase: PhaseStrategy) -> float:
    if not spec.is_moe_layer(layer):
        return dense_mlp_params(spec) / phase.tp * DTYPE_BYTES[spec.weight_format("dense_ffn")]
    moe = spec.moe
    assert moe is not None
    etp = max(phase.stage_gpus // phase.ep, 1)
    experts = moe.num_experts // phase.ep * expert_params(spec) / etp * DTYPE_BYTES[spec.weight_format("experts")]
    shared = moe.num_shared_experts * dense_mlp_params(spec, moe.shared_expert_intermediate_size) / phase.tp
    router = spec.hidden_size * moe.num_experts
    return (experts + shared * DTYPE_BYTES[spec.weight_format("shared_experts")]
            + router * DTYPE_BYTES[spec.weight_format("router")])


def weight_bytes_per_gpu(spec: ModelSpec, phase: PhaseStrategy) -> float:
    """Weight bytes on the most loaded GPU of a phase's layout (stage 0 holds the embedding, the last the head)."""
    table = spec.vocab_size * spec.hidden_size / phase.tp
    embedding, head = table * DTYPE_BYTES[spec.weight_dtype], table * DTYPE_BYTES[spec.weight_format("lm_head")]
    attention = _attention_bytes_per_rank(spec, phase.tp)
    moe_ffn = _ffn_bytes_per_rank(spec, spec.num_layers - 1, phase)
    dense_ffn = dense_mlp_params(spec) / phase.tp * DTYPE_BYTES[spec.weight_format("dense_ffn")]
    worst = 0.0
    stages = split_layers(spec.num_layers, phase.pp, phase.layer_split)
    for index, layers in enumerate(stages):
        moe_layers = sum(1 for layer in layers if spec.is_moe_layer(layer))
        total = len(layers) * attention + moe_layers * moe_ffn + (len(layers) - moe_layers) * dense_ffn
        if index == 0:
            total += embedding
        if index == len(stages) - 1 and (not spec.tie_word_embeddings or phase.pp > 1):
            total += head
        worst = max(worst, total)
    return worst


def kv_bytes_per_sequence_per_gpu(spec: ModelSpec, phase: PhaseStrategy, tokens: int) -> float:
    """KV-cache bytes one sequence of ``tokens`` puts on one GPU of the most loaded stage."""
    per_layer_token = kv_width(spec) * DTYPE_BYTES[spec.kv_dtype]
    if spec.mla is None:
        per_layer_token *= max(1, spec.num_kv_heads // phase.tp) / spec.num_kv_heads
    tokens_kept = math.ceil(tokens / phase.sp)
    worst = 0.0
    for layers in split_layers(spec.num_layers, phase.pp, phase.layer_split):
        total = 0.0
        for layer in layers:
            window = spec.sliding_window if spec.layer_types[layer] == "sliding" else None
            total += per_layer_token * (min(tokens_kept, window) if window else tokens_kept)
        worst = max(worst, total)
    return worst


def drafter_bytes_per_gpu(
    spec: ModelSpec, phase: PhaseStrategy, workload: Workload, tokens: int
) -> tuple[float, float]:
    """What speculative decoding's drafter puts on a GPU of the target's last stage: its weight bytes, and the
    KV-cache bytes of one sequence of ``tokens`` tokens (0, 0 without speculation). The pool's account adds them to
    its most loaded stage, which overstates a pipelined layout whose last stage is not the fullest.

    MTP layers hold their blocks (sharded as the target's layers are: attention over the TP group, experts over the
    expert ranks), the replicated fusing projection and a KV cache per block, and read the target's embedding and LM
    head. An EAGLE-3 head holds its layer (its QKV projection ``2 h`` wide), its replicated ``fc`` (``3 h_target x
    h``), its own LM head over the draft vocabulary (vocabulary-parallel, as vLLM's and SGLang's ``ParallelLMHead``)
    and its ``d2t`` table (one int64 per draft token, vLLM's ``draft_id_to_target_id``), and reads the target's
    embedding. A draft model holds all its weights and its whole KV cache on the target's TP group.

    Raises:
        InputError: the speculation's drafter does not exist for ``spec``.
    """
    if workload.speculation is None:
        return 0.0, 0.0
    drafter = drafter_for(spec, workload.speculation)
    net, layout = drafter.network, drafter_layout(phase, drafter)
    kv = kv_bytes_per_sequence_per_gpu(net, layout, tokens)
    if drafter.speculation.method == "draft":
        return weight_bytes_per_gpu(net, layout), kv
    wb = DTYPE_BYTES[net.weight_dtype]
    block = _attention_bytes_per_rank(net, layout.tp) + _ffn_bytes_per_rank(net, 0, layout)
    fuse = drafter.fuse_width * net.hidden_size * wb
    weights = drafter.held_layers * (block + fuse)
    if drafter.head is not None:
        weights += _eagle_head_extra_bytes(net, layout.tp, drafter.qkv_input)
    return weights, drafter.held_layers * kv


def _eagle_head_extra_bytes(net: ModelSpec, tp: int, qkv_input: int) -> float:
    """What an EAGLE-3 head holds beyond a block of its width: the QKV columns that read the embedding (Q split over
    the TP group, K/V as the target's are), its own LM head over the draft vocabulary and its int64 ``d2t`` table."""
    wb = DTYPE_BYTES[net.weight_dtype]
    extra = 0.0
    if net.mla is None:
        kv_share = max(1, net.num_kv_heads // tp) / net.num_kv_heads
        q, kv = net.num_attention_heads * net.head_dim, 2 * net.num_kv_heads * net.head_dim
        extra = (qkv_input - net.hidden_size) * (q / tp + kv * kv_share) * wb
    return extra + net.vocab_size * net.hidden_size / tp * wb + net.vocab_size * 8.0


def shared_prefix_kv(spec: ModelSpec, phase: PhaseStrategy, workload: Workload, kv_tokens: int) -> tuple[float, float]:
    """KV-cache bytes per GPU of one sequence of ``kv_tokens`` behind the workload's cached prefix, and of that
    prefix, which the engine's prefix cache holds once for every sequence sharing it (their block tables point at
    the same blocks) rather than once per sequence: ``(kv(kv_tokens - prefix), kv(prefix))``; ``(kv(kv_tokens),
    0)`` without prefix caching. One shared prefix per cache (an attention group's, a worker's) is assumed: the
    request's ``prefix_hit`` says how much of each prompt is cached, not how many distinct prefixes there are.
    """
    prefix = workload.isl - workload.prefill_tokens
    if prefix <= 0:
        return kv_bytes_per_sequence_per_gpu(spec, phase, kv_tokens), 0.0
    own = kv_bytes_per_sequence_per_gpu(spec, phase, kv_tokens - prefix)
    return own, kv_bytes_per_sequence_per_gpu(spec, phase, prefix)


def _activation_bytes(spec: ModelSpec, phase: PhaseStrategy, workload: Workload, prefill: bool) -> float:
    """Live activations of the largest step: per microbatch, the tokens one step carries.

    Continuous batching caps a step at ``max_batched_tokens`` tokens per scheduler, so prefill activations
    stop growing with the concurrency there; static batching prefills the whole batch at once. Each attention
    data-parallel rank is a scheduler with a whole budget of its own (vLLM's and SGLang's ``max_num_batched_tokens``
    count per rank), so a rank's step carries up to the whole budget, not its share of one.
    """
    ab = DTYPE_BYTES[spec.activation_dtype]
    groups = phase.dp * phase.adp * phase.mb
    seqs = math.ceil(workload.phase_batch("prefill" if prefill else "decode") / groups)
    # A decode step carries one token per sequence, or its K + 1 verified positions under speculative decoding;
    # behind a cached prefix a prompt's prefill carries only its uncached tokens.
    verify = workload.speculation.verify_tokens if workload.speculation else 1
    tokens = seqs * (math.ceil(workload.prefill_tokens / phase.sp) if prefill else verify)
    if workload.batching == "continuous":
        tokens = min(tokens, max(1, math.ceil(workload.max_batched_tokens / phase.mb)))
    width = (
        spec.intermediate_size
        if spec.moe is None
        else max(
            spec.intermediate_size if spec.moe.first_dense_layers else 0,
            spec.moe.expert_intermediate_size * spec.moe.experts_per_token,
        )
    )
    live = tokens * (6 * spec.hidden_size + 3 * width / phase.tp) * ab
    if workload.speculation is not None and workload.speculation.method == "eagle":
        # An EAGLE-3 head's fc reads three of the target's hidden states per token, which the target keeps and
        # concatenates for it (vLLM's aux_hidden_states), prompt tokens included: 3 h more per token a step carries.
        live += tokens * AUX_LAYERS * spec.hidden_size * ab
    logits = min(seqs, tokens) * spec.vocab_size / phase.tp * 4.0
    return live * min(phase.mb, phase.pp) + logits


def _activations(
    spec: ModelSpec, phase: PhaseStrategy, workload: Workload, pool: str, prefill_phase: PhaseStrategy | None
) -> float:
    """Activation bytes of a pool; with ``prefill_phase`` the GPUs also run prefill."""
    activations = _activation_bytes(spec, phase, workload, prefill=pool == "prefill")
    if prefill_phase is not None:
        activations = max(activations, _activation_bytes(spec, prefill_phase, workload, prefill=True))
    return activations


def _pool_account(
    spec: ModelSpec,
    gpu: GPU,
    phase: PhaseStrategy,
    workload: Workload,
    pool: Literal["shared", "prefill", "decode"],
    kv_tokens: int,
    prefill_phase: PhaseStrategy | None,
) -> tuple[float, float, Callable[[Workload], tuple[float, float]]]:
    """A pool's fixed bytes per GPU (weights, workspace) and its account of a sized workload (KV, activations)."""
    drafter_weights, drafter_kv = drafter_bytes_per_gpu(spec, phase, workload, kv_tokens)
    weights = weight_bytes_per_gpu(spec, phase) + drafter_weights
    kv_seq, kv_prefix = shared_prefix_kv(spec, phase, workload, kv_tokens)
    kv_seq += drafter_kv
    # Inside the engine's share the runtime, NCCL buffers and CUDA graphs take a fixed amount; the engine leaves
    # (1 - gpu_memory_utilization) of something alone. vLLM and SGLang take their share of the whole GPU;
    # TensorRT-LLM takes its share (kv_cache_free_gpu_memory_fraction, 0.9 by default, and what `shardplan export
    # --engine trtllm` leaves it at) of the memory still free once the weights and runtime are in place, so it
    # leaves less aside and holds more KV cache. NIM's TensorRT-LLM profile of Llama-3.3-70B FP8 on 2 x H100 keeps
    # about 85 sequences of 5,500 tokens running (throughput x ITL of its saturated rows); the share of the whole
    # GPU would hold 74, the share of the free memory 82.
    fixed = calibration().workspace.fixed_gb * GB
    pool_bytes = gpu.memory_gb * GB
    if workload.engine == "trtllm":
        pool_bytes = max(pool_bytes - weights - fixed, 0.0)
    workspace = fixed + (1 - workload.gpu_memory_utilization) * pool_bytes

    def account(sized: Workload) -> tuple[float, float]:
        held = math.ceil(sized.phase_batch(pool) / (phase.dp * phase.adp))
        kv = held * kv_seq + (kv_prefix if held else 0.0)
        return kv, _activations(spec, phase, sized, pool, prefill_phase)

    return weights, workspace, account


def memory_report(
    spec: ModelSpec,
    gpu: GPU,
    phase: PhaseStrategy,
    workload: Workload,
    pool: Literal["shared", "prefill", "decode"],
    kv_tokens: int,
    prefill_phase: PhaseStrategy | None = None,
) -> MemoryReport:
    """Memory of one GPU pool laid out as ``phase`` holding ``kv_tokens`` of KV per sequence.

    ``prefill_phase`` adds the prefill activations when prefill runs on the same GPUs. ``max_batch`` is the
    largest batch for which this same account still fits, so it never disagrees with ``fits``.
    """
    capacity = gpu.memory_gb * GB
    weights, workspace, account = _pool_account(spec, gpu, phase, workload, pool, kv_tokens, prefill_phase)

    def fits_at(batch: int) -> bool:
        # A prefill pool's load is the prompts of its step; elsewhere the batch in flight.
        prefill = batch if pool == "prefill" else workload.prefill_batch and min(workload.prefill_batch, batch)
        return weights + workspace + sum(account(workload.at_concurrency(batch, prefill))) <= capacity

    kv, activations = account(workload)
    total = weights + kv + activations + workspace
    return MemoryReport(
        pool=pool,
        weights_gb=weights / GB,
        kv_cache_gb=kv / GB,
        activations_gb=activations / GB,
        workspace_gb=workspace / GB,
        total_gb=total / GB,
        capacity_gb=gpu.memory_gb,
        fits=total <= capacity,
        max_batch=largest_fitting(fits_at),
    )


def largest_fitting(fits_at: Callable[[int], bool], limit: int = 1 << 20) -> int:
    """The largest n in [1, limit] with ``fits_at(n)``, assuming fitting is monotone in n; 0 when none does.

    >>> largest_fitting(lambda n: n <= 37)
    37
    """
    if not fits_at(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits_at(high):
        low, high = high, high * 2
    return largest_passing(low, min(high, limit + 1), fits_at)


def _pools(
    strategy: Strategy, workload: Workload
) -> list[tuple[PhaseStrategy, Literal["shared", "prefill", "decode"], int, PhaseStrategy | None]]:
    """Each GPU pool of ``strategy``: its layout, its name, the KV tokens a sequence keeps there, and the prefill
    layout whose activations it also holds when both phases share it."""
    full = workload.isl + workload.osl
    if strategy.disaggregated:
        return [(strategy.prefill, "prefill", workload.isl, None), (strategy.decode, "decode", full, None)]
    return [(strategy.decode, "shared", full, strategy.prefill)]


def memory_reports(
    spec: ModelSpec, gpu: GPU, strategy: Strategy, workload: Workload, *, decode_gpu: GPU | None = None
) -> list[MemoryReport]:
    """One report per GPU pool: shared by both phases, or prefill and decode pools when disaggregated (the decode
    pool on ``decode_gpu`` when it is another GPU type)."""
    pools = _pools(strategy, workload)
    return [memory_report(spec, decode_gpu if pool == "decode" and decode_gpu else gpu, phase, workload, pool, kv,
                          also) for phase, pool, kv, also in pools]


def pool_peaks(
    spec: ModelSpec, gpu: GPU, strategy: Strategy, workload: Workload, *, decode_gpu: GPU | None = None
) -> list[tuple[float, float, bool]]:
    """Per pool of ``strategy``, its worst GPU's memory and that GPU's capacity in GB, and whether it fits: the
    account of :func:`memory_reports` without searching each pool's largest batch (the search prices hundreds of
    deployments). The decode pool is on ``decode_gpu`` when it is another GPU type."""
    peaks = []
    for phase, pool, kv_tokens, also in _pools(strategy, workload):
        device = decode_gpu if pool == "decode" and decode_gpu else gpu
        weights, workspace, account = _pool_account(spec, device, phase, workload, pool, kv_tokens, also)
        total = weights + workspace + sum(account(workload))
        peaks.append((total / GB, device.memory_gb, total <= device.memory_gb * GB))
    return peaks


def peak_memory(
    spec: ModelSpec, gpu: GPU, strategy: Strategy, workload: Workload, *, decode_gpu: GPU | None = None
) -> tuple[float, bool]:
    """The worst GPU's memory in GB across the pools of ``strategy``, and whether every pool fits (see
    :func:`pool_peaks`)."""
    peaks = pool_peaks(spec, gpu, strategy, workload, decode_gpu=decode_gpu)
    return max(used for used, _, _ in peaks), all(fits for _, _, fits in peaks)
