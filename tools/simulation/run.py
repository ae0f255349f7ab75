"""Simulate a priced deployment end to end: its workers built as the serving model prices them, a request
stream drawn from the workload's traffic, the events run, the summary made.

The step pricers are those of :mod:`shardplan.tools.serving.aggregated` and :mod:`.disaggregated` (one
replica's layout, or one prefill and one decode worker's, on the plan's cluster, under its engine), at the
stream's mean lengths; the KV cache of each worker comes from the memory model (:mod:`.capacity`). A replica
admits, unless told otherwise (``max_num_seqs``), the plan's sequences in flight per replica under a closed
loop (as ``shardplan export`` launches it), and the engine's own default under open arrivals, where the plan's
sequences in flight are a mean, not a cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.simulation import Router, SimulationSummary
from shardplan.contracts.traffic import (
    ClosedLoop,
    FixedLength,
    GammaArrivals,
    LengthDist,
    LognormalLength,
    TraceArrivals,
    Traffic,
)
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.catalogs.models import check_drawn_context
from shardplan.tools.cost.pricing import Backend
from shardplan.tools.serving.disaggregated import kv_transfer_s, prefill_worker
from shardplan.tools.serving.placement import replica_strategy
from shardplan.tools.serving.steady import serving_point
from shardplan.tools.serving.steps import StepPricer
from shardplan.tools.simulation.capacity import BLOCK_TOKENS, engine_seq_cap, kv_blocks
from shardplan.tools.simulation.engine import Engine
from shardplan.tools.simulation.loop import Workers, run_events
from shardplan.tools.simulation.pools import PrefillPool
from shardplan.tools.simulation.prefix_cache import PrefixCache
from shardplan.tools.simulation.prefixes import SharedPrefixes, shared_prefixes
from shardplan.tools.simulation.ranks import RankGroup
from shardplan.tools.simulation.replica import Replica
from shardplan.tools.simulation.reservation import Reservation
from shardplan.tools.simulation.results import RunFacts, summarise
from shardplan.tools.simulation.scheduler_rules import SchedulerRules, scheduler_rules
from shardplan.tools.simulation.state import Requests
from shardplan.tools.traffic.stream import RequestStream, request_stream

__all__ = ["SimulationOptions", "Simulation", "simulate", "describe_traffic", "replayed_traffic"]


@dataclass(frozen=True)
class SimulationOptions:
    """How to run the deployment: the router, the engine's sequence cap, the pricing backend, the trace."""

    router: Router | None = None
    """None: round robin, or cache affinity when requests share prefixes and there are several replicas."""
    max_num_seqs: int | None = None
    """Running sequences per replica (or decode worker); None: the plan's per-worker concurrency under a closed loop,
    the engine's default under open arrivals."""
    backend: Backend = "auto"
    record_steps: bool = False
    """Keep every step for a trace (:mod:`.trace`)."""
    send_delay_s: float = 0.0
    """Closed loop: mean seconds between a client's completion and its next request reaching the engine, drawn
    per request (exponential, seeded by the run's seed); 0: at once. No source states this time; with identical
    requests a delay shorter than a step leaves the clients' lockstep as it is
    (``benchmarks/bench_closed_loop_jitter.py``), so it is off by default."""
    trtllm_chunked_context: bool = False
    """TensorRT-LLM with chunked prefill on (``enable_chunked_prefill``) whatever the prompts: they are split under the
    step budget as vLLM's are. Off, as trtllm-serve starts it: each prompt enters a step whole, unless the workload's
    prompts can outgrow the budget, which TensorRT-LLM refuses unchunked
    (:func:`~shardplan.tools.serving.engine_limits.trtllm_chunks_prompts`): chunked prefill is then on, as
    ``shardplan export`` sets it."""
    sglang_mixed_chunk: bool = False
    """SGLang with ``--enable-mixed-chunk``: its steps mix prompt chunks and decodes as vLLM's do. Off, SGLang's
    default: a step carries prompt chunks or decodes, prompts first (``Engine.prefill_first``)."""
    vllm_v0_unchunked: bool = False
    """vLLM's V0 engine with chunked prefill off, as it ran MLA models from v0.7.1 (vLLM pull #12642, "MLA is
    enabled; forcing chunked prefill and prefix caching to be disabled") until MLA's chunked prefill (pull #12639,
    February 2025): a step carries whole prompts or decodes, prompts first (``_schedule_default``), under a budget of
    ``max(max_model_len, 2048)`` tokens, which the workload's ``max_batched_tokens`` gives. For replaying runs of
    those releases; today's vLLM (V1) mixes chunks and decodes."""
    warm_prefixes: tuple[tuple[int, int], ...] = ()
    """Prefixes each scheduler's prefix cache (and each prefill worker's) holds when the run starts, as (prefix
    group, tokens), least recently used first, as many as its KV cache holds: what earlier runs on the same server
    left cached (SGLang's radix cache and vLLM's prefix caching keep finished requests' prompts until room is
    needed, and a benchmark client that does not flush the cache between runs finds them). Groups are the
    trace's, numbered in order of first appearance; they count only where the requests share prefixes (prefix
    groups with their prefix tokens, or a hit rate). Empty: a cold cache."""


@dataclass
class Simulation:
    """A finished run: its summary, the per-request record and the workers with what they measured."""

    summary: SimulationSummary
    requests: Requests
    workers: Workers


def _length_text(dist: LengthDist | None, fixed: int) -> str:
    if dist is None or isinstance(dist, FixedLength):
        return f"fixed {dist.tokens if dist else fixed}"
    if isinstance(dist, LognormalLength):
        return f"lognormal mean {dist.mean:g}, cv {dist.cv:g}"
    return f"uniform {dist.low}-{dist.high}"


def describe_traffic(traffic: Traffic, workload: Workload, rate: float | None, requests: int) -> str:
    """The replayed requests in words.

    >>> describe_traffic(Traffic(), Workload(isl=1024, osl=256), 2.5, 100)
    '100 requests, poisson at 2.5 requests/s, isl fixed 1024, osl fixed 256'
    """
    arrival = traffic.arrival
    if isinstance(arrival, ClosedLoop):
        how = f"closed loop of {counted(arrival.clients, 'client')}"
    else:
        how = arrival.kind + (f" (cv {arrival.cv:g})" if isinstance(arrival, GammaArrivals) else "")
        how += f" at {rate:.3g} requests/s" if rate is not None else ""
    if traffic.trace:
        lengths = f"lengths from trace {traffic.trace}"  # a trace's rows give the lengths (tools.traffic.stream)
    else:
        lengths = f"isl {_length_text(traffic.isl, workload.isl)}, osl {_length_text(traffic.osl, workload.osl)}"
    return f"{counted(requests, 'request', spec=',')}, {how}, {lengths}"


def replayed_traffic(
    workload: Workload, deployment: PricedDeployment, rate: float | None = None
) -> tuple[Workload, float | None, str | None]:
    """The workload a deployment is replayed under, the arrival rate, and a note when the arrivals were chosen.

    The workload's own arrival process runs at ``rate`` (default: the workload's rate). An open process with
    no rate at all was planned for a number of sequences in flight, not a rate: it becomes a closed loop of
    the deployment's sequences in flight, the load its figures were priced at (arrivals at the rate its
    steady state serves there would sit at the edge of what it can serve, where an open queue never settles).
    A closed loop needs no rate, nor do a trace's own timestamps (scaled to the rate where there is one).
    """
    traffic = workload.traffic or Traffic()
    if isinstance(traffic.arrival, ClosedLoop):
        return workload, None, None
    rate = rate if rate is not None else workload.rate
    if rate is not None or isinstance(traffic.arrival, TraceArrivals):
        return workload, rate, None  # a trace's timestamps, scaled to the rate where there is one
    clients = deployment.concurrency
    closed = traffic.model_copy(update={"arrival": ClosedLoop(kind="closed", clients=clients)})
    note = (f"no request rate: a closed loop of {counted(clients, 'client')}, the deployment's sequences in flight "
            f"(give a "
            "rate for open arrivals)")
    return workload.model_copy(update={"traffic": closed}), None, note


def _check_lengths(stream: RequestStream, blocks: int, role: str) -> None:
    """Every request must fit the KV cache of one worker on its own, or the engine could never run it."""
    longest = int((stream.isl + stream.osl - 1).max())
    if longest > blocks * BLOCK_TOKENS:
        raise InputError(
            f"a request of {counted(longest + 1, 'token')} needs more KV cache than one {role} holds "
            f"({blocks * BLOCK_TOKENS:,} "
            "tokens)", field="lengths", fix="cap the lengths (lognormal:...,high=N) or give the deployment more memory"
        )


def simulate(
    model: ModelSpec,
    cluster: Cluster,
    deployment: PricedDeployment,
    workload: Workload,
    *,
    requests: int,
    rate: float | None = None,
    seed: int = 0,
    options: SimulationOptions = SimulationOptions(),
    progress: Callable[[int], None] | None = None,
) -> Simulation:
    """Replay ``requests`` requests of ``workload``'s traffic (arriving at ``rate``, default the workload's) through
    ``deployment`` on ``cluster``, as the engine schedules them.

    Raises:
        InputError: static batching (the simulator runs continuous batching), an open loop without a rate, a
            worker whose KV cache holds no sequence or one shorter than a request, a request longer than the
            model's context (which the engine refuses).
    """
    if workload.batching != "continuous":
        raise InputError("the simulator runs continuous batching; this workload uses static batching",
                         field="batching", fix="plan with --batching continuous")
    traffic = workload.traffic or Traffic()
    stream = request_stream(workload, requests=requests, rate=rate, seed=seed)
    check_drawn_context(model, stream.isl, stream.osl)
    rate = None if stream.clients is not None else (rate if rate is not None else workload.rate)
    priced = workload.model_copy(update={"isl": max(1, round(stream.mean_isl)), "osl": max(1, round(stream.mean_osl))})
    strategy = deployment.strategy
    shares = shared_prefixes(stream, workload.prefix_hit)
    record = Requests.from_stream(stream, *((shares.prefix, shares.keeps) if shares else ()))
    if shares is not None:
        record.group = shares.group
    replica = replica_strategy(strategy)
    notes = [
        f"steps priced by the serving model's step pricer ({options.backend} backend) at the mean lengths, isl "
        f"{priced.isl} and osl {priced.osl}: decode attention at the mean context",
        _prefix_note(shares),
    ]
    host = cluster.pool("decode")  # the decode workers' (or replicas') GPU: a second type's on two pools
    if strategy.disaggregated:
        decode_layout = replica.decode
        blocks = kv_blocks(model, host.gpu, decode_layout, priced, "decode")
        role = "decode worker"
    else:
        decode_layout = strategy.decode.model_copy(update={"dp": 1})
        blocks = kv_blocks(model, host.gpu, decode_layout, priced, "shared", decode_layout)
        role = "replica"
    if blocks < 1:
        raise InputError(f"one {role} of {decode_layout.to_spec()} holds no sequence of {priced.isl}+{priced.osl} "
                         "tokens in its KV cache", field="plan", fix="simulate a plan whose deployment fits")
    ranks = decode_layout.adp
    # A closed loop or fixed concurrency runs with the plan's cap, as exported; open arrivals meet the engine's own,
    # which each attention data-parallel rank's scheduler has.
    asked = options.max_num_seqs or (
        deployment.worker_concurrency if stream.clients is not None
        else ranks * engine_seq_cap(workload.engine, host.gpu)
    )
    # Each rank's scheduler admits its share rounded up (at least one), as ``shardplan export`` sets max_num_seqs:
    # the replica's cap is what the ranks admit together, the cap asked for rounded up to a multiple of the ranks.
    rules = scheduler_rules(priced, int(stream.isl.max()), -(-asked // ranks), strategy.disaggregated,
                            trtllm_chunked_context=options.trtllm_chunked_context,
                            vllm_v0_unchunked=options.vllm_v0_unchunked, sglang_mixed_chunk=options.sglang_mixed_chunk)
    seqs = rules.seqs_per_rank * ranks
    _check_lengths(stream, blocks // ranks, role if ranks == 1 else f"attention data-parallel rank of a {role}")
    pricer = StepPricer.for_workload(model, host, decode_layout, priced, options.backend)
    warm = options.warm_prefixes if shares is not None else ()
    engines = _replicas(record, pricer, ranks, blocks, seqs, priced.max_batched_tokens, strategy.decode.dp,
                        options.record_steps, rules, shares is not None, warm)
    notes += rules.notes
    if warm:
        notes.append(f"the prefix caches start warm: {counted(len(warm), 'prefix', 'prefixes', spec=',')} of "
                     f"{counted(sum(tokens for _, tokens in warm), 'token', spec=',')} left by earlier runs, as many "
                     "as each KV cache holds")
    if priced.speculation is not None:
        spec = priced.speculation
        notes.append(f"speculative decoding: each step verifies {spec.verify_tokens} positions per decoding sequence "
                     f"(that many tokens of the step budget) and adds {spec.tokens_per_step:g} tokens to it on "
                     "average, every sequence of a step the same whole number, a fractional carry making them average "
                     "the request's acceptance (no acceptance distribution is assumed)")
    notes.append(f"KV cache of one {role}: {counted(blocks, 'block', spec=',')} of {counted(BLOCK_TOKENS, 'token')} "
                 f"({counted(blocks * BLOCK_TOKENS // (priced.isl + priced.osl), 'sequence', spec=',')} of "
                 f"{priced.isl + priced.osl} "
                 f"tokens); at most {seqs} running sequences")
    if ranks > 1:
        notes.append(f"{ranks} attention data-parallel ranks per {role}, each its own scheduler ({blocks // ranks:,} "
                     f"blocks, at most {seqs // ranks} running sequences, "
                     f"{counted(priced.max_batched_tokens, 'token', spec=',')} a "
                     "step), requests to the rank with the lowest 4 x waiting + running; every step lasts as long as "
                     "the slowest rank's own part plus the MoE layers on all the ranks' tokens")
    router = options.router or ("cache_affinity" if shares is not None and len(engines) > 1 else "round_robin")
    if router == "cache_affinity" and not strategy.disaggregated:
        notes.append("requests routed by cache affinity: to the replica holding most of their prefix unless the load "
                     "is out of balance (SGLang's cache-aware routing, its gateway's defaults)")
    workers = Workers(engines, router)
    if strategy.disaggregated:
        workers = _split_workers(model, cluster, deployment, priced, stream, record, engines, options, notes,
                                 shares is not None)
    delays = None
    if options.send_delay_s > 0 and stream.clients is not None:
        # A stream of its own, so the requests drawn are those of the run without delays.
        delays = np.random.default_rng([seed, _SEND_DELAY_STREAM]).exponential(options.send_delay_s, len(record))
        notes.append(f"each client's next request reaches the engine {options.send_delay_s * 1e3:g} ms after its "
                     "last completion on average (exponential; not counted in TTFT)")
    end = run_events(record, workers, stream.clients, progress, delays)
    facts = RunFacts(
        analytic=deployment.steady_state,
        deployment=strategy.to_spec(),
        workload=describe_traffic(traffic, workload, rate, requests),
        traffic=traffic,
        rate=rate,
        seed=seed,
        router="least_outstanding" if strategy.disaggregated else router,
        max_num_seqs=seqs,
        kv_blocks=blocks,
        block_tokens=BLOCK_TOKENS,
        # The rate judged is the one offered: a queue that keeps up serves it, one that grows misses it.
        targets=workload.targets.model_copy(update={"rate": rate}),
        notes=notes,
        capacity_rps=None if strategy.disaggregated else _capacity_rps(
            pricer, strategy.decode.dp, min(seqs, blocks * BLOCK_TOKENS // (priced.isl + priced.osl)), priced),
    )
    return Simulation(summarise(record, workers, end, facts), record, workers)


def _capacity_rps(pricer: StepPricer, replicas: int, running: int, priced: Workload) -> float | None:
    """Requests/s the replicas serve with ``running`` sequences each (a closed population: the full load the
    steady state prices), the most they serve; None when no steady state holds that many."""
    point = serving_point(pricer, max(1, running), priced.model_copy(update={"rate": None, "traffic": None}))
    return None if point is None else replicas * point.requests_per_s


_SEND_DELAY_STREAM = 1
"""Second entry of the seed of the send delays' generator (the requests' own is the bare seed)."""


def _prefix_note(shares: SharedPrefixes | None) -> str:
    """How the run's requests share prefixes, in words."""
    if shares is None:
        return "no prefix caching: requests sharing a prefix recompute it"
    return (f"prefix caching, an LRU cache of {BLOCK_TOKENS}-token blocks per scheduler (and per prefill worker): "
            f"{shares.rule}; a request finding its group's prefix cached computes the rest of its prompt, shared "
            "blocks are held once, pinned while running sequences use them")


def _replicas(
    record: Requests,
    pricer: StepPricer,
    ranks: int,
    blocks: int,
    seqs: int,
    budget: int,
    count: int,
    record_steps: bool,
    rules: SchedulerRules,
    prefix: bool = False,
    warm: tuple[tuple[int, int], ...] = (),
) -> list[Replica]:
    """``count`` replicas (or decode workers) of ``blocks`` KV-cache blocks and ``seqs`` running sequences each: one
    scheduler each, or with attention data parallelism (``ranks > 1``) a group of rank schedulers, each with its
    share of the blocks and of the sequences (``max_num_seqs`` counts per rank, as ``shardplan export`` sets it)
    and a whole token budget of its own, each run by the engine's ``rules`` (:mod:`.scheduler_rules`; SGLang's
    reservation one per scheduler). ``prefix``: each scheduler keeps a prefix cache in its KV cache, holding the
    ``warm`` prefixes at the start."""

    def engine(blocks: int, seqs: int, record_steps: bool = False) -> Engine:
        return Engine(record, pricer, blocks, seqs, budget, BLOCK_TOKENS, record_steps,
                      chunked_prefill=rules.chunked, reserve_whole=rules.reserve_whole, emit=pricer.tokens_per_step,
                      verify=pricer.verify_tokens, prefix=_prefix_cache(warm, blocks) if prefix else None,
                      prefill_first=rules.prefill_first, reservation=Reservation() if rules.reservation else None)

    if ranks == 1:
        return [engine(blocks, seqs, record_steps) for _ in range(count)]
    return [
        RankGroup([engine(blocks // ranks, -(-seqs // ranks)) for _ in range(ranks)], pricer, record_steps)
        for _ in range(count)
    ]


def _prefix_cache(warm: tuple[tuple[int, int], ...], blocks: int) -> PrefixCache:
    """A scheduler's prefix cache of ``blocks`` KV-cache blocks, holding what it can of the ``warm`` prefixes."""
    cache = PrefixCache(BLOCK_TOKENS)
    cache.warm(warm, blocks)
    return cache


def _split_workers(
    model: ModelSpec,
    cluster: Cluster,
    deployment: PricedDeployment,
    priced: Workload,
    stream: RequestStream,
    record: Requests,
    engines: list[Replica],
    options: SimulationOptions,
    notes: list[str],
    prefix: bool = False,
) -> Workers:
    """The prefill pool and the KV transfer of each request in front of the decode workers ``engines``."""
    strategy = deployment.strategy
    replica = replica_strategy(strategy)
    host = cluster.pool("prefill")
    pricer = StepPricer.for_workload(model, host, replica.prefill, priced, options.backend)
    worker = prefill_worker(model, host, replica.prefill, priced, pricer)
    if worker is None:
        raise InputError(f"a prefill worker of {replica.prefill.to_spec()} does not fit a step of prompts",
                         field="plan", fix="simulate a plan whose deployment fits")
    groups = replica.prefill.adp * replica.prefill.mb
    cache_blocks = kv_blocks(model, host.gpu, replica.prefill, priced, "decode") if prefix else 0
    caches = ([_prefix_cache(options.warm_prefixes, cache_blocks) for _ in range(strategy.prefill.dp)]
              if prefix else None)
    pool = PrefillPool(record, pricer, strategy.prefill.dp, worker.prompts, priced.max_batched_tokens * groups,
                       options.record_steps, caches, cache_blocks)
    same_node = strategy.gpus <= cluster.gpus_per_node and not cluster.mixed
    # Only the KV the decode worker lacks moves: its own prefix cache holds the request's shared prefix.
    moved = stream.isl - np.minimum(record.prefix, stream.isl - 1)
    lengths, where = np.unique(moved, return_inverse=True)
    moves = np.array([kv_transfer_s(model, cluster, replica.prefill, replica.decode, int(n), same_node)
                      for n in lengths.tolist()])
    mean = kv_transfer_s(model, cluster, replica.prefill, replica.decode, priced.prefill_tokens, same_node)
    notes.append(f"{counted(strategy.prefill.dp, 'prefill worker')}, one queue, steps of up to {worker.prompts} whole "
                 f"prompts; "
                 f"KV transfer {mean * 1e3:.2f} ms at the mean prompt, in TTFT, without link contention; each request "
                 "to the decode worker with the fewest outstanding")
    return Workers(engines, "least_outstanding", pool, moves[where])
