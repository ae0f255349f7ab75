"""Plan on several GPU types and answer with the cheapest: ``--gpu H100,H200,B200`` or ``--gpu any``.

Each type is planned on its own, with the same request (model, traffic, targets) and GPU budget, by the
deterministic planner. The winner is the type whose plan meets the targets (with a rate: serves it within them;
without: its best throughput within them) at the fewest dollars per million output tokens, prompts included, the
sweep's order (:func:`~shardplan.contracts.choice.cost_rank`): without a rate that is the most output tokens
per dollar. The answer is the winner's plan with a :class:`~shardplan.contracts.choice.Choice` beside it
saying, per type, why it lost (:mod:`.choice` ranks). A type without a price is not planned: it cannot be compared
in dollars. The ``planner`` may itself choose among engines (:func:`~.engine_choice.plan_engines`): each type's row
then names its best engine, and the answer carries the winning type's engine choice too.
"""

from __future__ import annotations

from collections.abc import Callable

from shardplan.contracts.choice import ChoiceOption
from shardplan.contracts.economics import GpuPrice
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.catalogs.gpus import get_gpu, gpu_catalog
from shardplan.tools.catalogs.prices import price_for
from shardplan.tools.planning.choice import answer_choice, option_row
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
        return (f"each type may use up to {counted(budget, 'GPU')} (--gpus), and a plan with a rate uses only what "
                "it needs")
    per_node = f"{counted(gpus_per_node, 'GPU')} (--gpus-per-node)" if gpus_per_node else "GPUs (its catalog node size)"
    return f"no --gpus given: each type may use one node of {per_node}, and a plan with a rate uses only what it " \
           "needs"


def _type_request(request: PlanRequest, gpu: str, budget: int | None, per_node: int | None,
                  price: GpuPrice | None) -> PlanRequest:
    node = per_node or get_gpu(gpu).gpus_per_node
    update = {"gpu": gpu, "gpus": budget or node, "gpus_per_node": per_node, "price": price}
    return PlanRequest.model_validate(request.model_dump() | update)


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
    rows: list[ChoiceOption] = []
    plans: dict[str, Plan] = {}
    for gpu in gpus:
        price = price_for(gpu, prices)
        if price is None:
            rows.append(ChoiceOption(gpu=gpu, status="no_price", reason=f"no price for {gpu}: cannot be compared in "
                                     f"dollars; give one with --gpu-price {gpu}=DOLLARS (per GPU-hour)"))
            continue
        try:
            result = planner(_type_request(request, gpu, budget, gpus_per_node, price))
        except InputError as exc:  # e.g. a budget that does not fill whole nodes of this type
            rows.append(option_row(gpu, request.workload.engine, budget, None, str(exc)))
            continue
        plans[gpu] = result
        rows.append(option_row(gpu, result.request.workload.engine, result.request.gpus, result, None))
    return answer_choice(request, "gpu", rows, plans, gpu_budget_text(budget, gpus_per_node))
