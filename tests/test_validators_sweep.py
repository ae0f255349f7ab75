"""No false alarm over a thousand random legal strategies, and none after meaning-preserving rewrites.

The strategies are drawn with a seeded generator (so a failure names a strategy that reproduces) across
dense GQA, MoE, MLA and sliding-window models cut to a few layers, 1 to 64 GPUs, shared and separate
GPU pools. Every DAG the builder accepts must validate without an error; so must the same DAG with its
ids renamed, its lists shuffled, each all-reduce drawn as a reduce-scatter and an all-gather, and each
QKV projection split into Q, K and V.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from dataclasses import dataclass

import pytest
from mutation_cases import drawn_node_size, trimmed_model

from shardplan.contracts.arithmetic.feasibility import strategy_problems
from shardplan.contracts.dag import DAG, CommNode, ComputeNode, Edge
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.validators.validate import validate

# (bundled model, layers kept, family): DeepSeek-V3 keeps 4 layers so that one MoE layer follows its
# leading dense ones; gpt-oss alternates sliding-window and full attention.
MODELS = (
    ("llama-3.1-8b", 2, "dense GQA"),
    ("qwen3-8b", 3, "dense GQA"),
    ("mixtral-8x7b", 2, "MoE"),
    ("qwen3-30b-a3b", 2, "MoE"),
    ("deepseek-v3", 4, "MLA MoE"),
    ("gpt-oss-20b", 2, "sliding-window MoE"),
)
STRATEGIES = 1000
REWRITTEN_EVERY = 10


@dataclass(frozen=True)
class Drawn:
    model: str
    family: str
    layers: int
    strategy: Strategy
    workload: Workload

    @property
    def label(self) -> str:
        return f"{self.model}[{self.layers}L] {self.strategy.to_spec()} {self.workload.model_dump()}"


@functools.cache
def _model(name: str, layers: int) -> ModelSpec:
    return trimmed_model(name, layers)


def _phase(rng: random.Random, model: ModelSpec, *, prefill: bool) -> PhaseStrategy:
    tp = rng.choice([1, 1, 2, 4, 8])
    sp = rng.choice([1, 2, 4, 8]) if prefill else 1
    adp = rng.choice([1, 1, 2, 3, 4])
    stage = adp * sp * tp
    experts = model.moe.num_experts if model.moe else 1
    ep = rng.choice([d for d in (1, 2, 4, 8, 16, 32, 64) if stage % d == 0 and experts % d == 0])
    return PhaseStrategy(
        dp=rng.choice([1, 1, 2, 3]),
        pp=rng.randint(1, min(3, model.num_layers)),
        adp=adp,
        sp=sp,
        tp=tp,
        ep=ep,
        mb=rng.choice([1, 1, 2]),
    )


def _draw(rng: random.Random) -> Drawn | None:
    """One random strategy, or None when the draw is not buildable (the caller draws again)."""
    name, layers, family = rng.choice(MODELS)
    model = _model(name, layers)
    prefill = _phase(rng, model, prefill=True)
    if rng.random() < 0.4:
        strategy = Strategy(prefill=prefill, decode=_phase(rng, model, prefill=False), disaggregated=True)
    else:  # shared GPUs: the weight sharding stays, prefill's sequence shards become attention groups
        decode = prefill.model_copy(update={"sp": 1, "adp": prefill.adp * prefill.sp, "mb": rng.choice([1, 2])})
        strategy = Strategy(prefill=prefill, decode=decode)
    workload = Workload(
        isl=rng.choice([16, 64, 200]), osl=rng.choice([2, 16]), batch=rng.choice([1, 4, 8, 24, 64])
    )
    if strategy.gpus > 64 or strategy_problems(model, strategy, workload, strategy.gpus, drawn_node_size(strategy)):
        return None
    return Drawn(name, family, layers, strategy, workload)


@functools.cache
def drawn_strategies() -> tuple[Drawn, ...]:
    rng = random.Random(14)
    found: dict[str, Drawn] = {}
    while len(found) < STRATEGIES:
        drawn = _draw(rng)
        if drawn is not None:
            found.setdefault(drawn.label, drawn)
    return tuple(found.values())


def _build(drawn: Drawn) -> DAG:
    gpus = drawn.strategy.gpus
    per_node = drawn_node_size(drawn.strategy)
    return build_dag(_model(drawn.model, drawn.layers), make_cluster("H100", gpus, per_node), drawn.strategy,
                     drawn.workload)


def _errors(dag: DAG) -> list[str]:
    return [f"{v.rule}: {v.message}" for v in validate(dag).violations if v.severity == "error"]


# -- meaning-preserving rewrites -------------------------------------------------------------------
def renamed(dag: DAG, rng: random.Random) -> DAG:
    """Every id replaced by an opaque one."""
    order = list(range(len(dag.nodes)))
    rng.shuffle(order)
    new = {node.id: f"n{order[k]:06d}" for k, node in enumerate(dag.nodes)}
    nodes = [node.model_copy(update={"id": new[node.id]}) for node in dag.nodes]
    edges = [Edge(src=new[e.src], dst=new[e.dst], kind=e.kind) for e in dag.edges]
    return dag.model_copy(update={"nodes": nodes, "edges": edges})


def shuffled(dag: DAG, rng: random.Random) -> DAG:
    """Nodes and edges in another order."""
    nodes, edges = list(dag.nodes), list(dag.edges)
    rng.shuffle(nodes)
    rng.shuffle(edges)
    return dag.model_copy(update={"nodes": nodes, "edges": edges})


def _rewire(dag: DAG, replaced: dict[str, tuple[list, str, str]]) -> DAG:
    """Replace nodes by chains: ``replaced[id] = (new nodes, id entering the chain, id leaving it)``."""
    nodes = [n for node in dag.nodes for n in (replaced[node.id][0] if node.id in replaced else [node])]
    edges = []
    for e in dag.edges:
        src = replaced[e.src][2] if e.src in replaced else e.src
        dst = replaced[e.dst][1] if e.dst in replaced else e.dst
        edges.append(Edge(src=src, dst=dst, kind=e.kind))
    return dag.model_copy(update={"nodes": nodes, "edges": edges})


def all_reduce_as_two(dag: DAG, rng: random.Random) -> DAG:
    """Each all-reduce drawn as a reduce-scatter followed by an all-gather on the same GPUs."""
    replaced: dict[str, tuple[list, str, str]] = {}
    extra: list[Edge] = []
    for node in dag.nodes:
        if isinstance(node, CommNode) and node.kind == "all_reduce":
            rs = node.model_copy(update={"id": f"{node.id}.rs", "kind": "reduce_scatter"})
            ag = node.model_copy(update={"id": f"{node.id}.ag", "kind": "all_gather"})
            replaced[node.id] = ([rs, ag], rs.id, ag.id)
            extra.append(Edge(src=rs.id, dst=ag.id, kind="data"))
    rewritten = _rewire(dag, replaced)
    return rewritten.model_copy(update={"edges": [*rewritten.edges, *extra]})


def qkv_split(dag: DAG, rng: random.Random) -> DAG:
    """Each QKV projection drawn as separate Q, K and V projections reading the same input; K and V fill
    the cache, all three feed attention."""
    parts: dict[str, list[ComputeNode]] = {}
    for node in dag.nodes:
        if isinstance(node, ComputeNode) and node.op == "qkv_proj":
            n = node.shape.get("n", 3)
            widths = {"q": n - 2 * (n // 4), "k": n // 4, "v": n // 4}
            parts[node.id] = [
                node.model_copy(
                    update={
                        "id": f"{node.id}.{p}",
                        "op": f"{p}_proj",
                        "shape": {**node.shape, "n": w},
                        "flops": node.flops * w / n,
                    }
                )
                for p, w in widths.items()
            ]
    nodes = [n for node in dag.nodes for n in parts.get(node.id, [node])]
    edges = []
    for e in dag.edges:
        if e.dst in parts:
            edges += [Edge(src=e.src, dst=p.id, kind=e.kind) for p in parts[e.dst]]
        elif e.src in parts:
            q, k, v = parts[e.src]
            feeds_cache = e.kind == "state" or "all_gather" in e.dst  # the K/V write and the SP K/V gather
            edges += [Edge(src=p.id, dst=e.dst, kind=e.kind) for p in ((k, v) if feeds_cache else (q, k, v))]
        else:
            edges.append(e)
    return dag.model_copy(update={"nodes": nodes, "edges": edges})


REWRITES = (renamed, shuffled, all_reduce_as_two, qkv_split)


def test_the_sweep_spans_models_sizes_and_serving_modes() -> None:
    strategies = drawn_strategies()
    assert len(strategies) >= 1000
    families = Counter(d.family for d in strategies)
    assert set(families) == {family for _, _, family in MODELS}, families
    sizes = {d.strategy.gpus for d in strategies}
    assert 1 in sizes and 64 in sizes and len(sizes) >= 12, sorted(sizes)
    modes = Counter(d.strategy.disaggregated for d in strategies)
    assert modes[True] >= 200 and modes[False] >= 200, modes
    assert any(d.strategy.prefill.sp > 1 and d.strategy.prefill.ep > 1 for d in strategies)


@pytest.mark.parametrize("chunk", range(4))
def test_no_false_alarm_over_random_legal_strategies(chunk: int) -> None:
    strategies = drawn_strategies()[chunk::4]
    alarms = [(d.label, errors) for d in strategies if (errors := _errors(_build(d)))]
    assert not alarms, alarms[:3]


@functools.cache
def rewrite_sources() -> tuple[tuple[Drawn, DAG], ...]:
    """Every tenth drawn strategy with its DAG, built once for all four rewrites (a build costs more than a
    rewrite and its validation together); sharing them is sound because a rewrite returns a new DAG and leaves
    the one it is given as it was (test_rewrites_leave_their_input_as_it_was)."""
    return tuple((drawn, _build(drawn)) for drawn in drawn_strategies()[::REWRITTEN_EVERY])


@pytest.mark.parametrize("rewrite", REWRITES, ids=lambda f: f.__name__)
def test_no_false_alarm_after_meaning_preserving_rewrites(rewrite) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(rewrite.__name__)
    alarms = []
    for drawn, built in rewrite_sources():
        dag = rewrite(built, rng)
        if errors := _errors(dag):
            alarms.append((drawn.label, errors))
    assert not alarms, alarms[:3]


def test_rewrites_change_the_graph() -> None:
    dag = _build(next(d for d in drawn_strategies() if d.strategy.prefill.tp > 1))
    rng = random.Random(0)
    assert {n.id for n in renamed(dag, rng).nodes}.isdisjoint({n.id for n in dag.nodes})
    assert [n.id for n in shuffled(dag, rng).nodes] != [n.id for n in dag.nodes]
    split = all_reduce_as_two(dag, rng)
    assert not any(n.kind == "all_reduce" for n in split.nodes)
    assert sum(n.kind == "reduce_scatter" for n in split.nodes) >= sum(n.kind == "all_reduce" for n in dag.nodes)
    qkv = qkv_split(dag, rng)
    assert not any(getattr(n, "op", None) == "qkv_proj" for n in qkv.nodes)
    assert {getattr(n, "op", None) for n in qkv.nodes} >= {"q_proj", "k_proj", "v_proj"}


@pytest.mark.parametrize("rewrite", REWRITES, ids=lambda f: f.__name__)
def test_rewrites_leave_their_input_as_it_was(rewrite) -> None:  # type: ignore[no-untyped-def]
    dag = _build(next(d for d in drawn_strategies() if d.strategy.prefill.tp > 1 and d.strategy.prefill.sp > 1))
    before = dag.model_dump()
    rewrite(dag, random.Random(0))
    assert dag.model_dump() == before
