"""The cost report of a DAG: schedule it, read off TTFT, TPOT, throughput, memory and the critical path."""

from __future__ import annotations

import math
from typing import Literal

from shardplan.contracts.dag import DAG, CommNode
from shardplan.contracts.dag_roles import phase_bounds
from shardplan.contracts.figures import make_figures
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.reports import CostReport, PathStep, PhaseCost, PricingReport
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.targets import misses
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.cost.calibration import calibration
from shardplan.tools.cost.memory import memory_reports
from shardplan.tools.cost.op_time import bytes_on_wire
from shardplan.tools.cost.pricing import Backend, Pricer, TwoPoolPricer, make_pricer
from shardplan.tools.cost.profiles import gpu_profile
from shardplan.tools.cost.schedule import Schedule, busy_overlap, schedule_dag

__all__ = [
    "estimate_cost",
    "throughput",
    "model_error_note",
    "stated_error_pct",
    "pricing_report",
]


def model_error_note(backend: str = "roofline") -> str:
    """The measured error of the backend that priced a report, as every report states it."""
    cal = calibration()
    err = cal.held_out_error[backend]
    grid = cal.grid_error[backend]
    return (
        f"model error ({backend} backend) against {err.rows} public measurements held out from the fit (median "
        f"|error|): TPOT {err.tpot_median_pct:.1f}%, TTFT {err.ttft_median_pct:.1f}%, tokens/s per GPU "
        f"{err.throughput_median_pct:.1f}%; against AIConfigurator's measured-data estimates on {grid.configs} "
        f"configurations: TTFT {grid.ttft_median_pct:.1f}%, TPOT {grid.tpot_median_pct:.1f}%"
    )


def stated_error_pct(backend: str, figure: Literal["tokens/s", "request latency"], osl: int = 2) -> float:
    """The backend's stated median |error| (the one :func:`model_error_note` states) on a ranked figure:
    tokens/s per GPU for ``tokens/s``; for ``request latency``, TPOT's (which dominates it) unless there is
    one output token only, then TTFT's.

    >>> stated_error_pct("roofline", "tokens/s") == calibration().held_out_error["roofline"].throughput_median_pct
    True
    """
    err = calibration().held_out_error[backend]
    if figure == "tokens/s":
        return err.throughput_median_pct
    return err.tpot_median_pct if osl > 1 else err.ttft_median_pct


def pricing_report(pricer: Pricer) -> PricingReport:
    """How ``pricer`` priced what it priced: backend shares, engine, data and the backend's error."""
    prefill, decode = pricer.measured_share("prefill"), pricer.measured_share("decode")
    backend: Literal["measured", "roofline"] = "measured" if max(prefill, decode) > 0 else "roofline"
    name, inherited_from = gpu_profile(pricer.cluster.gpu)
    profile = name if inherited_from is None else f"{name} ({inherited_from})"
    data = pricer.tables.label if pricer.tables is not None and backend == "measured" else None
    pool = pricer.decode_pool if isinstance(pricer, TwoPoolPricer) else None
    if pool is not None:
        # Two GPU types: each pool's profile and tables, prefill's first.
        other, other_from = gpu_profile(pool.cluster.gpu)
        profile = f"prefill {profile}, decode {other if other_from is None else f'{other} ({other_from})'}"
        if backend == "measured":
            tables = pool.tables.label if pool.tables is not None else f"none ({pool.why_roofline})"
            data = f"prefill {data or f'none ({pricer.why_roofline})'}; decode {tables}"
    return PricingReport(
        backend=backend,
        engine=pricer.engine,
        data=data,
        prefill_measured_share=round(prefill, 4),
        decode_measured_share=round(decode, 4),
        roofline_profile=profile,
        why_roofline=pricer.why_roofline,
        error=model_error_note(backend),
    )


def pricing_note(report: PricingReport) -> str:
    """One line saying how a report was priced."""
    if report.backend == "measured":
        return (
            f"priced from measured kernel data ({report.data}): {report.prefill_measured_share:.0%} of prefill and "
            f"{report.decode_measured_share:.0%} of decode node time; the rest by the roofline with the "
            f"{report.roofline_profile} profile"
        )
    return f"priced by the roofline with the {report.roofline_profile} profile: {report.why_roofline}"


def throughput(strategy: Strategy, workload: Workload, ttft_ms: float, tpot_ms: float) -> float:
    """Output tokens per second of the deployment.

    This is the static-batching view of one DAG: shared GPUs serve a batch by prefilling it (in rounds of
    ``prefill_batch`` prompts) and then decoding (osl - 1) steps; separate pools work as a two-stage
    pipeline whose slower stage sets the rate, every GPU of both pools counted by the caller. The
    deployment's steady state under continuous batching is :mod:`shardplan.tools.serving`'s.
    """
    batch, osl = workload.sequences, workload.osl
    if strategy.disaggregated:
        prefill_rate = workload.prefill_sequences / max(ttft_ms, 1e-9)
        requests_per_s = min(prefill_rate, batch / max(osl * tpot_ms, 1e-9)) * 1e3
        return requests_per_s * osl
    rounds = math.ceil(batch / workload.prefill_sequences)
    return batch * osl / max(rounds * ttft_ms + (osl - 1) * tpot_ms, 1e-9) * 1e3


def _phase_cost(dag: DAG, sched: Schedule, phase: str, first: str, last: str, cluster: Cluster) -> PhaseCost:
    lo, hi = sched.finish[first], sched.finish[last]
    span = max(hi - lo, 1e-12)
    nodes = [n for n in dag.nodes if n.phase == phase]
    comm = [n for n in nodes if isinstance(n, CommNode) and n.kind != "recv"]
    ranks = sorted(set(dag.meta.rank_pools[phase]))
    compute_busy = {
        r: sum(min(e, hi) - max(s, lo) for s, e in sched.compute_busy.get(r, []) if e > lo and s < hi) for r in ranks
    }
    comm_busy = {
        r: sum(min(e, hi) - max(s, lo) for s, e in sched.comm_busy.get(r, []) if e > lo and s < hi) for r in ranks
    }
    both = {r: busy_overlap(sched.compute_busy.get(r, []), sched.comm_busy.get(r, []), lo, hi) for r in ranks}
    overlapped = sum(both.values())
    total_comm = sum(comm_busy.values())
    idle = sum(span - compute_busy[r] - comm_busy[r] + both[r] for r in ranks)
    path = [nid for nid in sched.critical_path(last) if sched.finish[nid] > lo or nid == first]
    by_id = {n.id: n for n in nodes}
    steps = [
        PathStep(node=nid, kind=by_id[nid].kind, ms=(sched.finish[nid] - sched.start[nid]) * 1e3)
        for nid in path
        if nid in by_id
    ]
    exposed = sum(
        s.ms
        for s in steps
        if s.kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv", "kv_transfer")
    )
    return PhaseCost(
        latency_ms=span * 1e3,
        compute_ms=max(compute_busy.values(), default=0.0) * 1e3,
        communication_ms=max(comm_busy.values(), default=0.0) * 1e3,
        exposed_communication_ms=exposed,
        bubble_fraction=min(1.0, max(0.0, idle / (span * max(len(ranks), 1)))),
        overlap_fraction=overlapped / total_comm if total_comm > 0 else 0.0,
        communication_bytes=sum(bytes_on_wire(n) * len(n.ranks) for n in comm),
        collectives=len(comm),
        inter_node_collectives=sum(1 for n in comm if n.scope == "inter_node"),
        critical_path=steps,
    )


def estimate_cost(dag: DAG, cluster: Cluster | None = None, backend: Backend = "auto") -> CostReport:
    """Price ``dag``: simulate its schedule and account memory.

    Nodes are priced from NVIDIA's measured kernel tables for the DAG's GPU and engine where they
    cover them, by the GPU's roofline profile otherwise (``backend="roofline"``: everything).

    Raises:
        InputError: no cluster is given and the DAG does not carry one, or it lacks a step boundary that opens
            or closes prefill or decode step t (or has two of one).
    """
    cluster = cluster or dag.meta.cluster
    if cluster is None:
        raise InputError("the DAG carries no cluster", field="meta.cluster", fix="pass the cluster it runs on")
    meta = dag.meta
    pricer = make_pricer(
        cluster,
        meta.model,
        {"prefill": meta.strategy.prefill, "decode": meta.strategy.decode},
        meta.workload.engine,
        backend,
    )
    pricer.prepare(dag.nodes)
    sched = schedule_dag(dag, cluster, pricer)
    bounds = phase_bounds(dag.nodes)
    prefill = _phase_cost(dag, sched, "prefill", bounds.prefill_start, bounds.prefill_end, cluster)
    handoff = sched.finish[bounds.decode_start] - sched.finish[bounds.prefill_end]
    decode = _phase_cost(dag, sched, "decode", bounds.decode_start, bounds.decode_end, cluster)
    ttft = prefill.latency_ms + handoff * 1e3
    # A speculative decode step (verify, then draft) emits A + 1 tokens per sequence on average.
    tpot = decode.latency_ms / meta.workload.tokens_per_decode_step
    strategy, workload = meta.strategy, meta.workload
    tokens = throughput(strategy, workload, ttft, tpot)
    memory = memory_reports(meta.model, cluster.gpu, strategy, workload,
                            decode_gpu=cluster.gpu_of("decode") if cluster.mixed else None)
    worst = max(memory, key=lambda m: m.total_gb / m.capacity_gb)  # each pool against its own GPU's memory
    figures = make_figures(
        "static_batch",
        ttft_ms=ttft,
        tpot_ms=tpot,
        osl=workload.osl,
        tokens_per_s=tokens,
        requests_per_s=tokens / workload.osl,
        memory_per_gpu_gb=worst.total_gb,
        gpu_memory_gb=worst.capacity_gb,
        fits=all(m.fits for m in memory),
        gpus_used=strategy.gpus,
        gpu_budget=strategy.gpus,
    )
    pricing = pricing_report(pricer)
    notes = [
        pricing_note(pricing),
        "decode step priced at the average context (prompt + half the output)",
        (
            f"prefill admits {counted(workload.prefill_batch, 'prompt')} at a time (continuous batching); throughput "
            f"counts "
            f"{math.ceil(workload.sequences / workload.prefill_sequences)} prefill rounds per batch"
            if workload.prefill_batch
            else "prefill prices the whole batch arriving together (static batching; see --prefill-batch)"
        )
        + "; this is one batch of the DAG, not a serving steady state: `shardplan plan -s SPEC` prices the "
        "deployment under continuous batching",
        pricing.error,
    ]
    return CostReport(
        figures=figures,
        misses=misses(figures, workload.targets),
        memory=memory,
        prefill=prefill,
        decode=decode,
        kv_transfer_ms=handoff * 1e3 if strategy.disaggregated else 0.0,
        notes=notes,
        pricing=pricing,
    )
