"""An MLA layer's decode attention block priced from the engine's measured module, shared among the DAG's nodes.

The DAG splits an MLA layer's attention into four priced nodes: the QKV projection, the KV-cache write, the attention
kernel and the output projection. A DeepSeek attention forward runs more kernels than those four: the latent norms,
rotary embedding, the absorbed per-head BMMs (W_UK, W_UV) and the activations' quantisation. AIConfigurator's
collector times the whole ``DeepseekV2MLAAttention`` forward in a CUDA graph (its ``mla_generation_module_perf``
tables: vLLM and TensorRT-LLM, H100 to GB300), and on h200_sxm/vllm 0.24.0 the module takes 2 to 3 times what the
four nodes add up to (113 against 39 us a layer for one sequence of DeepSeek-V3 at 16 heads). Where the engine's
tables hold the module, the block costs the module.

How the nodes share it: the node prices stay where they are for the projections and the KV write, and the attention
node carries the block's total less theirs. The kernels the four nodes leave out all sit between the projections
around attention, and the step pricer keeps a step's attention apart from its token-proportional work
(:mod:`shardplan.tools.serving.steps`), so the module's extra time goes with the decode attention and the linear
work of a prompt chunk is not charged for a decode module. Every node keeps a non-negative time and the four add up
to the block's total; where the total falls below the other three nodes' own prices, every node is scaled to it
instead. The DAG (nodes, edges, validators) is unchanged.

A prefill behind a cached prefix is not in the tables either (they time prompts without one). Its block is the module
at the uncached tokens alone, plus what the cached keys add to the attention by the node pricing, plus the work vLLM
does on the cached latents before attending to them: for each chunk of cached context it gathers the latents and
up-projects them through ``kv_b_proj`` into per-head keys and values (``MLACommonImpl._compute_prefill_context``,
vllm/v1/attention/backends/mla/common.py), a GEMM over every cached token of the batch that a prompt without a prefix
never runs. It is priced as the block's own projections are (the GEMM tables at its shape, in the weight format).

A verify step (K + 1 query positions per sequence) is not in the tables, which time one position. Its block is the
module at the plain step's batch and context plus what the K + 1 positions add by this model's own node pricing:
the attention kernel with the positions folded into its query heads over the plain one, and the projections and
KV write at B (K + 1) tokens over B (never negative: a verify block is never below the plain block). Pricing the
plain step from the module and the verify step without it would flatter speculation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.dag import CommNode, ComputeNode, StateNode
from shardplan.contracts.model import ModelSpec
from shardplan.tools.builder import ops
from shardplan.tools.cost.measured.queries import Query, mla_module_query

__all__ = ["mla_block_seconds", "BLOCK_NODES"]

AnyNode = ComputeNode | CommNode | StateNode
BLOCK_NODES = ("qkv_proj", "kv_write", "attention", "o_proj")
"""The DAG's nodes of one MLA attention block (:func:`shardplan.tools.builder.blocks.attention_block`)."""
_PLAIN = "#plain"


def _role(node: AnyNode) -> str | None:
    """Which of the block's nodes ``node`` is, read from its fields (kind and op; ids and names are free-form, a DAG
    read from a file may rename them)."""
    if isinstance(node, StateNode):
        return "kv_write" if node.kind == "kv_write" else None
    if isinstance(node, ComputeNode):
        return "attention" if node.kind == "attention" else node.op if node.op in ("qkv_proj", "o_proj") else None
    return None


def _blocks(nodes: list[AnyNode]) -> list[dict[str, AnyNode]]:
    """The attention blocks of the layers: one per phase, microbatch, layer and unit (the node's shard), with each of
    :data:`BLOCK_NODES` exactly once. A drafter's passes inside a target's step have no layer and are left out (the
    drafter's own network prices them)."""
    found: dict[tuple[str, int, int, int | None], dict[str, list[AnyNode]]] = defaultdict(lambda: defaultdict(list))
    for node in nodes:
        role = _role(node)
        if role is not None and node.layer is not None:
            found[(node.phase, node.microbatch, node.layer, node.shard)][role].append(node)
    return [{role: members[role][0] for role in BLOCK_NODES} for members in found.values()
            if all(len(members[role]) == 1 for role in BLOCK_NODES)]


def _plain(node: AnyNode, q_len: int, activation_bytes: float) -> AnyNode:
    """The node as a plain decode step has it: one query position per sequence (B tokens, not B (K + 1)). What grows
    with the tokens shrinks by ``q_len``: a projection's FLOPs, its input (``k`` wide) and output; the attention's
    FLOPs and queries (read and written); the KV write. Weights and the cached KV stay."""
    if isinstance(node, StateNode):
        return node.model_copy(update={"id": node.id + _PLAIN, "tokens": 1, "bytes": node.bytes / q_len})
    assert isinstance(node, ComputeNode)
    shape, share = dict(node.shape), 1.0 / q_len
    if node.kind == "attention":
        shape["q_len"] = 1
        queries = node.bytes_written
        read = node.bytes_read - queries * (1 - share)
    else:
        tokens = shape.get("m", 1)
        shape["m"] = max(1, tokens // q_len)
        read = node.bytes_read - (tokens - shape["m"]) * shape.get("k", 0) * activation_bytes
    return node.model_copy(update={"id": node.id + _PLAIN, "shape": shape, "flops": node.flops * share,
                                   "bytes_read": max(0.0, read), "bytes_written": node.bytes_written * share})


def _unprefixed(attention: ComputeNode, model: ModelSpec) -> ComputeNode:
    """A prefill attention node behind a cached prefix as the same prompt's uncached tokens alone would have it: no
    prefix keys (the module tables measured none)."""
    shape = attention.shape
    heads, q_len = max(1, shape.get("heads", 1)), shape.get("q_len", 1)
    work = ops.attention(model, attention.layer or 0, shape.get("batch", 1), q_len, q_len,
                         max(1, model.num_attention_heads // heads), prefill=True)
    return attention.model_copy(update={"id": attention.id + _PLAIN, "shape": work.shape, "flops": work.flops,
                                        "bytes_read": work.bytes_read, "bytes_written": work.bytes_written})


def _cached_up_projection(attention: ComputeNode, projection: AnyNode, model: ModelSpec) -> ComputeNode | None:
    """The ``kv_b_proj`` GEMM vLLM runs over a prefill's cached prefix (the module docstring), on one rank: the cached
    tokens of the batch times the latent (``kv_lora_rank``) into the rank's heads' key and value widths; a node like
    the block's QKV projection (``projection``: its phase, ranks, format). None without a cached prefix."""
    shape, mla = attention.shape, model.mla
    cached = shape.get("batch", 1) * (shape.get("kv_len", 1) - shape.get("q_len", 1))
    if mla is None or cached < 1 or not isinstance(projection, ComputeNode):
        return None
    width = max(1, shape.get("heads", 1)) * (mla.qk_nope_head_dim + mla.v_head_dim)
    work = ops.gemm(cached, width, mla.kv_lora_rank, DTYPE_BYTES[projection.dtype], DTYPE_BYTES[model.activation_dtype])
    return projection.model_copy(update={"id": attention.id + "#cached_kv_b_proj", "op": "kv_b_proj",
                                         "shape": work.shape, "flops": work.flops, "bytes_read": work.bytes_read,
                                         "bytes_written": work.bytes_written})


def _share(block: Sequence[AnyNode], prices: Mapping[str, float], total: float, attention_id: str) -> dict[str, float]:
    """``total`` seconds over the block: the attention node carries what the others' own prices leave, or, where
    that would be negative, every node is scaled to the total."""
    others = sum(prices[n.id] for n in block if n.id != attention_id)
    if total >= others:
        return {attention_id: total - others}
    own = sum(prices[n.id] for n in block)
    return {n.id: prices[n.id] * total / own for n in block} if own > 0 else {}


def mla_block_seconds(
    nodes: Iterable[AnyNode],
    model: ModelSpec,
    price: Callable[[list[AnyNode]], Mapping[str, float]],
    module: Callable[[list[Query]], Mapping[Query, float | None]],
) -> dict[str, float]:
    """Seconds of the nodes of every MLA attention block whose module the tables hold, by node id.

    ``price`` gives nodes' own prices (the tables' or the roofline's, as the pricer has them); ``module`` looks module
    queries up. Blocks of other models or without a module row are left out of the answer (their nodes keep their
    own prices).
    """
    if model.mla is None:
        return {}
    listed = list(nodes)
    wide = DTYPE_BYTES[model.activation_dtype]
    blocks: list[tuple[list[AnyNode], list[AnyNode], list[AnyNode], Query]] = []
    for members in _blocks(listed):
        attention = members["attention"]
        query = mla_module_query(attention, model) if isinstance(attention, ComputeNode) else None
        if query is None or not isinstance(attention, ComputeNode):
            continue
        found = [members[role] for role in BLOCK_NODES]
        q_len, kv_len = max(1, attention.shape.get("q_len", 1)), attention.shape.get("kv_len", 1)
        plain: list[AnyNode] = found
        extra: list[AnyNode] = []
        if attention.phase == "prefill" and kv_len > q_len:
            plain = [_unprefixed(attention, model) if n is attention else n for n in found]
            extra = [n for n in (_cached_up_projection(attention, members["qkv_proj"], model),) if n is not None]
        elif attention.phase == "decode" and q_len > 1:
            plain = [_plain(n, q_len, wide) for n in found]
        blocks.append((found, plain, extra, query))
    if not blocks:
        return {}
    modules = module([query for *_, query in blocks])
    prices = price(list({n.id: n for block, plain, extra, _ in blocks for n in (*block, *plain, *extra)}.values()))
    out: dict[str, float] = {}
    for block, plain, extra, query in blocks:
        seconds = modules.get(query)
        if seconds is None:
            continue
        known = {n.id: prices[n.id] for n in (*block, *plain)}
        added = max(0.0, sum(known[n.id] for n in block) - sum(known[n.id] for n in plain))
        added += sum(prices[n.id] for n in extra)
        out.update(_share(block, known, seconds + added, block[BLOCK_NODES.index("attention")].id))
    return out
