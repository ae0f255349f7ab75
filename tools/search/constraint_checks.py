"""Whether a strategy respects a request's constraints, and which constraint it breaks.

Plain functions over plain contracts, so the search, the planner and a reviewer share them. Ranks are
placed Megatron-style (``dp`` outermost, then ``pp``, ``adp``, ``sp``, ``tp`` innermost), so:

* a TP group of ``tp`` consecutive ranks sits inside one node when ``tp`` divides the node size;
* a stage's ``adp x sp x tp`` GPUs (regrouped as ``ep x etp`` in MoE layers) sit inside one node when
  that count divides the node size;
* pipeline boundaries fall on node boundaries when each stage fills whole nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from shardplan.contracts.constraints import Constraints, parse_constraint
from shardplan.contracts.strategy import PhaseStrategy, Strategy

__all__ = ["phase_violations", "strategy_violations", "satisfies", "allowed_layouts", "unsatisfiable"]


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def _inside_node(gpus: int, gpus_per_node: int) -> bool:
    return gpus <= gpus_per_node and gpus_per_node % gpus == 0


def phase_violations(phase_name: str, phase: PhaseStrategy, constraints: Constraints, gpus_per_node: int) -> list[str]:
    """The constraints (text form) that one phase layout breaks; empty when it respects them all.

    ``phase_name`` is ``prefill`` or ``decode``. A bound on ``sp`` for both phases bounds prefill only,
    since decode has no sequence parallelism.

    >>> from shardplan.contracts.constraints import parse_constraints
    >>> phase_violations("decode", PhaseStrategy(tp=16), parse_constraints(["tp<=8", "tp-in-node"]), 8)
    ['tp<=8', 'tp-in-node']
    """
    broken = []
    for bound in constraints.degrees:
        if bound.phase not in ("both", phase_name) or (bound.dim == "sp" and bound.phase == "both"
                                                      and phase_name == "decode"):
            continue
        if not bound.holds(getattr(phase, bound.dim)):
            broken.append(bound.to_text())
    if constraints.tp_within_node and not _inside_node(phase.tp, gpus_per_node):
        broken.append("tp-in-node")
    if constraints.ep_within_node and phase.ep > 1 and not _inside_node(phase.stage_gpus, gpus_per_node):
        broken.append("ep-in-node")
    if constraints.pp_across_nodes and phase.pp > 1 and phase.stage_gpus % gpus_per_node:
        broken.append("pp-across-nodes")
    if constraints.powers_of_two and not all(
        _power_of_two(n) for n in (phase.pp, phase.adp, phase.sp, phase.tp, phase.ep, phase.replica_gpus)
    ):
        broken.append("pow2")
    if constraints.gpus_per_replica and phase.replica_gpus != constraints.gpus_per_replica:
        broken.append(f"gpus-per-replica={constraints.gpus_per_replica}")
    if constraints.engine and (phase.sp > 1 or phase.mb > 1):
        broken.append(f"engine={constraints.engine}")
    return broken


def strategy_violations(strategy: Strategy, constraints: Constraints, gpus_per_node: int) -> list[str]:
    """The constraints (text form, each once) that a strategy breaks; empty when it respects them all.

    >>> from shardplan.contracts.constraints import parse_constraints
    >>> from shardplan.contracts.strategy import parse_strategy
    >>> strategy_violations(parse_strategy("pp=4,tp=8"), parse_constraints(["pp=1", "colocated"]), 8)
    ['pp=1']
    """
    broken = phase_violations("prefill", strategy.prefill, constraints, gpus_per_node)
    broken += phase_violations("decode", strategy.decode, constraints, gpus_per_node)
    if constraints.serving == "colocated" and strategy.disaggregated:
        broken.append("colocated")
    if constraints.serving == "disaggregated" and not strategy.disaggregated:
        broken.append("disaggregated")
    if (constraints.engine and not strategy.disaggregated
            and strategy.prefill.model_copy(update={"mb": 1}) != strategy.decode.model_copy(update={"mb": 1})):
        # An engine serves both phases of one pool with one layout.
        broken.append(f"engine={constraints.engine}")
    return list(dict.fromkeys(broken))


def satisfies(strategy: Strategy, constraints: Constraints | None, gpus_per_node: int) -> bool:
    """Whether ``strategy`` respects every constraint (``None`` constrains nothing)."""
    return constraints is None or not strategy_violations(strategy, constraints, gpus_per_node)


def allowed_layouts(
    layouts: Iterable[PhaseStrategy], phase_name: str, constraints: Constraints | None, gpus_per_node: int,
    rejected: dict[str, int] | None = None,
) -> Iterator[PhaseStrategy]:
    """The phase layouts that respect ``constraints``; those that do not are counted in ``rejected`` under
    ``constraint <text>`` of the first one they break."""
    for layout in layouts:
        broken = phase_violations(phase_name, layout, constraints, gpus_per_node) if constraints else []
        if not broken:
            yield layout
        elif rejected is not None:
            key = f"constraint {broken[0]}"
            rejected[key] = rejected.get(key, 0) + 1


def unsatisfiable(candidates: Iterable[Strategy], constraints: Constraints, gpus_per_node: int) -> list[str]:
    """The constraints to blame when no candidate is allowed: each one that alone rules out every
    candidate; when none does alone, all of them (they rule everything out together).

    >>> from shardplan.contracts.constraints import parse_constraints
    >>> from shardplan.contracts.strategy import parse_strategy
    >>> unsatisfiable([parse_strategy("tp=8")], parse_constraints(["tp<=4", "pp=1"]), 8)
    ['tp<=4']
    """
    pool = list(candidates)
    texts = constraints.to_texts()
    alone = [t for t in texts if not any(satisfies(s, parse_constraint(t), gpus_per_node) for s in pool)]
    return alone or texts
