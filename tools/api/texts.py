"""Short human summaries of capability results: the text a tool result carries next to its structured data.

A client that shows or reads only the text still gets the answer (strategy, figures, verdict, why); the
structured content holds the same facts as fields, and the full result is one call or one resource away.
Small results with no summary of their own (catalogs, rules, knowledge sections) read as compact JSON.

>>> summary_text("get_rule", {"id": "DEC-1"})
'{"id":"DEC-1"}'
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from shardplan.contracts.figures import headline
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.targets import miss_texts
from shardplan.text import counted
from shardplan.tools.api.compact import PlanSummary
from shardplan.tools.api.results import (
    BuildSummary,
    CandidateBrief,
    CostSummary,
    DagCheck,
    SearchSummary,
    StrategyCheck,
)

__all__ = ["summary_text"]


def _simulated_line(run: SimulationSummary) -> str:
    """A simulated run in one line: percentiles of TTFT and TPOT, goodput, and what was replayed."""
    ttft, tpot = run.figures.percentiles["ttft"], run.figures.percentiles["tpot"]
    return (f"simulated ({run.workload}): TTFT P50/P90/P99 {ttft.p50_ms:,.0f}/{ttft.p90_ms:,.0f}/{ttft.p99_ms:,.0f} "
            f"ms, TPOT {tpot.p50_ms:.1f}/{tpot.p90_ms:.1f}/{tpot.p99_ms:.1f} ms, goodput {run.goodput:.1%}")


def _plan(p: PlanSummary) -> str:
    gpu = p.request.gpu_words
    if p.status == "infeasible" or p.figures is None:
        fewest = f" (at least {counted(p.min_gpus, 'GPU')} would fit)" if p.min_gpus else ""
        return f"plan infeasible: {p.request.model} on {gpu}{fewest}\n{p.explanation}"
    lines = [f"plan {p.status}: {p.request.model} as {p.strategy} on {gpu}"]
    if p.deployment is not None:
        d = p.deployment
        lines[0] += (f", {counted(d.gpus_used, 'GPU')} used, {counted(d.concurrency, 'sequence')} in flight, "
                     f"{p.figures.requests_per_s:.2f} requests/s")
    lines.append(headline(p.figures))
    if p.simulation is not None:
        lines.append(_simulated_line(p.simulation))
    if p.misses:
        lines.append("missed: " + "; ".join(miss_texts(p.misses)))
    if p.validation is not None:
        v = p.validation
        failing = ", ".join(v.failing_rules) or "none"
        lines.append(f"validation: {'valid' if v.valid else 'INVALID'} ({counted(v.rules_checked_total, 'rule')}, "
                     f"{counted(v.nodes, 'node')}); failing rules: {failing}")
    if p.alternatives:
        shown = "; ".join(f"{a.strategy} ({a.why_not})" for a in p.alternatives)
        lines.append(f"runners-up ({len(p.alternatives)} of {p.alternatives_total}): {shown}")
    lines.append(p.explanation)
    return "\n".join(lines)


def _cost(c: CostSummary) -> str:
    lines = [headline(c.figures),
             f"prefill {c.prefill.latency_ms:.1f} ms ({c.prefill.exposed_communication_ms:.1f} ms exposed "
             f"communication); decode step {c.decode.latency_ms:.2f} ms ({c.decode.collectives} collectives, "
             f"{c.decode.inter_node_collectives} across nodes)",
             "targets met" if c.meets_targets else "missed: " + "; ".join(miss_texts(c.misses))]
    if c.pricing is not None:
        lines.append(f"priced by the {c.pricing.backend} backend ({c.pricing.engine})")
    return "\n".join(lines)


def _candidate(i: int, c: CandidateBrief) -> str:
    met = "" if c.meets_targets else " (misses targets)"
    f = c.figures
    return (f"{i}. {c.strategy} @{c.concurrency}: TTFT {f.ttft_ms:.1f} ms, TPOT {f.tpot_ms:.2f} ms, "
            f"{f.tokens_per_s_per_gpu:.1f} tok/s/GPU, {f.memory_per_gpu_gb:.1f} GB/GPU{met}")


def _search(s: SearchSummary) -> str:
    if not s.feasible:
        return f"nothing fits: {s.message}" + (f" (at least {counted(s.min_gpus, 'GPU')} would)" if s.min_gpus else "")
    head = f"{counted(s.evaluated, 'strategy', 'strategies')} priced, best for {s.objective} first:"
    return "\n".join([head, *(_candidate(i, c) for i, c in enumerate(s.candidates, 1))])


def _dag(d: DagCheck) -> str:
    verdict = "valid" if d.valid else "INVALID"
    text = (f"{verdict}: {counted(d.nodes, 'node')}, {counted(d.edges, 'edge')}, "
            f"{counted(d.rules_checked, 'rule')} checked")
    if d.strategy:
        text = f"{d.strategy} {text}"
    if d.violations:
        text += f"; {counted(d.violations_total, 'violation')}, first: {d.violations[0].rule} {d.violations[0].message}"
    if d.figures is not None:
        text += "\n" + headline(d.figures)
    return text


def _strategy(s: StrategyCheck) -> str:
    verdict = "valid" if s.valid else ("INVALID" if s.buildable else "cannot be built")
    lines = [f"{s.strategy} on {counted(s.gpus_used, 'GPU')}: {verdict}, "
             f"{'meets its targets' if s.meets_targets else 'misses: ' + '; '.join(_reasons(s) or ['-'])}"]
    if s.figures is not None:
        lines.append(headline(s.figures))
    lines += [f"{v.rule} ({v.severity}): {v.message}" for v in s.violations[:3]]
    return "\n".join(lines)


def _reasons(s: StrategyCheck) -> list[str]:
    return miss_texts(s.misses) + s.constraint_breaks


def _build(b: BuildSummary) -> str:
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(b.node_kinds.items(), key=lambda kv: -kv[1])[:6])
    return f"{b.strategy}: {counted(b.nodes, 'node')}, {counted(b.edges, 'edge')} ({kinds})"


_RENDERERS: dict[str, tuple[type[Any], Callable[[Any], str]]] = {
    "plan": (PlanSummary, _plan),
    "estimate_cost": (CostSummary, _cost),
    "search_strategies": (SearchSummary, _search),
    "validate_dag": (DagCheck, _dag),
    "submit_dag": (DagCheck, _dag),
    "propose_strategy": (StrategyCheck, _strategy),
    "build_dag": (BuildSummary, _build),
}


def summary_text(name: str, data: Any) -> str:
    """A few lines a person or a model can read for the result ``data`` of capability ``name``."""
    if name in _RENDERERS:
        model, render = _RENDERERS[name]
        return render(model.model_validate(data))
    return json.dumps(data, separators=(",", ":"))
