"""Split pools on two GPU types (01-phases.md, KV-5): each pool on nodes of its own type, each phase on its pool."""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.text import counted
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, rule, sample

__all__ = ["rule_two_gpu_types_apart"]


@rule("KV-5")
def rule_two_gpu_types_apart(ix: DagIndex) -> Iterator[Finding]:
    """On two GPU types the deployment is split, each phase runs on its own pool, and no node holds both pools."""
    meta = ix.meta
    if meta.decode_gpu is None:
        return
    kinds = f"{meta.gpu} for prefill, {meta.decode_gpu} for decode"
    if not meta.strategy.disaggregated:
        yield Finding(
            message=f"prefill and decode share GPUs, but the DAG's pools are two GPU types ({kinds})",
            fix="split the deployment (prefill:...;decode:...;disagg), or build it for one GPU type",
        )
        return
    prefill, decode = ix.pool("prefill"), ix.pool("decode")
    if prefill is None or decode is None:
        return
    per_node = meta.gpus_per_node
    shared = sorted({r // per_node for r in prefill} & {r // per_node for r in decode})
    if shared:
        yield Finding(
            message=f"node(s) {shared[:8]} of {counted(per_node, 'GPU')} hold ranks of both pools, but a node holds "
                    f"one GPU "
            f"type ({kinds})",
            fix="start the decode pool's ranks on a node of their own (Strategy.decode_offset with apart=True)",
        )
    strays = [
        ix.ids[i]
        for i, (phase, ranks) in enumerate(zip(ix.phase, ix.ranks, strict=True))
        if phase in ("prefill", "decode") and not ranks <= (prefill if phase == "prefill" else decode)
    ]
    if strays:
        yield Finding(
            message=f"{counted(len(strays), 'node')} run outside their phase's pool of GPUs ({kinds}): "
                    f"{sample(strays)}",
            fix="place prefill nodes on the prefill pool's ranks and decode nodes on the decode pool's",
            nodes=strays,
        )
