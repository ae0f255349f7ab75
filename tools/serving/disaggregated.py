"""Disaggregated deployments (xPyD): x prefill workers and y decode workers, each pool with its own layout.

A prefill worker runs steps of ``k = max(1, B // I)`` whole prompts per attention group (``B`` the step
budget of each group's scheduler): it serves ``mu = k / prefill(k)`` requests/s. A decode worker with ``C``
sequences runs pure decode steps ``tau = step(C, 0)`` and finishes ``C / ((O - 1) tau)`` requests/s. The
deployment serves the decode pool's rate, which the prefill pool must exceed (below); each request's KV
cache then crosses from its prefill worker to its decode worker. TTFT is the rest of the step under way
when every prefill worker is busy, the queue of the pool at its utilisation ``rho`` (the x workers serve one
queue: M/D/x; bulk service: a step clears up to ``k`` waiting prompts, so a worker's service time is a
prompt's share of a full step), the request's own step, carrying it and the prompts that arrived during the
step before (:meth:`PrefillWorker.steps_at`), and the KV transfer.
Tokens/s/GPU counts every GPU of both pools.

The prefill pool must keep headroom: a sizing whose decode workers would take requests at or above the
rate the prefill workers can produce them is not a steady state. Its prefill queue grows without bound
(open arrivals), and the decode workers run the smaller batch the prefill pool feeds them, not the batch
they were sized for; that smaller batch is another point of the decode worker's concurrency grid, priced
on its own. So such sizings are left out, and the queue wait is the M/D/x wait itself, not clamped: near
saturation it rightly dominates TTFT. (Dynamo's planner and AIConfigurator's rate matching likewise size
prefill capacity above the decode pool's demand.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from shardplan.bisection import largest_passing
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.targets import within
from shardplan.contracts.workload import Workload
from shardplan.packing import max_workers
from shardplan.tools.cost.memory import kv_bytes_per_sequence_per_gpu, memory_report
from shardplan.tools.serving.at_rate import load_for_rate
from shardplan.tools.serving.engine_limits import engine_seq_cap
from shardplan.tools.serving.options import concurrency_grid, deployment_memory, priced_deployment
from shardplan.tools.serving.placement import split_pools_fit
from shardplan.tools.serving.steps import StepPricer

__all__ = [
    "PrefillWorker",
    "DecodeWorker",
    "prefill_worker",
    "decode_worker",
    "decode_workers",
    "batches_within_tpot",
    "kv_transfer_s",
    "pool_options",
    "pool_frontier",
]


@cache
def _log_factorials(top: int) -> np.ndarray:
    """log(a!) for a = 0..top."""
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, top + 1)))])


@lru_cache(maxsize=64)  # a table per prefill worker's steps, up to a few hundred KB each
def _place_waits(k: int, steps: tuple[float, ...], states: int, top: int) -> np.ndarray:
    """``[left, a]``: the mean time from the start of a step to the end of the step that prefills a prompt that
    finds ``left`` waiting and arrives among ``a`` others (a uniform place among them), in first-come order with
    steps of up to ``k`` prompts lasting ``steps[n - 1]``."""
    prices = np.array(steps)
    waits = np.empty((states, top + 1))
    lefts = np.arange(states)[:, None]
    for a in range(top + 1):
        ahead = lefts + np.arange(a + 1)[None, :]
        full = ahead // k
        own = np.minimum(lefts + a + 1 - full * k, k)
        waits[:, a] = np.mean(full * prices[-1] + prices[own - 1], axis=1)
    return waits


@dataclass(frozen=True)
class PrefillWorker:
    """One prefill worker's layout, prompts per full step, that step's time and the worker's request rate."""

    layout: PhaseStrategy
    prompts: int
    step_s: float
    single_s: float
    """A step of one prompt (per attention group): what a step costs when only one prompt waits."""

    @property
    def requests_per_s(self) -> float:
        return self.prompts / self.step_s

    def step_of(self, prompts: float) -> float:
        """A step of ``prompts`` prompts (at least one, at most a full step), interpolated between the step of one
        prompt and the full one."""
        return _step_of(self.prompts, self.step_s, self.single_s, prompts)

    def ttft_s(self, rate: float, workers: int = 1) -> float:
        """The mean time from a prompt's arrival at a pool of ``workers`` such workers fed by one queue, taking
        ``rate`` prompts/s (Poisson) in all, to the end of the step that prefills it.

        An engine starts a step with the prompts that wait, up to a full step of ``prompts``: those left by the
        step before and those that arrived during it, or the first to arrive when it was idle. So the prompts
        waiting at a step's start form a Markov chain: ``w`` waiting start a step of ``n = min(prompts, w)``,
        which lasts ``step(n)``, and the next starts with ``w - n + a``, ``a`` Poisson with mean ``rate step(n)``
        (after an idle spell when that is 0). A prompt arriving at a random time (it sees the time averages) finds
        the worker idle and is prefilled alone, or finds a step under way, waits out its rest and takes its place
        behind those waiting, in first-come order: the full steps ahead of it, then its own. Sizing every step as
        ``utilisation x prompts`` (the rule this replaced) put a 70B's prefill worker at 62% of its capacity in
        steps of 4.3 of 7 prompts where the simulated engine runs steps of about one, and split deployments' TTFT
        at 2 to 3.5 times the simulated one.

        Behind one queue, each worker takes ``rate / workers``; a prompt finds a worker free unless all are busy
        (each busy the share ``b`` of the time: ``b ** workers``), and when all are, the first to finish ends its
        step ``1 / (workers + 1)`` of a step later on average, not half a step.
        """
        # A search asks the same few workers at the same few rates thousands of times (15 distinct questions in
        # 1,982 for Llama-3.1-8B on 8 GPUs at a rate), and each answer solves a Markov chain: ask once.
        return _prefill_ttft_s(self.prompts, self.step_s, self.single_s, rate, workers)


def _step_of(full: int, step_s: float, single_s: float, prompts: float) -> float:
    if full <= 1:
        return step_s
    filled = min(float(full), max(1.0, prompts))
    return single_s + (step_s - single_s) * (filled - 1) / (full - 1)


@lru_cache(maxsize=4096)
def _prefill_ttft_s(prompts: int, step_s: float, single_s: float, rate: float, workers: int) -> float:
    """:meth:`PrefillWorker.ttft_s` of a worker taking ``prompts`` a full step of ``step_s`` (``single_s`` alone)."""
    k = prompts
    rate = rate / workers
    if k <= 1 or rate <= 0:
        return step_s if k <= 1 else single_s
    steps = np.array([_step_of(prompts, step_s, single_s, n) for n in range(1, k + 1)])
    # Arrivals during one step stay below ``top`` but for a negligible mass: below capacity (rate < k / step_s)
    # a full step sees fewer than k on average, and never many more than the mean of the longest step's.
    reach = rate * step_s
    top = int(min(k + 12 * math.sqrt(k), reach + 12 * math.sqrt(reach)) + 12)
    states = min(k, top) + 2 * top  # prompts waiting when a step starts: 1..states (the queue, truncated there)
    waiting = np.arange(1, states + 1)
    taken = np.minimum(waiting, k)
    left = waiting - taken  # those a full step leaves waiting
    counts = np.arange(top + 1)
    durations = steps[taken - 1]
    means = rate * durations
    pmf = np.exp(counts[None, :] * np.log(means[:, None]) - means[:, None] - _log_factorials(top)[None, :])
    # The next step starts with those left plus the arrivals (the first arrival's alone after an idle spell).
    chain = np.zeros((states, states))
    rows = np.repeat(np.arange(states), top + 1)
    nxt = np.clip(left[:, None] + counts[None, :], 1, states).ravel() - 1
    np.add.at(chain, (rows, nxt), pmf.ravel())
    chain /= chain.sum(axis=1, keepdims=True)
    # Stationary visits: v (P - I) = 0, one equation replaced by the visits summing to one.
    system = (chain - np.eye(states)).T
    system[-1] = 1.0
    target = np.zeros(states)
    target[-1] = 1.0
    visits = np.clip(np.linalg.solve(system, target), 0.0, None)
    idle = float(np.sum(visits * (left == 0) * pmf[:, 0])) / rate  # an idle spell of 1/rate
    busy = visits * durations
    # A prompt arriving during a step waits out its rest, then takes its place behind those left and a uniform
    # share of the a others that arrived during that step: the full steps ahead of it, then its own step, which
    # carries the rest ahead of it, itself and, up to k, those behind it.
    waits = _place_waits(k, tuple(steps.tolist()), states, top)
    riding = durations / (workers + 1) + np.sum(pmf * waits[left], axis=1)
    occupied = busy.sum() / (idle + busy.sum())
    all_busy = occupied**workers
    return float((1 - all_busy) * single_s + all_busy * np.dot(busy, riding) / busy.sum())


@dataclass(frozen=True)
class DecodeWorker:
    """One decode worker's layout, sequences in flight, time per output token and request rate."""

    layout: PhaseStrategy
    sequences: int
    step_s: float
    """Its step over the tokens each sequence gains in it (one, or the accepted drafts plus one): the TPOT."""
    osl: int

    @property
    def requests_per_s(self) -> float:
        return self.sequences / (max(self.osl - 1, 1) * self.step_s)


def prefill_worker(
    model: ModelSpec, cluster: Cluster, layout: PhaseStrategy, workload: Workload, pricer: StepPricer | None = None
) -> PrefillWorker | None:
    """A prefill worker of ``layout``, or None when its step of prompts does not fit in memory."""
    layout = layout.model_copy(update={"dp": 1})
    # Each attention-DP group schedules its own step of prompts (vLLM's token budget is per DP rank).
    # Behind a cached prefix the budget counts only the tokens computed, so a step takes more prompts, up to the
    # sequences the engine runs in a step.
    per_group = min(max(1, workload.max_batched_tokens // workload.prefill_tokens),
                    engine_seq_cap(workload.engine, cluster.gpu))
    prompts = per_group * layout.adp * layout.mb
    sized = workload.at_concurrency(prompts)
    if not memory_report(model, cluster.gpu, layout, sized, "prefill", workload.isl).fits:
        return None
    pricer = pricer or StepPricer.for_workload(model, cluster, layout, workload)
    return PrefillWorker(layout, prompts, pricer.prefill_s(prompts), pricer.prefill_s(layout.adp * layout.mb))


def decode_workers(
    model: ModelSpec, cluster: Cluster, layout: PhaseStrategy, workload: Workload, pricer: StepPricer | None = None
) -> list[DecodeWorker]:
    """A decode worker of ``layout`` at every concurrency that fits in its memory."""
    layout = layout.model_copy(update={"dp": 1})
    capacity = memory_report(
        model, cluster.gpu, layout, workload.at_concurrency(1), "decode", workload.isl + workload.osl
    ).max_batch
    floor = layout.adp * layout.mb
    if capacity < floor:
        return []
    pricer = pricer or StepPricer.for_workload(model, cluster, layout, workload)
    return [
        decode_worker(pricer, c, workload)
        # every attention data-parallel rank has a token budget of its own (see prefill_worker)
        for c in concurrency_grid(min(capacity, layout.adp * (workload.max_batched_tokens // pricer.verify_tokens)),
                                  floor)
    ]


def batches_within_tpot(grid: list[DecodeWorker], workload: Workload) -> list[DecodeWorker]:
    """The decode batches of ``grid`` (ascending) whose pure decode step is within the TPOT target: the grid's
    first ones, as the step grows with the batch. A decode worker serving a rate runs at most one of these
    (:func:`pool_options` solves its load up to the batch), so the largest of them is the most it is ever loaded
    within the target, at a rate as at full load, where :func:`pool_frontier` leaves the TPOT limit on the grid.
    """
    meeting = []
    for worker in grid:
        if not within("tpot", worker.step_s * 1e3, workload.targets):
            break
        meeting.append(worker)
    return meeting


def decode_worker(pricer: StepPricer, sequences: int, workload: Workload) -> DecodeWorker:
    """A decode worker of the pricer's layout running pure decode steps of ``sequences`` sequences."""
    return DecodeWorker(pricer.layout, sequences, pricer.tpot_s(sequences, 0), workload.osl)


def kv_transfer_s(
    model: ModelSpec, cluster: Cluster, prefill: PhaseStrategy, decode: PhaseStrategy, isl: int, same_node: bool
) -> float:
    """Time to move one prompt's KV cache from a prefill worker to a decode worker: every GPU of the smaller
    worker sends or receives its share in parallel, over NVLink when both sit in one node, else the network (on a
    cluster of two GPU types, the network between a node of each: the cluster's inter-node figures)."""
    whole = kv_bytes_per_sequence_per_gpu(model, PhaseStrategy(), isl)
    lanes = min(prefill.replica_gpus, decode.replica_gpus)
    if same_node:
        return whole / (lanes * cluster.intra_node_bandwidth_gb_per_s * 1e9) + cluster.intra_node_latency_us * 1e-6
    return whole / (lanes * cluster.inter_node_bandwidth_gb_per_s * 1e9) + cluster.inter_node_latency_us * 1e-6


def pool_options(
    model: ModelSpec,
    cluster: Cluster,
    prefill: PrefillWorker,
    decode: DecodeWorker,
    workload: Workload,
    *,
    budget: int,
    counts: tuple[int, int] | None = None,
    pricer: StepPricer | None = None,
) -> list[PricedDeployment]:
    """Every pool sizing (x prefill, y decode workers) on up to ``budget`` GPUs; ``counts`` fixes (x, y).

    With a ``workload.rate`` only sizings that serve it are kept, and with the decode layout's ``pricer`` each
    decode worker runs the batch the rate puts on it (at most ``decode``'s), its TPOT that batch's step.
    """
    gp, gd = prefill.layout.replica_gpus, decode.layout.replica_gpus
    per_node = cluster.gpus_per_node
    pair = Strategy(prefill=prefill.layout, decode=decode.layout, disaggregated=True)
    memory = deployment_memory(model, cluster, pair, workload, decode.sequences, prefill.prompts)
    options = []
    xs = [counts[0]] if counts else range(1, max_workers(min(budget, cluster.pool_budget("prefill")), per_node, gp) + 1)
    ys = [counts[1]] if counts else range(1, max_workers(min(budget, cluster.pool_budget("decode")), per_node, gd) + 1)
    for x in xs:
        for y in ys:
            gpus = x * gp + y * gd
            if gpus > budget or x < 1 or y < 1 or not split_pools_fit(cluster, (x, gp), (y, gd), budget):
                continue
            produced, taken = x * prefill.requests_per_s, y * decode.requests_per_s
            if workload.rate is not None and min(produced, taken) < workload.rate:
                continue
            served = workload.rate or taken
            busy = served / produced
            if busy >= 1.0:
                # The prefill pool cannot feed these decode batches: no steady state at this sizing.
                continue
            # The decode worker's prefix cache holds the cached prefix: only the rest of the prompt's KV moves.
            # Two GPU types never share a node: the KV cache crosses the network between them.
            transfer = kv_transfer_s(
                model, cluster, prefill.layout, decode.layout, workload.prefill_tokens,
                gpus <= per_node and not cluster.mixed,
            )
            # The x prefill workers serve one queue (Dynamo's prefill queue, or a router sending each prompt to
            # an idle worker), so the pool queues as x servers, not as x workers each with a random share of
            # the arrivals. A step takes up to ``prompts`` waiting prompts at once (bulk service): each worker
            # clears a prompt every step_s / prompts. A request waits for a step under way only when every
            # worker is busy (the first of x to finish ends step / (x + 1) later on average), then rides a step
            # as full as the load makes it.
            ttft = prefill.ttft_s(served, workers=x) + transfer
            running, step_s = _decode_load(decode, served / y, workload, pricer)
            tpot = step_s if workload.osl > 1 else 0.0
            in_flight = max(1, math.ceil(served * (ttft + (workload.osl - 1) * tpot)))
            strategy = Strategy(
                prefill=prefill.layout.model_copy(update={"dp": x}),
                decode=decode.layout.model_copy(update={"dp": y}),
                disaggregated=True,
            )
            options.append(
                priced_deployment(
                    strategy,
                    workload,
                    cluster,
                    budget=budget,
                    concurrency=in_flight,
                    worker_concurrency=math.ceil(running),
                    ttft_ms=ttft * 1e3,
                    tpot_ms=tpot * 1e3,
                    requests_per_s=served,
                    memory=memory,
                    prefill_prompts=prefill.prompts,
                    kv_transfer_ms=transfer * 1e3,
                )
            )
    return options


def pool_frontier(
    model: ModelSpec,
    cluster: Cluster,
    prefill: PrefillWorker,
    grid: list[DecodeWorker],
    workload: Workload,
    *,
    budget: int,
    pricer: StepPricer,
    counts: tuple[int, int] | None = None,
) -> list[PricedDeployment]:
    """:func:`pool_options` at every decode batch of ``grid`` (ascending, from ``pricer``'s layout), and for each
    pool sizing the largest batch between two grid points that its prefill pool still feeds within the targets.

    The grid steps by up to 50%, and the batch a sizing's prefill pool can feed within the TTFT target usually
    falls between two of its points: three prefill workers that feed 80 sequences but not 96 would otherwise
    run 64. Only that limit is refined. Where the next grid batch misses the TPOT target, the batch stays on
    the grid: a decode worker fed by other workers sees more than its step (new requests' KV arriving, their
    scheduling; AIConfigurator adds 8% to such a TPOT), which this model does not price, so it is not pushed to
    the last millisecond of the target.
    """
    options: list[PricedDeployment] = []
    fullest: dict[tuple[int, int], int] = {}  # (x, y) -> index in ``grid`` of the largest batch meeting the targets
    for index, decode in enumerate(grid):
        for option in pool_options(model, cluster, prefill, decode, workload, budget=budget, counts=counts,
                                   pricer=pricer):
            options.append(option)
            if option.meets_targets:
                fullest[(option.strategy.prefill.dp, option.strategy.decode.dp)] = index
    for sizing, index in fullest.items():
        if index + 1 >= len(grid) or not within("tpot", grid[index + 1].step_s * 1e3, workload.targets):
            continue

        def meets(sequences: int, sizing: tuple[int, int] = sizing) -> bool:
            worker = decode_worker(pricer, sequences, workload)
            found = pool_options(model, cluster, prefill, worker, workload, budget=budget, counts=sizing, pricer=pricer)
            options.extend(found)
            return any(o.meets_targets for o in found)

        largest_passing(grid[index].sequences, grid[index + 1].sequences, meets, relative=1 / 32)
    return options


def _decode_load(
    decode: DecodeWorker, rate: float, workload: Workload, pricer: StepPricer | None
) -> tuple[float, float]:
    """The sequences a decode worker runs when it takes ``rate`` requests/s, and its step: its own batch and step
    at full load, else (asked for a rate, with its layout's pricer) the batch whose steps finish requests at that
    rate (Little's law over the decode steps)."""
    if pricer is None or workload.rate is None or workload.osl <= 1:
        return float(decode.sequences), decode.step_s
    steps = workload.osl - 1
    load = load_for_rate(lambda b: b / (steps * pricer.tpot_s(b, 0)), rate, 1.0, float(decode.sequences))
    if load is None:
        return float(decode.sequences), decode.step_s
    return load, pricer.tpot_s(load, 0)
