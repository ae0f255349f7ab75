"""Hierarchy rules (09-combinations.md, 06-data-parallelism.md): rank groups nest as PP -> SP -> EP -> TP,
the degrees multiply to the GPU count with every GPU used once, and replicas never talk."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import compress

from shardplan.text import counted
from shardplan.validators.index import PHASES, DagIndex
from shardplan.validators.registry import Finding, from_problems, rule, sample

__all__ = ["rule_groups_nest", "rule_gpu_count", "rule_replicas_apart", "group_owners"]

_STAGE_CHECKED = ("sp_reduce_scatter", "sp_kv_gather", "sp_gather", "ep_dispatch", "ep_combine")
"""Purposes whose stage containment SP-3 and EP-2 report; HIER-1 checks the rest."""
_CROSSING = ("pp_activation", "kv_transfer")
"""Transfers that leave their group by design."""

Owners = dict[tuple[str, int, bool], dict[int, frozenset[int]]]


def group_owners(ix: DagIndex) -> tuple[Owners, list[tuple[str, frozenset[int], frozenset[int]]]]:
    """Per ``(phase, stage, expert)``, the TP group (or expert-TP group) that owns each rank, taken
    from the compute and KV nodes; and the pairs of groups that overlap without being equal."""
    owners: Owners = {}
    clashes: list[tuple[str, frozenset[int], frozenset[int]]] = []
    holders = [
        not comm and kind != "step_boundary" and phase in PHASES
        for comm, kind, phase in zip(ix.is_comm, ix.kind, ix.phase, strict=True)
    ]
    experts = [False] * len(ix)
    for i in ix.of_kind("expert"):
        experts[i] = ix.is_routed_expert(i)
    first: dict[tuple[str, int, bool, frozenset[int]], int] = {}
    for i, key in zip(
        compress(range(len(ix)), holders),
        compress(zip(ix.phase, ix.stage, experts, ix.ranks, strict=True), holders),
        strict=True,
    ):
        first.setdefault(key, i)
    for (phase, stage, expert, ranks), i in first.items():
        table = owners.setdefault((phase, stage, expert), {})
        for r in ranks:
            group = table.setdefault(r, ranks)
            if group != ranks:
                clashes.append((ix.ids[i], group, ranks))
                break
    return owners, clashes


def _fed_by_experts(ix: DagIndex, i: int, seen: dict[int, bool]) -> bool:
    """Whether communication node ``i`` moves routed-expert output, directly or through other
    communication (an expert-TP reduction drawn as a reduce-scatter and an all-gather); memoised in ``seen``."""
    if i not in seen:
        seen[i] = False  # a cycle (DAG-1) ends the walk
        seen[i] = any(
            ix.is_routed_expert(p) or (ix.is_comm[p] and _fed_by_experts(ix, p, seen)) for p in ix.pred(i, "data")
        )
    return seen[i]


@rule("HIER-1", full_graph=True)
def rule_groups_nest(ix: DagIndex) -> Iterator[Finding]:
    """TP groups partition each stage; every collective spans whole TP (or expert-TP) groups of one stage."""
    yield from from_problems(ix, "HIER-1")
    owners, clashes = group_owners(ix)
    if clashes:
        name, a, b = clashes[0]
        yield Finding(
            message=f"{len(clashes)} TP groups overlap other groups of their stage without being equal, "
            f"e.g. {name} on {sorted(b)[:8]} against {sorted(a)[:8]}",
            fix="partition each stage's GPUs into disjoint TP groups and map every operator to one",
            nodes=[c[0] for c in clashes],
        )
    splitting, outside = [], []
    has_experts = bool(ix.of_kind("expert"))
    expert_side: dict[int, bool] = {}
    verdicts: dict[tuple[int, tuple[str, int, bool], bool], str] = {}
    for i, ranks in enumerate(ix.ranks):
        purpose = ix.purpose[i]
        if not ix.is_comm[i] or purpose in _CROSSING or ix.phase[i] not in PHASES:
            continue
        key = (ix.phase[i], ix.stage[i], has_experts and _fed_by_experts(ix, i, expert_side))
        check_stage = purpose not in _STAGE_CHECKED
        memo = (id(ranks), key, check_stage)
        verdict = verdicts.get(memo)
        if verdict is None:
            table = owners.get(key, {})
            groups = [table.get(r) for r in ranks]
            if check_stage and any(group is None for group in groups):
                verdict = "outside"
            elif any(group is not None and not group <= ranks for group in groups):
                verdict = "splits"
            else:
                verdict = ""
            verdicts[memo] = verdict
        if verdict == "outside":
            outside.append(ix.ids[i])
        elif verdict == "splits":
            splitting.append(ix.ids[i])
    if splitting:
        first = ix.pos[splitting[0]]
        yield Finding(
            message=f"{len(splitting)} collectives cut through a TP group instead of spanning whole groups, "
            f"e.g. {splitting[0]} on ranks {sorted(ix.ranks[first])[:8]}",
            fix="run each collective on whole TP groups (expert-TP groups for expert outputs): PP -> SP -> "
            "EP -> TP must nest",
            nodes=splitting,
        )
    if outside:
        first = ix.pos[outside[0]]
        yield Finding(
            message=f"{len(outside)} collectives involve GPUs that hold no operator of their stage, e.g. "
            f"{outside[0]} (stage {ix.stage[first]}) on ranks {sorted(ix.ranks[first])[:8]}",
            fix="keep every group inside one pipeline stage",
            nodes=outside,
        )


@rule("HIER-2", full_graph=True)
def rule_gpu_count(ix: DagIndex) -> Iterator[Finding]:
    """dp x pp x adp x sp x tp is the GPU count, and each GPU of a phase holds exactly one position."""
    yield from from_problems(ix, "HIER-2")
    pools: dict[str, list[int]] = {}
    for phase in PHASES:
        strategy = ix.phase_strategy(phase)
        pool = ix.meta.rank_pools.get(phase)
        if strategy is None or pool is None:
            yield Finding(
                message=f"meta.rank_pools has no {phase} entry", fix=f"list the {phase} replica's ranks"
            )
            continue
        pools[phase] = pool
        if len(pool) != strategy.replica_gpus or len(set(pool)) != len(pool):
            yield Finding(
                message=f"{phase}: the drawn replica lists {counted(len(pool), 'rank')} ({len(set(pool))} distinct) "
                f"but pp*adp*sp*tp = {strategy.replica_gpus}",
                fix="list each GPU of one replica once in meta.rank_pools",
            )
        stages = {stage: ranks for (p, stage), ranks in ix.stage_ranks.items() if p == phase}
        used = frozenset().union(*stages.values()) if stages else frozenset()
        idle = sorted(set(pool) - used)
        if idle:
            yield Finding(
                message=f"{phase}: {counted(len(idle), 'GPU')} of the replica run no operator: {idle[:8]}",
                fix="map every GPU of the replica to a position (stage, group, shard, TP rank)",
            )
        owner: dict[int, int] = {}
        doubled: set[int] = set()
        for stage, ranks in stages.items():
            for r in ranks:
                if owner.setdefault(r, stage) != stage:
                    doubled.add(r)
        if doubled:
            yield Finding(
                message=f"{phase}: {counted(len(doubled), 'GPU')} serve more than one pipeline stage: "
                f"{sorted(doubled)[:8]}",
                fix="give each GPU one stage; stages use disjoint GPUs",
            )
    if ix.meta.strategy.disaggregated and len(pools) == 2:
        both = sorted(set(pools["prefill"]) & set(pools["decode"]))
        if both:
            yield Finding(
                message=f"disaggregated serving, but {counted(len(both), 'GPU')} are in both pools: {both[:8]}",
                fix="give the prefill pool and the decode pool disjoint GPUs",
            )


@rule("HIER-3")
def rule_replicas_apart(ix: DagIndex) -> Iterator[Finding]:
    """Data-parallel replicas exchange nothing: every node stays inside its phase's drawn replica."""
    pools = {phase: ix.pool(phase) for phase in PHASES}
    verdicts: dict[tuple[str, frozenset[int]], bool] = {}
    for key in set(zip(ix.phase, ix.footprint, strict=True)):
        pool = pools.get(key[0])
        verdicts[key] = key[0] == "handoff" or pool is None or key[1] <= pool
    strays = [
        ix.ids[i] for i, key in enumerate(zip(ix.phase, ix.footprint, strict=True)) if not verdicts[key]
    ]
    source, target = pools["prefill"], pools["decode"]
    if source is not None and target is not None:
        strays += [
            ix.ids[i]
            for i in ix.of_kind("kv_transfer")
            if ix.phase[i] == "handoff"
            and not (ix.ranks[i] <= source and set(ix.fields[i].get("peers") or []) <= target)
        ]
    if strays:
        first = ix.pos[strays[0]]
        yield Finding(
            message=f"{counted(len(strays), 'node')} reach GPUs outside their phase's replica (another replica or no "
            f"replica): {sample(strays)}; {strays[0]} uses {sorted(ix.footprint[first])[:8]}",
            fix="keep every node and transfer inside one replica (meta.rank_pools); replicas share nothing",
            nodes=strays,
        )
