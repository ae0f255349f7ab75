"""The servers a plan needs: each role's layout, where its processes go, how many sequences each holds.

Engine-independent: the engine modules (:mod:`.vllm`, :mod:`.sglang`, :mod:`.trtllm`) turn a :class:`Server`
into flags; :mod:`.shell` turns its processes into shell lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from shardplan.contracts.hardware import GPU
from shardplan.contracts.plan import Plan
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.packing import place_workers
from shardplan.text import counted
from shardplan.tools.catalogs.gpus import cluster_for
from shardplan.tools.launch.features import Drafting, drafting, prefix_hit
from shardplan.tools.planning.planner import resolve_request
from shardplan.tools.serving.engine_limits import engine_step_budget

__all__ = [
    "Engine",
    "ENGINES",
    "FlagValue",
    "Role",
    "Target",
    "Server",
    "plan_target",
    "in_flight_by_role",
    "open_arrivals",
    "fold_sp",
    "worker_starts",
    "two_type_starts",
    "node_labels",
    "plan_servers",
    "seqs_per_scheduler",
    "microbatch_note",
    "split_pair",
    "pool_notes",
]

Engine = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[str, ...] = get_args(Engine)
FlagValue = str | int | bool
"""A flag's value; ``True`` is a switch written without a value."""

Role = Literal["serve", "prefill", "decode", "router"]


@dataclass(frozen=True)
class Target:
    """What every engine mapping needs to know about the plan."""

    model: str
    moe: bool
    gpus_per_node: int
    gpus: int
    """The request's GPU budget, on which the servers are placed."""
    in_flight: dict[str, int]
    """Sequences in flight per server role across all its processes, from the plan's deployment."""
    isl: int
    kv_fp8: bool
    drafting: Drafting | None = None
    """Speculative decoding, with where the drafter's weights are; None when the plan does not speculate."""
    prefix_hit: float = 0.0
    """Share of prompt tokens the plan assumed found in the prefix cache."""
    gpu: str = ""
    """GPU type of the servers (of the prefill pool when ``decode_gpu`` is set)."""
    decode_gpu: str | None = None
    """GPU type of the decode pool when it differs: each pool then sits on nodes of its own type."""
    max_batched_tokens: int = 8192
    """Tokens one scheduler's step carries in the plan (the workload's step budget)."""
    longest_prompt: int | None = None
    """The longest prompt the plan's workload can send (:attr:`~shardplan.contracts.workload.Workload.
    longest_prompt`); None: no bound known (a trace, an uncapped distribution)."""
    max_context: int = 131072
    """The model's longest context, which bounds any prompt."""
    memory_share: float = 0.9
    """The share of GPU memory the plan gave the engine (the workload's ``gpu_memory_utilization``): of the whole GPU
    for vLLM, of the memory left free after the weights for TensorRT-LLM (:mod:`~shardplan.tools.cost.memory`)."""
    gpu_specs: dict[str, GPU] = field(default_factory=dict)
    """Each role's GPU (``serve``, ``prefill``, ``decode``), for the engine's defaults on it."""

    def sequences(self, role: str) -> int:
        """Sequences the servers of ``role`` hold together (their engines' concurrency limits add up to it)."""
        return self.in_flight.get(role, self.in_flight["serve"])

    def step_budget_flag(self, server: Server, engine: str, ranks: int = 1) -> int | None:
        """The budget flag's value for ``server``, where the engine's default on its GPU differs from the plan's
        step budget (each of its ``ranks`` attention data-parallel schedulers taking the plan's whole budget); None
        where the default is the plan's, so the command stays as short as the engine allows. SGLang divides its
        ``--chunked-prefill-size`` among the ranks under ``--enable-dp-attention``, so it is given for all of them
        (:func:`~shardplan.tools.serving.engine_limits.engine_step_budget`)."""
        gpu = self.gpu_specs.get(server.role)
        planned = self.max_batched_tokens
        if gpu is None or engine_step_budget(engine, gpu, ranks) == planned:
            return None
        return planned * ranks if engine == "sglang" else planned


@dataclass
class Server:
    """One server role: its layout, where its GPUs start, and the flags an engine chose for it."""

    role: Role
    phase: PhaseStrategy
    starts: list[int]
    """First GPU of each of the role's processes (replicas or pool workers), each inside a node or on whole nodes."""
    program: list[str] = field(default_factory=list)
    flags: dict[str, FlagValue] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    instances: int = 1
    port: int | None = None
    multinode: str = ""

    @property
    def gpus(self) -> int:
        """GPUs of one instance (one server process group)."""
        return self.phase.replica_gpus * (self.phase.dp // self.instances)


def plan_target(plan: Plan, spec_model: str | None = None) -> Target:
    """What the engine mappings need of ``plan``; ``spec_model`` is the EAGLE head or draft model to load
    (:func:`shardplan.tools.launch.features.drafting`)."""
    workload = plan.request.workload
    if plan.dag is not None:
        spec = plan.dag.meta.model
    else:
        spec, _ = resolve_request(plan.request)
    # The DAG sits on one replica's GPUs; servers are placed on the nodes of the whole request.
    request = plan.request
    cluster = cluster_for(request.gpu, request.gpus, request.gpus_per_node, request.cluster, request.decode_gpu,
                          request.decode_gpus)
    decode = cluster.decode_pool.gpu if cluster.decode_pool is not None else cluster.gpu
    return Target(model=spec.name, moe=spec.is_moe, gpus_per_node=cluster.gpus_per_node, gpus=cluster.world_size,
                   in_flight=in_flight_by_role(plan), isl=workload.isl, kv_fp8=spec.kv_dtype == "fp8",
                   drafting=drafting(plan, spec, spec_model), prefix_hit=prefix_hit(plan), gpu=cluster.gpu.name,
                   decode_gpu=cluster.decode_pool.gpu.name if cluster.decode_pool is not None else None,
                   max_batched_tokens=workload.max_batched_tokens, longest_prompt=workload.longest_prompt,
                   max_context=spec.max_position_embeddings, memory_share=workload.gpu_memory_utilization,
                   gpu_specs={"serve": cluster.gpu, "prefill": cluster.gpu, "decode": decode})


def open_arrivals(plan: Plan) -> bool:
    """Whether the plan serves a request rate whose arrivals do not wait for one another (Poisson, bursty, a
    trace's times): its concurrency is then a mean that the traffic swings around, not a ceiling."""
    workload = plan.request.workload
    return workload.open_arrivals and workload.batch is None


def in_flight_by_role(plan: Plan) -> dict[str, int]:
    """Each role's sequences in flight, which the engines' concurrency limits add up to: the deployment's
    concurrency (not a planning batch), split by pool. Under open arrivals the running pools take what their KV
    cache holds instead: a limit at the mean would queue every swing above it, the queueing the plan's
    simulation leaves out since the engine does not (its own default limit is higher still)."""
    d = plan.deployment
    if d is None:
        return {"serve": plan.request.workload.sequences}
    pools: dict[str, int] = {pool.role: pool.workers * pool.concurrency_per_worker for pool in d.pools}
    if open_arrivals(plan):
        held: dict[str, int] = {pool.role: pool.workers * pool.max_concurrency_per_worker for pool in d.pools
                if pool.role != "prefill" and pool.max_concurrency_per_worker >= pool.concurrency_per_worker}
        pools.update(held)
        if "replica" in held:
            pools["serve"] = held["replica"]
    return {"serve": pools.get("serve", d.concurrency), "prefill": pools.get("prefill", d.concurrency),
            "decode": pools.get("decode", d.concurrency)}


def fold_sp(phase: PhaseStrategy, role: str, notes: list[str]) -> PhaseStrategy:
    """No engine has a sequence-parallel prefill degree here: its GPUs join the TP group instead."""
    if phase.sp == 1:
        return phase
    notes.append(f"{role}: sp={phase.sp} (the prompt split into token shards) cannot be expressed; the {role} server "
                 f"uses those GPUs as tensor parallelism instead (tp={phase.tp * phase.sp}); check that it divides "
                 "the attention heads")
    return phase.model_copy(update={"tp": phase.tp * phase.sp, "sp": 1})


def worker_starts(phases: list[PhaseStrategy], target: Target) -> list[list[int]]:
    """Where each phase's processes go: the search's own placement (serving.place_workers), else one after
    another when a hand-written strategy does not pack."""

    pools = [(phase.dp, phase.replica_gpus) for phase in phases]
    placed = place_workers(pools, max(target.gpus, sum(d * g for d, g in pools)), target.gpus_per_node)
    if placed is not None:
        return placed
    first = [sum(d * g for d, g in pools[:i]) for i in range(len(pools))]
    return [[first[i] + k * g for k in range(d)] for i, (d, g) in enumerate(pools)]


def two_type_starts(prefill: PhaseStrategy, decode: PhaseStrategy, target: Target) -> tuple[list[int], list[int]]:
    """Where the processes of split pools on two GPU types go: the prefill pool on the first nodes (its type), the
    decode pool from the next whole node on (the other type), each packed as :func:`worker_starts` packs one pool."""
    per_node = target.gpus_per_node
    (prefill_starts,) = worker_starts([prefill], target)
    used = max((start + prefill.replica_gpus for start in prefill_starts), default=0)
    offset = -(-used // per_node) * per_node
    (decode_starts,) = worker_starts([decode], target)
    return prefill_starts, [offset + start for start in decode_starts]


def node_labels(servers: list[Server], target: Target) -> dict[int, str]:
    """What each node of a two-GPU-type deployment holds ('H200, prefill pool'); empty for one GPU type."""
    if target.decode_gpu is None:
        return {}
    labels: dict[int, str] = {}
    for server in servers:
        gpu = target.decode_gpu if server.role == "decode" else target.gpu
        for start in server.starts:
            for node in range(start // target.gpus_per_node, (start + server.phase.replica_gpus - 1)
                              // target.gpus_per_node + 1):
                labels[node] = f"{gpu} node, {server.role} pool"
    return labels


def plan_servers(plan: Plan, notes: list[str], target: Target) -> list[Server]:
    strategy = plan.strategy
    assert strategy is not None
    if strategy.disaggregated:
        prefill = fold_sp(strategy.prefill, "prefill", notes)
        decode = strategy.decode
        if target.decode_gpu is not None:
            prefill_starts, decode_starts = two_type_starts(prefill, decode, target)
            notes.append(f"two GPU types: the prefill servers run on {target.gpu} nodes and the decode servers on "
                         f"{target.decode_gpu} nodes (each node's '# node' line says which); the KV cache crosses the "
                         "network between them, so give both pools the same KV-cache format and transfer backend")
        else:
            prefill_starts, decode_starts = worker_starts([prefill, decode], target)
        return [Server("prefill", prefill, prefill_starts), Server("decode", decode, decode_starts)]
    if strategy.prefill != strategy.decode:
        sp = strategy.prefill.sp
        notes.append(f"prefill ({strategy.prefill.to_spec()}) and decode ({strategy.decode.to_spec()}) use different "
                     "layouts on the same GPUs; an engine runs one layout for both phases, so this command uses the "
                     "decode layout, which sets TPOT and memory, and prefill runs with it too"
                     + (f"; the prefill SP degree sp={sp} is not expressed" if sp > 1 else ""))
    return [Server("serve", strategy.decode, worker_starts([strategy.decode], target)[0])]


def seqs_per_scheduler(phase: PhaseStrategy, batch: int, groups: int) -> int:
    """Sequences per engine scheduler when the deployment's batch is spread over ``groups`` schedulers."""
    return max(1, math.ceil(batch / groups))


def microbatch_note(engine: str, role: str, phase: PhaseStrategy, notes: list[str], flag: str = "") -> None:
    if phase.mb > 1:
        how = f"; {flag} approximates it" if flag else ""
        notes.append(f"{role}: mb={counted(phase.mb, 'microbatch', 'microbatches')} per step cannot be set in "
                     f"{engine}, which schedules "
                     f"batches through the pipeline itself{how}")


def split_pair(servers: list[Server]) -> tuple[Server, Server] | None:
    """The prefill and decode servers of a split deployment, their ports set; None when the phases share GPUs."""
    if len(servers) < 2:
        return None
    prefill, decode = servers
    assert prefill.port is not None and decode.port is not None
    return prefill, decode


def pool_notes(
    servers: list[Server], notes: list[str], *, multinode: str, engine: str, balancer: str = "a load balancer"
) -> tuple[Server, Server] | None:
    """The notes every engine shares (how to start a server that spans nodes, a balancer in front of separate
    replicas); returns the split pair, for the engine to route it."""
    if any(s.multinode for s in servers):
        notes.append(multinode)
    pair = split_pair(servers)
    if pair is None and servers[0].instances > 1:
        notes.append(f"dp={counted(servers[0].instances, 'replica')} run as separate {engine} servers; put {balancer} "
                     f"in front")
    return pair
