"""What prefix caching did to a plan's deployment: the hit rate used, the prefill work and TTFT it saved, the KV
it shares, the concurrency that memory now allows and, for split pools serving a rate, the prefill GPUs saved.

Every figure is the serving model's, priced twice: with the request's ``prefix_hit`` and with none, on the same
layouts. A split deployment at a rate is sized by its prefill pool when the decode pool has room to spare; the
prefill GPUs the same rate needs without the cache are the fewest prefill workers of the same layout that serve it
under the targets, beside the same decode workers.
"""

from __future__ import annotations

from typing import Literal

from shardplan.contracts.feature_effects import PrefixCacheEffect
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Workload
from shardplan.text import agreeing, counted
from shardplan.tools.cost.memory import GB, memory_report, shared_prefix_kv
from shardplan.tools.search.ranking import ranked
from shardplan.tools.serving.deployments import given_deployment
from shardplan.tools.serving.placement import replica_strategy
from shardplan.tools.serving.steps import StepPricer

__all__ = ["prefix_cache_effect", "prefill_time_saved", "worker_capacity", "prefix_cache_sentence"]

_POLICY_NOTES = (
    "one shared prefix per replica (per decode worker when split) is assumed: each prompt's first "
    "{cached} tokens are that prefix, held once in the KV cache for every sequence sharing it",
    "prefill computes the {computed} uncached tokens of each prompt (the step budget counts only those); their "
    "attention still reads the cached keys and values, so a prompt's attention is 1 - h^2 of a whole one's",
)
_SPLIT_NOTE = (
    "a split deployment moves only the KV of the uncached tokens to its decode worker, whose own prefix cache holds "
    "the shared prefix (vLLM's NIXL connector pulls the prompt less the tokens its cache already computed)"
)


def prefill_time_saved(model: ModelSpec, cluster: Cluster, layout: PhaseStrategy, workload: Workload) -> float:
    """Share of one prompt's prefill time the prefix cache saves on ``layout``: one prompt per attention group
    prefilled with the workload's cached prefix against without it (0 without prefix caching).

    Attention still reads the cached tokens, so the saving is below the hit rate for long prompts, whose
    attention is a large share of prefill."""
    if workload.prefix_hit <= 0:
        return 0.0
    prompts = layout.adp * layout.mb
    cached = StepPricer.for_workload(model, cluster, layout, workload).prefill_s(prompts)
    plain = StepPricer.for_workload(model, cluster, layout, _without_cache(workload)).prefill_s(prompts)
    return min(max(1.0 - cached / plain, 0.0), 1.0) if plain > 0 else 0.0


def worker_capacity(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> int:
    """Sequences one replica (or one decode worker, split) of ``strategy`` holds in memory at the workload's
    lengths, its shared prefix held once."""
    replica = replica_strategy(strategy)
    layout = replica.decode.model_copy(update={"dp": 1})
    pool: Literal["decode", "shared"] = "decode" if strategy.disaggregated else "shared"
    also = None if strategy.disaggregated else replica.prefill
    tokens = workload.isl + workload.osl
    return memory_report(model, cluster.gpu, layout, workload, pool, tokens, also).max_batch


def prefix_cache_effect(
    model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload, option: PricedDeployment | None
) -> PrefixCacheEffect | None:
    """The effect of the workload's prefix cache on the deployment ``strategy`` (priced as ``option``); None
    without prefix caching. Without a ``prefix_hit`` a trace's prefix groups still share prefixes in a simulated
    run: its measured hit rate is then the effect's (source ``simulation``)."""
    if workload.prefix_hit <= 0:
        run = option.simulation if option is not None else None
        if option is None or run is None or not run.prefix_hit:
            return None
        return _simulated_effect(model, cluster, strategy, workload, option, run.prefix_hit)
    plain = _without_cache(workload)
    replica = replica_strategy(strategy)
    decode = replica.decode.model_copy(update={"dp": 1})
    cached_tokens = workload.isl - workload.prefill_tokens
    notes = [n.format(cached=cached_tokens, computed=workload.prefill_tokens) for n in _POLICY_NOTES]
    if strategy.disaggregated:
        notes.append(_SPLIT_NOTE)
    same = _best(model, cluster, strategy, plain)
    without = same
    prefill_gpus_without = None
    if strategy.disaggregated and workload.rate is not None:
        resized = _prefill_pool_without(model, cluster, strategy, plain)
        if resized is not None:
            prefill_gpus_without = resized.strategy.prefill.dp * replica.prefill.gpus
            if same is None or not same.meets_targets:
                without = resized
                notes.append(
                    f"without the cache {counted(strategy.prefill.dp, 'prefill worker')} "
                    f"{agreeing(strategy.prefill.dp, 'does', 'do')} not serve "
                    f"{workload.rate:g} "
                    f"requests/s under the targets: ttft_without_ms is that of {resized.strategy.prefill.dp}"
                )
        else:
            notes.append(
                f"without the cache no prefill pool of {replica.prefill.to_spec()} workers beside "
                f"{counted(strategy.decode.dp, 'decode worker')} on {counted(cluster.world_size, 'GPU')} serves "
                f"{workload.rate:g} requests/s under the targets"
            )
    run = option.simulation if option is not None else None
    if run is not None and run.prefix_hit is not None:
        notes.append(f"the simulated run's prefix caches held {run.prefix_hit:.1%} of the prompt tokens it replayed")
    return PrefixCacheEffect(
        hit=workload.prefix_hit,
        source="request",
        prefill_tokens_computed=float(workload.prefill_tokens),
        prefill_work_saved=prefill_time_saved(model, cluster, replica.prefill.model_copy(update={"dp": 1}), workload),
        ttft_without_ms=without.figures.ttft_ms if without is not None else 0.0,
        shared_kv_gb=shared_prefix_kv(model, decode, workload, workload.isl + workload.osl)[1] / GB,
        max_concurrency=worker_capacity(model, cluster, strategy, workload),
        max_concurrency_without=worker_capacity(model, cluster, strategy, plain),
        prefill_gpus_without=prefill_gpus_without,
        notes=notes,
    )


def prefix_cache_sentence(effect: PrefixCacheEffect, strategy: Strategy, ttft_ms: float) -> str:
    """The explanation's sentences on prefix caching: what it saved and, for a split deployment that needs fewer
    prefill GPUs for its rate, why.

    >>> e = PrefixCacheEffect(hit=0.5, source="request", prefill_tokens_computed=4096, prefill_work_saved=0.4,
    ...     ttft_without_ms=300, shared_kv_gb=0.7, max_concurrency=120, max_concurrency_without=80)
    >>> prefix_cache_sentence(e, Strategy(prefill=PhaseStrategy(), decode=PhaseStrategy()), 200.0)[:60]
    'Prefix caching: 50% of each prompt is found in the cache (th'
    """
    computed = int(effect.prefill_tokens_computed)
    text = (
        f"Prefix caching: {effect.hit:.0%} of each prompt is found in the cache (the request's prefix hit rate), so "
        f"prefill computes {counted(computed, 'token', spec=',')} per prompt and takes "
        f"{effect.prefill_work_saved:.0%} less time (its "
        f"attention still reads the cached tokens); TTFT {ttft_ms:,.1f} ms against {effect.ttft_without_ms:,.1f} ms "
        f"without it."
    )
    if effect.max_concurrency is not None and effect.max_concurrency_without is not None:
        where = "decode worker" if strategy.disaggregated else "replica"
        text += (
            f" The shared prefix's KV ({effect.shared_kv_gb:.2f} GB per GPU) is held once, so a {where} holds "
            f"{counted(effect.max_concurrency, 'sequence')} instead of {effect.max_concurrency_without}."
        )
    if effect.prefill_gpus_without is not None:
        gpus = strategy.prefill.gpus
        if effect.prefill_gpus_without > gpus:
            text += (
                f" The prefill pool bounds this split deployment at its rate, and each prompt now costs "
                f"{1 - effect.prefill_work_saved:.0%} of its prefill time: {counted(gpus, 'prefill GPU')} "
                f"{agreeing(gpus, 'serves', 'serve')} the "
                f"rate "
                f"where {effect.prefill_gpus_without} were needed without the cache."
            )
        else:
            text += (f" The prefill pool needs {counted(gpus, 'GPU')} either way: the decode pool or the targets "
                     "size it.")
    return text


def _simulated_effect(
    model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload, option: PricedDeployment, hit: float
) -> PrefixCacheEffect:
    """The effect of the prefixes a trace's groups share, as a simulated run of the deployment measured them."""
    at = workload.model_copy(update={"prefix_hit": min(hit, 0.999)})
    prefill = replica_strategy(strategy).prefill.model_copy(update={"dp": 1})
    return PrefixCacheEffect(
        hit=hit,
        source="simulation",
        prefill_tokens_computed=float(at.prefill_tokens),
        prefill_work_saved=prefill_time_saved(model, cluster, prefill, at),
        ttft_without_ms=option.steady_state.ttft_ms,
        shared_kv_gb=0.0,
        notes=[
            "the trace's prefix groups share prefixes in the simulated run only, whose LRU prefix caches held this "
            "share of the prompt tokens; the steady state prices no prefix caching (ttft_without_ms is its TTFT), "
            "and the groups' cached blocks are the simulated caches', not a figure of the memory model "
            "(shared_kv_gb 0)",
        ],
    )


def _without_cache(workload: Workload) -> Workload:
    return workload.model_copy(update={"prefix_hit": 0.0})


def _best(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> PricedDeployment | None:
    options = ranked(given_deployment(model, cluster, strategy, workload), workload)
    return options[0] if options else None


def _prefill_pool_without(
    model: ModelSpec, cluster: Cluster, strategy: Strategy, plain: Workload
) -> PricedDeployment | None:
    """The split deployment with the fewest prefill workers of the same layout, from the chosen count up and beside
    the same decode workers, that serves the rate under the targets without prefix caching; None when none fits
    the budget."""
    per_worker = replica_strategy(strategy).prefill.gpus
    workers = strategy.prefill.dp
    while strategy.gpus + (workers - strategy.prefill.dp) * per_worker <= cluster.world_size:
        resized = strategy.model_copy(update={"prefill": strategy.prefill.model_copy(update={"dp": workers})})
        found = _best(model, cluster, resized, plain)
        if found is not None and found.meets_targets:
            return found
        workers += 1
    return None
