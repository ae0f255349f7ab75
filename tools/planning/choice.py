"""Choose along one dimension of a request: each value (a GPU type, an engine) planned, the cheapest that meets the
targets answers, with a row per value saying why it lost.

The modules of each dimension (:mod:`.gpu_choice`, :mod:`.engine_choice`) plan the values and turn each plan into
a row (:func:`option_row`); :func:`answer_choice` ranks the rows by the sweep's order
(:func:`~shardplan.contracts.choice.cost_rank`: dollars per million output tokens, then output tokens/s per GPU,
then GPUs), settles each row's status and reason, and returns the winner's plan with the
:class:`~shardplan.contracts.choice.Choice` beside it.
"""

from __future__ import annotations

from typing import Literal

from shardplan.contracts.choice import Choice, ChoiceDimension, ChoiceOption, cost_rank
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.cost.measured.database import measured_tables

__all__ = ["option_row", "option_value", "answer_choice", "choice_basis"]

Backend = Literal["measured", "roofline"]

_NOUN = {"gpu": "GPU type", "engine": "engine"}
_STATUS_ORDER = ["chosen", "costlier", "slower", "tied", "misses_targets", "infeasible", "no_price"]


def option_value(row: ChoiceOption, dimension: ChoiceDimension) -> str:
    """The value a row stands for along ``dimension``: its GPU type or its engine."""
    return row.gpu if dimension == "gpu" else row.engine or ""


def _pricing(result: Plan | None, gpu: str, engine: str) -> tuple[Backend, str]:
    """What priced a plan: its own cost report's backend and data where it has one, else whether measured tables
    exist for the GPU and engine (an infeasible plan was priced by the same tables it would have used)."""
    report = result.dag_cost.pricing if result is not None and result.dag_cost is not None else None
    if report is not None:
        return report.backend, report.data or report.why_roofline or f"no measured tables for {gpu} under {engine}"
    tables = measured_tables(gpu, engine)
    if tables is not None:
        return "measured", tables.label
    return "roofline", f"no measured tables for {gpu} under {engine}"


def option_row(gpu: str, engine: str, budget: int | None, result: Plan | None, error: str | None) -> ChoiceOption:
    """One value's row before the ranking: its plan's deployment, price and what priced it, or the refusal
    ``error`` when it has no plan (status chosen, costlier or tied is settled by :func:`answer_choice`)."""
    backend, data = _pricing(result, gpu, engine)
    if result is None:
        return ChoiceOption(gpu=gpu, engine=engine, status="infeasible", gpu_budget=budget, reason=error or "",
                            pricing=backend, pricing_data=data)
    usd = result.economics.dollars if result.economics else None
    d, f = result.deployment, result.figures
    row = ChoiceOption(
        gpu=gpu, engine=engine, status="costlier", gpu_budget=result.request.gpus,
        gpus_used=d.gpus_used if d else None, deployment=result.strategy.to_spec() if result.strategy else None,
        usd_per_hour=usd.usd_per_hour if usd else None,
        usd_per_million_output_tokens=usd.usd_per_million_output_tokens if usd else None,
        tokens_per_s_per_gpu=f.tokens_per_s_per_gpu if f else None, e2e_ms=f.e2e_ms if f else None, reason="",
        pricing=backend, pricing_data=data,
    )
    if result.status == "infeasible":
        return row.model_copy(update={"status": "infeasible", "reason": result.explanation})
    if result.status != "ok":
        missed = "; ".join(m.message for m in result.misses)
        return row.model_copy(update={"status": "misses_targets", "reason": f"misses: {missed}"})
    return row


def _rank(row: ChoiceOption) -> tuple[float, float, float, float]:
    return cost_rank(row.usd_per_million_output_tokens, row.gpus_used, row.tokens_per_s_per_gpu, row.e2e_ms)


def _why_lost(row: ChoiceOption, best: ChoiceOption, name: str) -> tuple[str, str]:
    """The status and reason of a row that meets the targets but lost to ``best`` (named ``name``): the first
    figure of the ranking where it is worse, with the numbers; equal figures are a tie."""
    usd, top = row.usd_per_million_output_tokens, best.usd_per_million_output_tokens
    if usd is not None and top is not None and usd != top:
        share = f" (+{(usd - top) / top:.0%})" if top > 0 else ""
        return "costlier", f"costlier: +${usd - top:,.3f} per 1M output tokens{share} than {name}"
    per_gpu, top_per_gpu = row.tokens_per_s_per_gpu or 0.0, best.tokens_per_s_per_gpu or 0.0
    if per_gpu != top_per_gpu:
        return "costlier", f"fewer tokens per GPU: {per_gpu:,.0f} output tokens/s per GPU against {top_per_gpu:,.0f} " \
                           f"for {name} ({counted(row.gpus_used, 'GPU')} against {best.gpus_used})"
    if row.gpus_used != best.gpus_used:
        return "costlier", f"more GPUs: {row.gpus_used} against {best.gpus_used} for {name}"
    if row.e2e_ms is not None and best.e2e_ms is not None and row.e2e_ms != best.e2e_ms:
        return "slower", f"slower at the same cost: request latency {row.e2e_ms:,.0f} ms against " \
                         f"{best.e2e_ms:,.0f} ms for {name}"
    alike = (" (both priced by the roofline, which prices the engines alike: no measured tables tell them apart)"
             if row.pricing == best.pricing == "roofline" else "")
    return "tied", f"ties with {name}: the same GPUs, price, tokens per GPU and latency{alike}; the first listed " \
                   "wins a tie"


def _why_won(best: ChoiceOption, meeting: list[ChoiceOption], dimension: ChoiceDimension) -> str:
    figure = ("cheapest per 1M output tokens" if best.usd_per_million_output_tokens is not None else
              f"the most output tokens/s per GPU (no price for {best.gpu})")
    reason = f"{figure} of the {len(meeting)} {_NOUN[dimension]}(s) meeting the targets"
    tied = [option_value(r, dimension) for r in meeting[1:] if _rank(r) == _rank(best)]
    return reason + (f"; tied with {', '.join(tied)} and listed first" if tied else "")


def _settled(rows: list[ChoiceOption], dimension: ChoiceDimension) -> tuple[str | None, list[ChoiceOption]]:
    """The winner among the rows that meet the targets, and every row with its status and reason settled."""
    meeting = sorted((r for r in rows if r.status == "costlier"), key=_rank)  # stable: a tie keeps the given order
    best = meeting[0] if meeting else None
    name = option_value(best, dimension) if best is not None else None
    settled = []
    for r in rows:
        if r is best:
            r = r.model_copy(update={"status": "chosen", "reason": _why_won(best, meeting, dimension)})
        elif r.status == "costlier" and best is not None and name is not None:
            status, reason = _why_lost(r, best, name)
            r = r.model_copy(update={"status": status, "reason": reason})
        settled.append(r)
    settled.sort(key=lambda r: (_STATUS_ORDER.index(r.status), *_rank(r)))
    return name, settled


def choice_basis(request: PlanRequest, dimension: ChoiceDimension) -> str:
    """The rule that chooses, in one sentence."""
    noun = _NOUN[dimension] + "s"
    if request.workload.rate:
        return (f"the fewest dollars per 1M output tokens (prompts included; without a price, the most output "
                f"tokens/s per GPU) among the {noun} whose plan serves {request.workload.rate:g} requests/s within "
                "the targets")
    return (f"the most output tokens per dollar (the fewest dollars per 1M output tokens; without a price, the most "
            f"output tokens/s per GPU) among the {noun} whose plan meets the targets")


def answer_choice(request: PlanRequest, dimension: ChoiceDimension, rows: list[ChoiceOption],
                  plans: dict[str, Plan], budget: str) -> Plan:
    """The winner's plan (``plans`` by value) with the choice among ``rows`` beside it, in ``gpu_choice`` or
    ``engine_choice``; with none meeting the targets, the cheapest best effort, else the first value planned.

    Raises:
        InputError: no value was planned at all (every GPU type without a price).
    """
    chosen, rows = _settled(rows, dimension)
    basis = choice_basis(request, dimension)
    choice = Choice(dimension=dimension, chosen=chosen, basis=basis, budget=budget, options=rows)
    answer = chosen or next((option_value(r, dimension) for r in rows if option_value(r, dimension) in plans), None)
    if answer is None:
        raise InputError("no GPU type of --gpu has a price to compare", field="gpu",
                         fix="give prices with --gpu-price GPU=DOLLARS or --prices FILE")
    values = [option_value(r, dimension) for r in rows]
    noun = _NOUN[dimension]
    note = (f"chose {chosen} of {len(rows)} {noun}s: {basis}" if chosen else
            f"no {noun} of {', '.join(values)} meets the targets: showing {answer}, the cheapest best effort")
    result = plans[answer]
    return result.model_copy(update={f"{dimension}_choice": choice, "messages": [note, *result.messages]})
