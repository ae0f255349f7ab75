"""Plan on several GPU types and answer with the cheapest: ``--gpu H100,H200,B200`` or ``--gpu any``.

Each type is planned on its own, with the same request (model, traffic, targets) and GPU budget, by the
deterministic planner. The winner is the type whose plan meets the targets (with a rate: serves it within them;
without: its best throughput within them) at the fewest dollars per million output tokens, prompts included, the
sweep's order (:func:`~shardplan.contracts.gpu_choice.cost_rank`): without a rate that is the most output tokens
per dollar. The answer is the winner's plan with a :class:`~shardplan.contracts.gpu_choice.GpuChoice` beside it
saying, per type, why it lost. A type without a price is not planned: it cannot be compared in dollars.
"""

from __future__ import annotations

from collections.abc import Callable

from shardplan.contracts.economics import GpuPrice
from shardplan.contracts.gpu_choice import GpuChoice, GpuOption, cost_rank
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.errors import InputError
from shardplan.tools.catalogs.gpus import get_gpu, gpu_catalog
from shardplan.tools.catalogs.prices import price_for
from shardplan.tools.planning.planner import plan as plan_one

__all__ = ["several_gpu_types", "parse_gpu_types", "plan_gpu_types", "gpu_budget_text"]

ANY = "any"


def several_gpu_types(text: str | None) -> bool:
    """Whether a --gpu value asks for several GPU types (a comma list or ``any``) rather than one.

    >>> several_gpu_types("H100"), several_gpu_types("H100,B200"), several_gpu_types(" ANY ")
    (False, True, True)
    """
    return text is not None and ("," in text or text.strip().lower() == ANY)


def parse_gpu_types(text: str, prices: dict[str, GpuPrice] | None = None) -> list[str]:
    """The catalog names ``--gpu`` asks for: one name, a comma list, or ``any`` (every catalog GPU with a price,
    given or bundled), in the order given and without repeats.

    Raises:
        InputError: an empty or unknown name, naming --gpu and the catalog.

    >>> parse_gpu_types("h100, H200,h100")
    ['H100', 'H200']
    """
    if text.strip().lower() == ANY:
        return [name for name in gpu_catalog() if price_for(name, prices) is not None]
    names: list[str] = []
    for part in text.split(","):
        try:
            name = get_gpu(part).name
        except InputError as exc:
            reason = str(exc).removesuffix(f"; {exc.fix}") if exc.fix else str(exc)
            raise InputError(f"--gpu: {reason}", field="gpu", fix=f"{exc.fix}; or {ANY} for every priced one") from None
        if name not in names:
            names.append(name)
    return names


def gpu_budget_text(budget: int | None, gpus_per_node: int | None) -> str:
    """How many GPUs each type may use, in words (the budget rule of the module)."""
    if budget is not None:
        return f"each type may use up to {budget} GPUs (--gpus), and a plan with a rate uses only what it needs"
    per_node = f"{gpus_per_node} GPUs (--gpus-per-node)" if gpus_per_node else "GPUs (its catalog node size)"
    return f"no --gpus given: each type may use one node of {per_node}, and a plan with a rate uses only what it " \
           "needs"


def _type_request(request: PlanRequest, gpu: str, budget: int | None, per_node: int | None,
                  price: GpuPrice | None) -> PlanRequest:
    node = per_node or get_gpu(gpu).gpus_per_node
    update = {"gpu": gpu, "gpus": budget or node, "gpus_per_node": per_node, "price": price}
    return PlanRequest.model_validate(request.model_dump() | update)


def _option(gpu: str, budget: int | None, result: Plan | None, error: str | None) -> GpuOption:
    """One type's row before the ranking (status chosen/costlier is settled later)."""
    if result is None:
        return GpuOption(gpu=gpu, status="infeasible", gpu_budget=budget, reason=error or "")
    usd = result.economics.dollars if result.economics else None
    d, f = result.deployment, result.figures
    row = GpuOption(
        gpu=gpu, status="costlier", gpu_budget=result.request.gpus, gpus_used=d.gpus_used if d else None,
        deployment=result.strategy.to_spec() if result.strategy else None,
        usd_per_hour=usd.usd_per_hour if usd else None,
        usd_per_million_output_tokens=usd.usd_per_million_output_tokens if usd else None,
        tokens_per_s_per_gpu=f.tokens_per_s_per_gpu if f else None, reason="",
    )
    if result.status == "infeasible":
        return row.model_copy(update={"status": "infeasible", "reason": result.explanation})
    if result.status != "ok":
        missed = "; ".join(m.message for m in result.misses)
        return row.model_copy(update={"status": "misses_targets", "reason": f"misses: {missed}"})
    return row


def _ranked(rows: list[GpuOption]) -> tuple[str | None, list[GpuOption]]:
    """The winner among the rows that meet the targets, and every row with its status and reason settled."""
    meeting = sorted((r for r in rows if r.status == "costlier"), key=lambda r: cost_rank(
        r.usd_per_million_output_tokens, r.gpus_used))
    if not meeting:
        return None, rows
    best = meeting[0]
    price = best.usd_per_million_output_tokens or 0.0
    settled = []
    for r in rows:
        if r is best:
            r = r.model_copy(update={"status": "chosen",
                                     "reason": f"cheapest per 1M output tokens of the {len(meeting)} type(s) "
                                               "meeting the targets"})
        elif r.status == "costlier":
            more = (r.usd_per_million_output_tokens or 0.0) - price
            share = f" (+{more / price:.0%})" if price > 0 else ""
            r = r.model_copy(update={"reason": f"costlier: +${more:,.3f} per 1M output tokens{share} than {best.gpu}"})
        settled.append(r)
    return best.gpu, settled


def _order(row: GpuOption) -> tuple[int, float, float]:
    statuses = ["chosen", "costlier", "misses_targets", "infeasible", "no_price"]
    return (statuses.index(row.status), *cost_rank(row.usd_per_million_output_tokens, row.gpus_used))


def plan_gpu_types(
    request: PlanRequest,
    gpus: list[str],
    prices: dict[str, GpuPrice] | None = None,
    budget: int | None = None,
    gpus_per_node: int | None = None,
    planner: Callable[[PlanRequest], Plan] = plan_one,
) -> Plan:
    """Plan ``request`` on each GPU type of ``gpus`` and return the winner's plan with the choice beside it
    (the module's rule); one type is planned as asked, without a choice record.

    ``budget`` is the GPUs each type may use (the user's --gpus); None: one node of each type, of
    ``gpus_per_node`` GPUs (None: the type's catalog node size).

    Raises:
        InputError: the request's model or files are wrong (a type's own refusal is that type's row), or it has a
            decode pool of another GPU type (the types compared are each the whole deployment's).
    """
    if request.decode_gpu is not None and len(gpus) > 1:
        raise InputError("several GPU types in gpu with decode_gpu", field="decode_gpu",
                         fix="name one prefill GPU type with decode_gpu, or leave out decode_gpu to compare types")
    if len(gpus) == 1:
        return planner(_type_request(request, gpus[0], budget or request.gpus, gpus_per_node,
                                     price_for(gpus[0], prices)))
    rows: list[GpuOption] = []
    plans: dict[str, Plan] = {}
    for gpu in gpus:
        price = price_for(gpu, prices)
        if price is None:
            rows.append(GpuOption(gpu=gpu, status="no_price", reason=f"no price for {gpu}: cannot be compared in "
                                  f"dollars; give one with --gpu-price {gpu}=DOLLARS (per GPU-hour)"))
            continue
        try:
            result = planner(_type_request(request, gpu, budget, gpus_per_node, price))
        except InputError as exc:  # e.g. a budget that does not fill whole nodes of this type
            rows.append(_option(gpu, budget, None, str(exc)))
            continue
        plans[gpu] = result
        rows.append(_option(gpu, result.request.gpus, result, None))
    chosen, rows = _ranked(rows)
    rows.sort(key=_order)
    basis = ("the fewest dollars per 1M output tokens (prompts included) among the types whose plan serves "
             f"{request.workload.rate:g} requests/s within the targets" if request.workload.rate else
             "the most output tokens per dollar (the fewest dollars per 1M output tokens) among the types whose plan "
             "meets the targets")
    choice = GpuChoice(chosen=chosen, basis=basis, budget=gpu_budget_text(budget, gpus_per_node),
                       options=rows)
    # No type meets the targets: answer with the cheapest best effort, else the first type planned.
    answer = chosen or next((r.gpu for r in rows if r.gpu in plans), None)
    if answer is None:
        raise InputError("no GPU type of --gpu has a price to compare", field="gpu",
                         fix="give prices with --gpu-price GPU=DOLLARS or --prices FILE")
    result = plans[answer]
    note = (f"chose {chosen} of {len(gpus)} GPU types: {basis}" if chosen else
            f"no GPU type of {', '.join(gpus)} meets the targets: showing {answer}, the cheapest best effort")
    return result.model_copy(update={"gpu_choice": choice, "messages": [note, *result.messages]})
