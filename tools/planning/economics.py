"""Dollars and energy of a deployment, from its figures, the GPU-hour price and the GPUs' board power.

Dollars: ``$/h = GPUs used x price per GPU-hour``; a million output tokens cost ``$/h / (output tokens/s x 3600)
x 1e6``, with the prompts' share of the hour included (the figure that compares deployments). To price input and
output apart, as API price sheets do, the hour is split between prompts and generation by the share of GPU time
each takes:

- split deployments (prefill and decode pools): the prefill pool's share of the GPUs, which is exactly the
  share of the rented hours spent on prompts; on two GPU types (prefill on one, decode on the other) each pool's
  GPUs are rented at their own price, and the prompts' share is the prefill pool's share of the dollars;
- aggregated deployments (prompts and generation share the GPUs): prefill's share of one request's time in the
  cost report's static batch of the DAG, ``TTFT / (TTFT + (osl - 1) x TPOT)``: the time its GPUs spend on the
  batch's prompts against the time they spend generating its tokens.

Energy: no public source gives the idle or partial-load power of these boards under inference, so every GPU is
taken at its board power (TDP, from the GPU catalog) all the time (each pool's GPUs at their own, on two types).
That is an upper bound: decode is memory-bound and draws less. Joules per output token are that power over the
output tokens the deployment serves per second, so a deployment loaded below its capacity (a rate it serves with
room to spare) shows more joules per token.
"""

from __future__ import annotations

from shardplan.contracts.economics import Dollars, Economics, Energy, GpuPrice
from shardplan.contracts.figures import Figures
from shardplan.contracts.hardware import GPU
from shardplan.contracts.plan import Deployment
from shardplan.contracts.reports import CostReport
from shardplan.contracts.workload import Workload
from shardplan.text import agreeing, counted
from shardplan.tools.catalogs.prices import price_for

__all__ = ["prefill_share", "dollars_of", "energy_of", "economics_of"]

_SECONDS_PER_HOUR = 3600.0
_PER_MILLION = 1e6


def prefill_share(deployment: Deployment, dag_cost: CostReport | None) -> tuple[float, str]:
    """The share of the deployment's GPU time spent on prompts, and how it was obtained (the module's rule).

    Returns (0.0, reason) when neither the pools nor a cost report say it.
    """
    prefill_gpus = sum(p.workers * p.gpus_per_worker for p in deployment.pools if p.role == "prefill")
    if prefill_gpus:
        return (prefill_gpus / deployment.gpus_used,
                f"GPU-hours split by pool: {prefill_gpus} of {counted(deployment.gpus_used, 'GPU')} "
                f"{agreeing(prefill_gpus, 'runs', 'run')} prefill")
    if dag_cost is not None and dag_cost.figures.e2e_ms > 0:
        f = dag_cost.figures
        share = f.ttft_ms / f.e2e_ms
        return (share, f"GPU time split by phase in one static batch of the DAG: prefill {f.ttft_ms:.1f} ms of a "
                       f"{f.e2e_ms:.1f} ms request (TTFT / (TTFT + (osl - 1) x TPOT))")
    return 0.0, "no cost report to split the GPU time by: all of it charged to output tokens"


def _pool_gpus(deployment: Deployment) -> tuple[int, int]:
    """GPUs of the prefill pool and of the rest (decode pool, or replicas) of a deployment."""
    prefill = sum(p.workers * p.gpus_per_worker for p in deployment.pools if p.role == "prefill")
    return prefill, deployment.gpus_used - prefill


def dollars_of(price: GpuPrice, figures: Figures, workload: Workload, deployment: Deployment,
               dag_cost: CostReport | None, decode_price: GpuPrice | None = None) -> Dollars:
    """The deployment's cost at ``price`` (the module's rule); with ``decode_price``, split pools on two GPU types,
    the prefill pool's GPUs at ``price`` and the decode pool's at ``decode_price``.

    >>> from shardplan.contracts.figures import make_figures
    >>> from shardplan.contracts.plan import WorkerPool
    >>> f = make_figures("steady_state", ttft_ms=100, tpot_ms=20, osl=256, tokens_per_s=1000, requests_per_s=1000/256,
    ...                  memory_per_gpu_gb=60, gpu_memory_gb=80, fits=True, gpus_used=4, gpu_budget=4)
    >>> pools = [WorkerPool(role="prefill", workers=1, layout="tp=1", gpus_per_worker=1, concurrency_per_worker=1,
    ...                     max_concurrency_per_worker=1, memory_per_gpu_gb=1, weights_gb=1, kv_cache_gb=0,
    ...                     capacity_gb=80)]
    >>> d = Deployment(concurrency=8, replicas=3, gpus_used=4, idle_gpus=0, batching="continuous", gpu_budget=4,
    ...                pools=pools)
    >>> w = Workload(isl=1024, osl=256)
    >>> usd = dollars_of(GpuPrice(gpu="H100", usd_per_gpu_hour=2.0, source="test"), f, w, d, None)
    >>> usd.usd_per_hour, round(usd.usd_per_million_output_tokens, 3), usd.prefill_share
    (8.0, 2.222, 0.25)
    """
    per_hour = figures.gpus_used * price.usd_per_gpu_hour
    share, basis = prefill_share(deployment, dag_cost)
    if decode_price is not None:
        # Two GPU types: each pool's GPUs at its own price, and the prompts' share is the prefill pool's dollars.
        prefill_gpus, decode_gpus = _pool_gpus(deployment)
        prefill_usd, decode_usd = prefill_gpus * price.usd_per_gpu_hour, decode_gpus * decode_price.usd_per_gpu_hour
        per_hour = prefill_usd + decode_usd
        share = prefill_usd / per_hour if per_hour > 0 else 0.0
        basis = (f"dollars split by pool: {prefill_gpus} x {price.gpu} run prefill (${prefill_usd:,.2f}/h), "
                 f"{decode_gpus} x {decode_price.gpu} decode (${decode_usd:,.2f}/h)")
    output_per_hour = figures.tokens_per_s * _SECONDS_PER_HOUR
    input_per_hour = figures.requests_per_s * workload.isl * _SECONDS_PER_HOUR

    def per_million(dollars: float, tokens: float) -> float:
        return dollars / tokens * _PER_MILLION if tokens > 0 else 0.0

    return Dollars(
        price=price,
        decode_price=decode_price,
        gpus=figures.gpus_used,
        usd_per_hour=per_hour,
        usd_per_million_output_tokens=per_million(per_hour, output_per_hour),
        usd_per_million_input_tokens=per_million(per_hour * share, input_per_hour),
        usd_per_million_output_tokens_decode=per_million(per_hour * (1 - share), output_per_hour),
        prefill_share=share,
        split_basis=basis,
    )


def energy_of(gpu: GPU, figures: Figures, decode_gpu: GPU | None = None,
              deployment: Deployment | None = None) -> Energy | None:
    """Power and joules per output token of the deployment's GPUs at their board power (the module's rule);
    with ``decode_gpu`` (and the ``deployment`` whose pools say how many GPUs each has), the decode pool's GPUs at
    theirs. None when a GPU has no board power in its description."""
    if not gpu.tdp_w or decode_gpu is not None and not decode_gpu.tdp_w:
        return None
    watts = figures.gpus_used * gpu.tdp_w
    powered = f"{figures.gpus_used} x {gpu.name} at its {gpu.tdp_w:g} W board power"
    if decode_gpu is not None and decode_gpu.tdp_w and deployment is not None:
        prefill_gpus, decode_gpus = _pool_gpus(deployment)
        watts = prefill_gpus * gpu.tdp_w + decode_gpus * decode_gpu.tdp_w
        powered = (f"{prefill_gpus} x {gpu.name} at {gpu.tdp_w:g} W and {decode_gpus} x {decode_gpu.name} at "
                   f"{decode_gpu.tdp_w:g} W board power")
    return Energy(
        power_kw=watts / 1e3,
        joules_per_output_token=watts / figures.tokens_per_s if figures.tokens_per_s > 0 else 0.0,
        board_power_w=gpu.tdp_w,
        upper_bound=True,
        basis=f"upper bound: {powered} (TDP, GPU catalog) "
              f"all the time, over the {figures.tokens_per_s:,.0f} output tokens/s served; no public idle or "
              "partial-load power is used, and host CPUs, network and cooling are left out",
    )


def economics_of(gpu: GPU, workload: Workload, figures: Figures | None, deployment: Deployment | None,
                 dag_cost: CostReport | None, price: GpuPrice | None, *, decode_gpu: GPU | None = None,
                 decode_price: GpuPrice | None = None) -> Economics | None:
    """Dollars and energy of a plan's deployment (None when it has none); ``price`` is the request's, else the
    bundled list price of the GPU is used. ``decode_gpu``: the decode pool runs on that GPU type, at
    ``decode_price`` (else its bundled list price)."""
    if figures is None or deployment is None:
        return None
    notes = []
    given = {gpu.name: price}
    if decode_gpu is not None:
        given[decode_gpu.name] = decode_price if decode_gpu.name != gpu.name else price
    prices = {name: found or price_for(name) for name, found in given.items()}
    for name, found in prices.items():
        if found is None:
            notes.append(f"no price for {name}: give one with --gpu-price {name}=DOLLARS (per GPU-hour)")
    energy = energy_of(gpu, figures, decode_gpu, deployment)
    if energy is None:
        missing = [g.name for g in (gpu, decode_gpu) if g is not None and not g.tdp_w]
        notes.append(f"no board power for {', '.join(missing)}: add tdp_w to its description for an energy estimate")
    first = prices[gpu.name]
    second = prices[decode_gpu.name] if decode_gpu is not None else None
    dollars = None
    if first is not None and (decode_gpu is None or second is not None):
        dollars = dollars_of(first, figures, workload, deployment, dag_cost, second)
    return Economics(dollars=dollars, energy=energy, notes=notes)
