"""From a parsed request to a plan: what it still lacks, the question that asks for it, and the
:class:`~shardplan.contracts.plan.PlanRequest` it stands for (reading the words is :mod:`.request`'s)."""

from __future__ import annotations

from shardplan.agent.parse.features import missing_features, workload_features
from shardplan.agent.parse.request import _SETTINGS, DEFAULT_ISL, DEFAULT_OSL, ParsedRequest
from shardplan.contracts.constraints import parse_constraints
from shardplan.contracts.economics import GpuPrice
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload, default_objective
from shardplan.errors import InputError
from shardplan.tools.catalogs.drafters import check_drafter
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.catalogs.models import check_workload_context
from shardplan.tools.catalogs.weight_formats import request_model
from shardplan.tools.planning.assumptions import request_assumptions
from shardplan.tools.planning.gpu_choice import ANY, parse_gpu_types
from shardplan.tools.traffic.sizing import parse_traffic, workload_fields

__all__ = ["gpu_types", "missing_fields", "clarifying_question", "to_plan_request"]


def gpu_types(parsed: ParsedRequest) -> list[str]:
    """The GPU types the request names: one, or several when it asks which to use ("H100 or H200?", "any GPU").

    >>> from shardplan.agent.parse.request import parse_request
    >>> gpu_types(parse_request("Llama 3.1 70B at 10 req/s: H100 or H200?"))
    ['H100', 'H200']
    """
    if parsed.gpu == ANY:
        return parse_gpu_types(ANY)
    return parsed.gpu.split(",") if parsed.gpu else []


def missing_fields(parsed: ParsedRequest) -> list[str]:
    """The essential fields a plan still needs, in asking order: ``model``, ``gpu`` (type), ``gpus`` (a GPU
    or node count). Lengths are not essential: they default to DEFAULT_ISL and DEFAULT_OSL.

    >>> from shardplan.agent.parse.request import parse_request
    >>> missing_fields(parse_request("plan Llama 3.1 70B on 16 GPUs"))
    ['gpu']
    """
    missing = []
    if parsed.model is None:
        missing.append("model")
    if parsed.gpu is None:
        missing.append("gpu")
    if parsed.gpus is None and parsed.nodes is None and len(gpu_types(parsed)) < 2:
        missing.append("gpus")  # a choice of types plans one node of each when no count is given
    return missing + missing_features(parsed)


_QUESTIONS = {
    "model": "which model to plan (for example Llama 3.1 70B, Qwen3-235B or DeepSeek-V3)",
    "gpu": "which GPU type ({gpus})",
    "gpus": "how many GPUs or nodes",
    "isl": "how long the prompts are",
    "osl": "how many tokens each answer generates",
    "batch": "how many requests run at once",
    "spec_method": "what drafts the speculative tokens (MTP, an EAGLE head or a draft model)",
    "spec_tokens": "how many draft tokens each speculative step proposes",
    "spec_accept": "how many draft tokens are accepted per step on average (the engine's mean acceptance length "
    "minus one; it is measured, never assumed)",
}


def clarifying_question(missing: list[str]) -> str:
    """One friendly question asking for every field in ``missing``; empty when nothing is missing.

    >>> clarifying_question(["gpu", "gpus"]).split("(")[0]
    'Could you tell me which GPU type '
    """
    if not missing:
        return ""
    names = list(gpu_catalog())
    gpus = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
    parts = [_QUESTIONS.get(name, f"the {name.replace('_', ' ')}").format(gpus=gpus) for name in missing]
    asked = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Could you tell me {asked}?"


def to_plan_request(parsed: ParsedRequest, policy: str = "builtin") -> PlanRequest:
    """The PlanRequest a parsed request stands for; lengths default to DEFAULT_ISL and DEFAULT_OSL, the
    concurrency is left to the search, the objective is throughput when targets are given (else latency),
    and its ``assumptions`` say so, one line each, after the parser's notes. Constraints, ``disaggregated``
    among them (as ``colocated`` or ``disaggregated``), go into the request's ``constraints``.

    Raises:
        InputError: an essential field is missing (``field`` names the first; the fix is the question to ask),
            the request contradicts itself (``field`` is ``request``; the fix lists the contradictions), or a
            prompt plus output longer than the model's context (``field`` is ``isl``).
    """
    missing = missing_fields(parsed)
    if missing:
        raise InputError(
            f"the request does not say {', '.join(missing)}", field=missing[0], fix=clarifying_question(missing)
        )
    if parsed.contradictions:
        raise InputError("the request contradicts itself", field="request", fix=" ".join(parsed.contradictions))
    assert parsed.model and parsed.gpu
    gpu = gpu_types(parsed)[0]  # of a choice, the first; the caller plans each type (gpu_types)
    gpus = parsed.gpus or (parsed.nodes or 1) * (parsed.gpus_per_node or gpu_catalog()[gpu].gpus_per_node)
    traffic = parse_traffic(parsed.isl_dist, parsed.osl_dist, parsed.trace, parsed.arrival)
    fields = workload_fields(traffic, isl=parsed.isl, osl=parsed.osl, batch=parsed.batch, rate=parsed.rate,
                             default_isl=DEFAULT_ISL, default_osl=DEFAULT_OSL)
    notes = [n for n in parsed.notes if not n.startswith("No ") or "length given" not in n]
    features = workload_features(parsed, fields["isl"], notes)
    workload = Workload(
        **fields,
        **features,
        ttft_ms=parsed.ttft_ms,
        tpot_ms=parsed.tpot_ms,
        slo_percentile=parsed.slo_percentile or "mean",
        objective=parsed.objective or default_objective(parsed.ttft_ms, parsed.tpot_ms, fields["rate"]),
    )
    texts = list(parsed.constraints)
    if parsed.disaggregated is not None:
        texts.append("disaggregated" if parsed.disaggregated else "colocated")
    request = PlanRequest(
        model=parsed.model,
        gpu=gpu,
        gpus=gpus,
        gpus_per_node=parsed.gpus_per_node,
        workload=workload,
        weight_dtype=parsed.weight_dtype,
        kv_dtype=parsed.kv_dtype,
        weight_formats=parsed.weight_formats,
        attention_dtype=parsed.attention_dtype,
        policy=policy,
        constraints=parse_constraints(texts) if texts else None,
        price=GpuPrice(gpu=gpu, usd_per_gpu_hour=parsed.gpu_price, source="the request's words")
        if parsed.gpu_price is not None else None,
    )
    model = request_model(request)
    check_workload_context(model, workload)
    check_drafter(model, workload.speculation)
    given = {name for name in _SETTINGS if getattr(parsed, name) is not None}
    if parsed.spec_method is not None:
        given.add("spec")
    if parsed.nodes and parsed.gpus_per_node is None:
        given.discard("gpus_per_node")
    stated = request_assumptions(request, given)
    # The parser's own notes say what it read into words and what it did not use; the defaults are stated once.
    return request.model_copy(update={"assumptions": notes + stated})
