"""How serving engines move tokens to and from expert-parallel ranks inside one node.

The DAG draws an MoE layer's token exchange as a dispatch and a combine all-to-all. Inside one node
the engines' default expert-parallel path (vLLM's all-gather / reduce-scatter backend; SGLang and
TensorRT-LLM without DeepEP) does not run an all-to-all: tokens are gathered to every expert rank and
the expert outputs are summed back. With tensor-parallel attention every rank already holds every
token, so the dispatch moves nothing and the combine is one all-reduce of the layer's output. Across
nodes the exchange stays an all-to-all (DeepEP-style), as drawn.

Shared experts (DeepSeek-V3) are tensor-parallel like the attention. The DAG reduces their output with
an all-reduce of its own (purpose ``shared_expert_reduce``), but the engines add the shared experts'
partial output to the routed experts' before the layer's one reduction (vLLM's and SGLang's DeepSeek MoE
blocks all-reduce ``routed + shared`` once), so when the routed output is all-reduced over the same ranks
the shared experts' reduction moves nothing.
"""

from __future__ import annotations

from shardplan.contracts.dag import CommNode
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy

__all__ = ["engine_exchange"]


def engine_exchange(node: CommNode, model: ModelSpec, phase: PhaseStrategy, gpus_per_node: int) -> CommNode | None:
    """The collective an engine runs for an EP dispatch or combine inside a node; None when the node is
    priced as drawn. A dispatch that moves nothing comes back with ``message_bytes=0``.

    >>> from shardplan.tools.catalogs.models import load_model
    >>> from shardplan.contracts.strategy import parse_strategy
    >>> model = load_model("Qwen/Qwen3-30B-A3B")
    >>> node = CommNode(id="c", name="combine", phase="decode", ranks=[0, 1], kind="all_to_all",
    ...                 purpose="ep_combine", message_bytes=65536.0)
    >>> engine_exchange(node, model, parse_strategy("tp=2,ep=2").decode, 8).kind
    'all_reduce'
    """
    moe = model.moe
    if moe is None:
        return None
    one_node = len({r // gpus_per_node for r in node.ranks}) == 1
    if node.purpose == "shared_expert_reduce" and node.kind == "all_reduce":
        # The routed output is all-reduced over these ranks when the experts are tensor-parallel (no EP),
        # or when EP inside one node turns the combine into an all-reduce (one attention unit).
        fused = phase.adp * phase.sp == 1 and (phase.ep == 1 or one_node)
        return node.model_copy(update={"message_bytes": 0.0}) if fused else None
    if node.purpose not in ("ep_dispatch", "ep_combine") or node.kind != "all_to_all":
        return None
    if not one_node:
        return None
    # message_bytes is one rank's routed copies: its 1/tp share of a unit's tokens, top-k times.
    layer_bytes = node.message_bytes * phase.tp / moe.experts_per_token
    units = phase.adp * phase.sp
    dispatch = node.purpose == "ep_dispatch"
    if units == 1:
        if dispatch:
            return node.model_copy(update={"message_bytes": 0.0})
        return node.model_copy(update={"kind": "all_reduce", "message_bytes": layer_bytes})
    kind = "all_gather" if dispatch else "reduce_scatter"
    return node.model_copy(update={"kind": kind, "message_bytes": layer_bytes * units})
