"""Which measured table prices a DAG node, and at what shape: plain functions from a node to a query.

A :class:`Query` names one operation of the database (a GEMM, context or generation attention, MLA,
an MoE layer's experts, the engine's custom all-reduce, an NCCL collective) with the arguments its
table is keyed by, and the token counts it is looked up at. Nodes no table covers (norms, residual
adds, embeddings, samplers, KV writes, point-to-point sends, which the database models analytically
rather than measures) get None and stay with the roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardplan.contracts.dag import CommNode, ComputeNode, StateNode
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.tools.cost.exchange import engine_exchange

__all__ = ["Query", "node_query", "mla_module_query", "other_scaling", "POWER_LAW_ALPHA"]

# The database measures MoE layers under a power-law token-to-expert load, not a uniform one; its own
# estimator uses exponent 1.01 for DeepSeek-style models and 1.2 for the others (Qwen3-MoE, Mixtral,
# gpt-oss), which is what an expert-load imbalance looks like in the tables.
POWER_LAW_ALPHA: dict[str, float] = {"deepseek": 1.01, "default": 1.2}

_GEMM_QUANT = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4", "int8": "int8_wo"}
_MOE_QUANT = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp4": "w4a16_mxfp4"}
_KV_QUANT = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
# FP8 weights come scaled per tensor (``fp8``) or per 128x128 block (``fp8_block``, DeepGEMM-style); the
# tables measure each shape under the scaling its checkpoint ships with. DeepSeek-V3/R1 (the MLA family)
# publish block-scaled FP8 (``weight_block_size: [128, 128]`` in their config), and the tables hold their
# MoE shapes only as ``fp8_block``: asking for ``fp8`` there found nothing and left the experts, most of a
# decode step, to the roofline. Other models try per-tensor first; either falls back to the other.
_FP8_SCALINGS = ("fp8", "fp8_block")
# 4-bit experts likewise come in two block scalings: MXFP4 (gpt-oss's checkpoints; 32-element blocks, the tables'
# ``w4a16_mxfp4``) and NVFP4 (NVIDIA's FP4 checkpoints such as nvidia/DeepSeek-R1-FP4; 16-element blocks,
# ``nvfp4``). The tables hold each MoE shape under the scaling its checkpoint ships with (on b200_sxm/trtllm
# DeepSeek's shapes only as ``nvfp4``), so a lookup falls back to the other, as FP8's does, before the roofline.
_FP4_MOE_SCALINGS = ("w4a16_mxfp4", "nvfp4")
# The GEMM formats the MLA module tables are measured under (DeepSeek's own: bf16, or FP8 scaled per 128x128 block).
_MODULE_GEMM_QUANT = {"bf16": "bfloat16", "fp8": "fp8_block"}
# vLLM's block-scaled FP8 GEMM rows were timed eagerly, one GEMM per timing, outside a CUDA graph (AIConfigurator's
# collector/vllm/collect_gemm.py: ``use_cuda_graph=gemm_type != "fp8_block"``, since its PR #999), so below the host's
# dispatch time they record that dispatch, not the kernel: in h200_sxm/vllm 0.24.0 every shape from 768x7168 to
# 7168x16384 takes 55-61 us at 1 to 17 tokens (FlashInfer's kernel) and 80-89 us at 32 to 128 (DeepGEMM's), where
# SGLang's and TensorRT-LLM's graph-timed rows of the same shapes take 9-19 us, flat. A vLLM step runs its GEMMs
# inside CUDA graphs (decode) or queued behind longer kernels, so that dispatch is not on the step's path. The same
# table's per-tensor FP8 rows are graph-timed and read the same FP8 weights (block scaling adds one scale per 128x128
# block, 1/16384 of them); they price vLLM's block-scaled GEMMs. An H200 measured per-tensor FP8 GEMMs at
# DeepSeek-V3's shapes flat in tokens up to 128 (benchmarks/data/gpu/kernels_h200.json: 2112x7168 9.4-10.8 us).
_EAGER_BLOCK_FP8_GEMM_ENGINES = frozenset({"vllm"})
_MEASURED_NODE_GPUS = 8  # GPUs per node of the systems the database measured (HGX / DGX)
_NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
             "all_to_all": "alltoall"}


@dataclass(frozen=True)
class Query:
    """One table lookup: the operation, the arguments its table is keyed by, and where to read it.

    ``tokens`` is the row count of a GEMM, MoE or collective; attention reads ``batch`` sequences of
    ``seq`` tokens (prefill: the new tokens, with ``prefix`` cached ones before them; decode: the context).
    """

    op: str
    args: tuple[int | str, ...]
    context: bool
    batch: int
    seq: int = 1
    prefix: int = 0


def _message_shape(message_bytes: float, element_bytes: int = 2) -> tuple[int, int]:
    """(tokens, hidden) whose product is the message's elements: the tables are keyed by both, but
    a collective's time depends only on their product."""
    elements = max(1, int(round(message_bytes / element_bytes)))
    hidden = 1
    while hidden < 8192 and elements % (hidden * 2) == 0:
        hidden *= 2
    return elements // hidden, hidden


def _fp8_quant(quant: str, model: ModelSpec) -> str:
    return "fp8_block" if quant == "fp8" and model.mla is not None else quant


def _gemm_fp8_quant(quant: str, model: ModelSpec, engine: str | None) -> str:
    """The FP8 scaling a GEMM is looked up under: the checkpoint's, except where ``engine``'s block-scaled rows
    timed the host rather than the kernel (the per-tensor rows then; see ``_EAGER_BLOCK_FP8_GEMM_ENGINES``)."""
    quant = _fp8_quant(quant, model)
    return "fp8" if quant == "fp8_block" and engine in _EAGER_BLOCK_FP8_GEMM_ENGINES else quant


def other_scaling(query: Query) -> Query | None:
    """The same GEMM or MoE lookup under the other weight scaling of its format (FP8 per tensor or per block; a
    MoE layer's 4-bit experts MXFP4 or NVFP4), for shapes the tables measured only under that one; None for every
    other query."""
    if query.op not in ("gemm", "moe"):
        return None
    at = 2 if query.op == "gemm" else 6
    quant = query.args[at]
    pairs = (_FP8_SCALINGS, _FP4_MOE_SCALINGS) if query.op == "moe" else (_FP8_SCALINGS,)
    pair = next((p for p in pairs if quant in p), None)
    if pair is None:
        return None
    other = pair[1 - pair.index(str(quant))]
    return Query(query.op, (*query.args[:at], other, *query.args[at + 1 :]), query.context, query.batch,
                 query.seq, query.prefix)


def _attention_query(node: ComputeNode, model: ModelSpec) -> Query | None:
    shape = node.shape
    heads, batch = shape.get("heads", 0), shape.get("batch", 1)
    q_len, kv_len = shape.get("q_len", 1), shape.get("kv_len", 1)
    if heads < 1:
        return None
    kv_quant = _KV_QUANT.get(model.kv_dtype)
    if kv_quant is None:
        return None
    # A verify step of speculative decoding attends with each sequence's K + 1 positions over one cached KV. The
    # decode kernels fold those positions into the query heads and read the KV once: FlashMLA is scheduled for
    # ``s_q * h_q // h_kv`` query rows per KV head (its README's get_mla_metadata), and TensorRT-LLM runs MTP's
    # K + 1 tokens through the same FlashMLA generation kernel on Hopper (its DeepSeek-R1 MTP blog). So a verify
    # attention is the measured generation kernel with (K + 1) times the query heads, where the tables hold that
    # head count; the roofline otherwise.
    folded = heads * q_len if node.phase == "decode" else heads
    # The prompt's attention in FP8 is TensorRT-LLM's FP8 context FMHA, which the tables key apart
    # (``fmha_quant_mode``); the decode kernels are keyed by the KV format alone, the kernel the engine picks for it.
    fmha = "fp8" if node.dtype == "fp8" else "bfloat16"
    if model.mla is not None:
        if node.phase == "prefill":
            return Query("context_mla", (heads, kv_quant, fmha), True, batch, q_len, max(0, kv_len - q_len))
        return Query("generation_mla", (folded, kv_quant), False, batch, kv_len)
    tp = max(1, model.num_attention_heads // heads)
    kv_heads = max(1, model.num_kv_heads // tp)
    sliding = node.layer is not None and model.layer_types[node.layer] == "sliding"
    window = model.sliding_window or 0 if sliding else 0
    if node.phase == "prefill":
        prefix = max(0, kv_len - q_len)
        args = (heads, kv_heads, kv_quant, fmha, model.head_dim, window)
        return Query("context_attention", args, True, batch, q_len, prefix)
    return Query("generation_attention", (folded, kv_heads, kv_quant, model.head_dim, window), False, batch, kv_len)


def mla_module_query(attention: ComputeNode, model: ModelSpec) -> Query | None:
    """The measured module of an MLA layer's attention block at the ``attention`` node's batch, heads and tokens, or
    None (not an MLA attention node, or a weight or KV format the module tables do not key).

    The tables time vLLM's whole ``DeepseekV2MLAAttention`` forward (AIConfigurator's collector; its
    ``mla_generation_module_perf`` rows are keyed by KV format, GEMM format, local heads, batch and context, with one
    query position per sequence; its ``mla_context_module_perf`` rows by the same formats, heads, batch and prompt
    length, with no cached prefix). So the query is always at one position in decode and at no prefix in prefill: a
    verify step or a prefill behind a cached prefix composes it with its own increments
    (:mod:`shardplan.tools.cost.measured.mla_block`).
    """
    if model.mla is None or attention.kind != "attention":
        return None
    kv_quant, gemm_quant = _KV_QUANT.get(model.kv_dtype), _MODULE_GEMM_QUANT.get(model.weight_format("attention"))
    heads, batch = attention.shape.get("heads", 0), attention.shape.get("batch", 1)
    if kv_quant is None or gemm_quant is None or heads < 1:
        return None
    args = (heads, kv_quant, gemm_quant, model.num_attention_heads)
    if attention.phase == "prefill":
        return Query("context_mla_module", args, True, batch, attention.shape.get("q_len", 1))
    return Query("generation_mla_module", args, False, batch, attention.shape.get("kv_len", 1))


def _expert_query(node: ComputeNode, model: ModelSpec, phase: PhaseStrategy) -> Query | None:
    moe = model.moe
    k = node.shape.get("k", 0)
    if moe is None or k < 1:
        return None
    quant = _MOE_QUANT.get(node.dtype)
    if quant is None:
        return None
    quant = _fp8_quant(quant, model)
    etp = max(1, moe.expert_intermediate_size // k)
    ep = phase.ep
    # The node holds one expert rank's (token, expert) pairs; the table is keyed by the tokens entering
    # the layer, which top-k routing spreads over the ep ranks.
    tokens = max(1, round(node.shape.get("m", 1) * ep / moe.experts_per_token))
    family = "deepseek" if model.mla is not None else "default"
    distribution = f"power_law_{POWER_LAW_ALPHA[family]}"
    args = (model.hidden_size, moe.expert_intermediate_size, moe.experts_per_token, moe.num_experts, etp, ep, quant,
            distribution)
    return Query("moe", args, node.phase == "prefill", tokens)


def _compute_query(node: ComputeNode, model: ModelSpec, phase: PhaseStrategy, engine: str | None) -> Query | None:
    if node.kind == "attention":
        return _attention_query(node, model)
    if node.kind == "expert" and node.op == "routed_experts":
        return _expert_query(node, model, phase)
    if node.kind in ("linear", "router", "expert"):
        n, k, m = node.shape.get("n", 0), node.shape.get("k", 0), node.shape.get("m", 0)
        quant = _GEMM_QUANT.get(node.dtype)
        if min(n, k, m) < 1 or quant is None:
            return None
        return Query("gemm", (n, k, _gemm_fp8_quant(quant, model, engine)), node.phase == "prefill", m)
    return None


def _comm_query(node: CommNode, model: ModelSpec, phase: PhaseStrategy, gpus_per_node: int) -> Query | None:
    ranks = sorted(set(node.ranks))
    n = len(ranks)
    op = _NCCL_OPS.get(node.kind)
    if n < 2 or op is None or node.message_bytes <= 0:
        return None
    exchange = engine_exchange(node, model, phase, gpus_per_node)
    if exchange is not None:
        if exchange.message_bytes <= 0:
            return Query("none", (), node.phase == "prefill", 0)
        node, op = exchange, _NCCL_OPS[exchange.kind]
    nodes = len({r // gpus_per_node for r in ranks})
    tokens, hidden = _message_shape(node.message_bytes)
    # Inside one node the engines all-reduce with their own one-shot / two-shot kernels (NCCL only past
    # their size limit, which the engine's measured curve already contains); everything else is NCCL.
    if node.kind == "all_reduce" and nodes == 1:
        return Query("custom_allreduce", (hidden, n), node.phase == "prefill", tokens)
    # The NCCL curves of up to 8 ranks were measured inside one node, those of more ranks on whole
    # 8-GPU nodes: a group of a few GPUs on each of several nodes matches neither (roofline).
    if nodes > 1 and (n <= _MEASURED_NODE_GPUS or n != nodes * _MEASURED_NODE_GPUS):
        return None
    return Query("nccl", (op, hidden, n), node.phase == "prefill", tokens)


def node_query(
    node: ComputeNode | CommNode | StateNode,
    model: ModelSpec,
    phase: PhaseStrategy,
    gpus_per_node: int,
    engine: str | None = None,
) -> Query | None:
    """The measured-table lookup that prices ``node`` on ``engine``'s tables, or None when the roofline does."""
    if isinstance(node, ComputeNode):
        return _compute_query(node, model, phase, engine)
    if isinstance(node, CommNode):
        return _comm_query(node, model, phase, gpus_per_node)
    return None
