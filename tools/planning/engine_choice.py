"""Plan under several serving engines and answer with the best: ``--engine auto`` or ``--engine vllm,sglang``.

Each engine is planned on its own, with the same request (model, GPU type and budget, traffic, targets), by the
deterministic planner; its kernels and collectives are priced from NVIDIA's measured tables for that GPU and
engine (aiconfigurator-core) where they exist, by the roofline otherwise, and each row says which. The winner is
the engine whose plan meets the targets at the fewest dollars per million output tokens, the GPU choice's order
(:mod:`.choice`); one GPU type has one price, so that is the most output tokens/s per GPU, the order used where
there is no price. The roofline does not know the engines' kernels apart: engines priced by it alone differ only
by how their schedulers compose steps (SGLang runs prompt steps apart from decode steps, vLLM and TensorRT-LLM mix
them: :mod:`~shardplan.tools.serving.steady`), and those that schedule alike tie, their rows saying so rather than
pretending one is faster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

from shardplan.contracts.choice import ChoiceOption
from shardplan.contracts.common import ServingEngine
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.errors import InputError
from shardplan.tools.planning.choice import answer_choice, option_row
from shardplan.tools.planning.planner import plan as plan_one

__all__ = ["AUTO", "ENGINES", "several_engines", "parse_engines", "plan_engines"]

AUTO = "auto"
"""Every engine shardplan prices."""
ENGINES: tuple[ServingEngine, ...] = get_args(ServingEngine)
"""The engines shardplan prices, in the order ``auto`` plans them (and a tie keeps)."""


def several_engines(text: str | None) -> bool:
    """Whether an --engine value asks for several engines (a comma list or ``auto``) rather than one.

    >>> several_engines("vllm"), several_engines("vllm,sglang"), several_engines(" AUTO ")
    (False, True, True)
    """
    return text is not None and ("," in text or text.strip().lower() == AUTO)


def parse_engines(text: str, field: str = "engine") -> list[ServingEngine]:
    """The engines an --engine value names: one, a comma list, or ``auto`` (every one), in the order given and
    without repeats.

    Raises:
        InputError: an empty or unknown name, naming ``field`` and the engines.

    >>> parse_engines("SGLang, vllm,sglang"), parse_engines("auto")
    (['sglang', 'vllm'], ['vllm', 'sglang', 'trtllm'])
    """
    if text.strip().lower() == AUTO:
        return list(ENGINES)
    names: list[ServingEngine] = []
    for part in text.split(","):
        name = next((e for e in ENGINES if e == part.strip().lower()), None)
        if name is None:
            shown = part.strip()[:40] or "an empty name"
            where = "--engine: " if field == "engine" else ""  # elsewhere the caller names the field
            raise InputError(f"{where}unknown engine {shown!r}", field=field,
                             fix=f"choose {', '.join(ENGINES)}, a comma list of them, or {AUTO} for every one")
        if name not in names:
            names.append(name)
    return names


def _engine_request(request: PlanRequest, engine: ServingEngine) -> PlanRequest:
    return request.model_copy(update={"workload": request.workload.model_copy(update={"engine": engine})})


def plan_engines(request: PlanRequest, engines: list[ServingEngine],
                 planner: Callable[[PlanRequest], Plan] = plan_one) -> Plan:
    """Plan ``request`` under each engine of ``engines`` on its GPU type and return the winner's plan with the
    choice in ``engine_choice`` (the module's rule); one engine is planned as asked, without a choice record.

    Raises:
        InputError: the request's model or files are wrong.
    """
    if len(engines) == 1:
        return planner(_engine_request(request, engines[0]))
    rows: list[ChoiceOption] = []
    plans: dict[str, Plan] = {}
    for engine in engines:
        # A refusal (a wrong model or file) is the request's, the same under every engine: it is raised, not a row.
        result = planner(_engine_request(request, engine))
        plans[engine] = result
        rows.append(option_row(request.gpu, engine, result.request.gpus, result, None))
    budget = f"each engine may use the same {request.gpus} {request.gpu} GPUs"
    return answer_choice(request, "engine", rows, plans, budget)
