"""The capability layer: what the agent, LangChain tools and the MCP server can do, as plain functions.

Each capability takes keyword arguments checked by a pydantic argument model (``extra="forbid"``, size
and range constraints, a description per field) before its body runs, and returns a compact pydantic
result an LLM can read: headline figures and the first violations, never a whole DAG unless asked.
Malformed input raises :class:`~shardplan.errors.InputError` naming the field and the fix; an
infeasible request is a result (``feasible=False``), not an exception. :data:`CAPABILITIES` lists
them all for the wrappers (``langchain_tools``, the MCP server).

>>> check = propose_strategy(model="llama-3.1-8b", gpu="H100", gpus=2, isl=512, osl=64, batch=2, strategy="tp=2")
>>> check.valid, check.meets_targets
(True, True)
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import InfeasibleError, InputError
from .contracts.common import DType, Objective
from .contracts.dag import DAG
from .contracts.plan import Alternative, Plan, PlanRequest
from .contracts.reports import CostReport, ValidationReport
from .contracts.workload import Workload

__all__ = [
    "CAPABILITIES", "Capability", "MAX_DAG_CHARS", "MAX_DAG_NODES",
    "RequestArgs", "StrategyCheck", "SearchSummary", "DagCheck", "CostSummary", "BuildSummary",
    "search_knowledge", "get_rule", "list_models", "list_gpus", "describe_model", "search_strategies",
    "propose_strategy", "submit_dag", "estimate_cost", "validate_dag", "build_dag", "plan",
    "evaluate_strategy", "search_request", "alternatives_for", "infeasible_plan", "parse_args", "error_dict", "dump",
]

MAX_DAG_CHARS = 32_000_000
"""Largest DAG JSON text accepted, in characters, checked before parsing."""
MAX_DAG_NODES = 200_000
"""Largest DAG accepted, in nodes."""
MAX_VIOLATIONS = 10
"""Violations listed one by one in a compact result; the rest are counted."""
SEARCH_DEPTH = 20
"""Candidates kept per cached search; ``top`` slices them."""


class Args(BaseModel):
    """Base of every argument model: unknown keys are an error."""

    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------------- arguments


class KnowledgeQuery(Args):
    """Search the knowledge base of inference-parallelism rules."""

    query: str = Field(min_length=1, max_length=400, description="Free text, e.g. 'sequence parallelism in decode'.")
    k: int = Field(default=5, ge=1, le=20, description="How many sections to return.")


class RuleArgs(Args):
    """Look up one knowledge rule."""

    rule_id: str = Field(min_length=1, max_length=20, description="Rule ID such as DEC-1 or TP-3.")


class NoArgs(Args):
    """No arguments."""


class ModelArgs(Args):
    """Name one model."""

    model: str = Field(min_length=1, max_length=300,
                       description="Bundled model name (llama-3.1-8b) or config.json path.")


class RequestArgs(Args):
    """A planning request: model, hardware and workload."""

    model: str = Field(min_length=1, max_length=300,
                       description="Bundled model name (llama-3.1-70b, deepseek-v3) or config.json path.")
    gpu: str = Field(default="H100", min_length=1, max_length=40,
                     description="GPU catalog name: H100, H200, B200, A100, L40S, MI300X.")
    gpus: int = Field(ge=1, le=4096, description="GPUs available.")
    gpus_per_node: int | None = Field(default=None, ge=1, le=512,
                                      description="GPUs per node; the GPU's usual 8 when omitted.")
    cluster: str | None = Field(default=None, max_length=500,
                                description="Path of a cluster YAML, when the request came with one.")
    isl: int = Field(default=2048, ge=1, le=2_097_152, description="Input (prompt) tokens.")
    osl: int = Field(default=256, ge=1, le=2_097_152, description="Output tokens.")
    batch: int = Field(default=1, ge=1, le=1_000_000, description="Concurrent sequences.")
    ttft_ms: float | None = Field(default=None, gt=0, description="Target time to first token, ms.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Target time per output token, ms.")
    objective: Objective = Field(default="latency",
                                 description="latency, throughput or goodput (throughput under targets).")
    weight_dtype: DType | None = Field(default=None, description="Override of the weight format (bf16, fp8, fp4).")
    kv_dtype: DType | None = Field(default=None, description="Override of the KV-cache format.")

    def to_request(self) -> PlanRequest:
        """The PlanRequest these arguments describe; model and cluster paths must lie under the allowed roots."""
        _check_path(self.model, "model")
        if self.cluster:
            _check_path(self.cluster, "cluster", always=True)
        workload = Workload(isl=self.isl, osl=self.osl, batch=self.batch, ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms,
                            objective=self.objective)
        return PlanRequest(model=self.model, gpu=self.gpu, gpus=self.gpus, gpus_per_node=self.gpus_per_node,
                           cluster=self.cluster, workload=workload, weight_dtype=self.weight_dtype,
                           kv_dtype=self.kv_dtype)

    @classmethod
    def from_request(cls, request: PlanRequest) -> dict[str, Any]:
        """The keyword arguments that describe ``request`` (omitting defaults), as a tool call carries them."""
        w = request.workload
        values = {"model": request.model, "gpu": request.gpu, "gpus": request.gpus,
                  "gpus_per_node": request.gpus_per_node, "cluster": request.cluster, "isl": w.isl, "osl": w.osl,
                  "batch": w.batch, "ttft_ms": w.ttft_ms, "tpot_ms": w.tpot_ms, "objective": w.objective,
                  "weight_dtype": request.weight_dtype, "kv_dtype": request.kv_dtype}
        return {k: v for k, v in values.items() if v is not None}


class PlanArgs(RequestArgs):
    """Plan a deployment with the deterministic planner."""

    include_dag: bool = Field(default=False, description="Return the whole DAG too (large).")


class SearchArgs(RequestArgs):
    """Search the strategy space."""

    top: int = Field(default=5, ge=1, le=SEARCH_DEPTH, description="How many ranked strategies to return.")


class StrategyArgs(RequestArgs):
    """A request and one strategy to check."""

    strategy: str = Field(min_length=1, max_length=300, description=(
        "SPEC: 'tp=4,pp=2' for both phases, or 'prefill:sp=2,tp=4;decode:adp=2,tp=4', ';disagg' for separate pools. "
        "Degrees: dp, pp, adp, sp (prefill only), tp, ep, mb; GPUs used = dp*pp*adp*sp*tp."))


class BuildArgs(StrategyArgs):
    """Build the DAG of a strategy."""

    include_dag: bool = Field(default=False, description="Return the whole DAG JSON too (large).")


class DagArgs(Args):
    """A DAG (or a plan holding one) as JSON text or an object."""

    dag_json: str | dict[str, Any] = Field(
        description="The DAG as JSON text or object, e.g. from build_dag(include_dag=true).")


class CostArgs(StrategyArgs):
    """Price a DAG, or a strategy for a request."""

    model: str | None = Field(  # type: ignore[assignment]
        default=None, min_length=1, max_length=300, description="Model, when pricing a strategy.")
    gpus: int | None = Field(  # type: ignore[assignment]
        default=None, ge=1, le=4096, description="GPUs, when pricing a strategy.")
    strategy: str | None = Field(  # type: ignore[assignment]
        default=None, min_length=1, max_length=300, description="SPEC, when pricing a strategy.")
    dag_json: str | dict[str, Any] | None = Field(
        default=None, description="A DAG as JSON text or object, instead of a strategy.")

    @model_validator(mode="after")
    def _one_source(self) -> CostArgs:
        if (self.dag_json is None) == (self.strategy is None):
            raise ValueError("give either dag_json, or model, gpus and strategy")
        if self.strategy is not None and (self.model is None or self.gpus is None):
            raise ValueError("pricing a strategy needs model and gpus")
        return self


# ------------------------------------------------------------------------------------------------ results


class Result(BaseModel):
    """Base of every result."""

    model_config = ConfigDict(extra="forbid")


class ViolationBrief(Result):
    """One broken rule, briefly."""

    rule: str = Field(description="Rule ID (knowledge rule it enforces).")
    severity: str = Field(description="error, warning or info.")
    message: str = Field(description="What is wrong, with the numbers.")
    fix: str = Field(default="", description="How to fix it.")
    nodes: list[str] = Field(default_factory=list, description="First offending nodes.")


class CostBrief(Result):
    """Headline figures of the cost model."""

    ttft_ms: float
    tpot_ms: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    memory_per_gpu_gb: float
    fits: bool = Field(description="Memory fits on every GPU.")


class StrategyCheck(Result):
    """A strategy built, validated and priced for a request."""

    strategy: str = Field(description="The strategy's SPEC, normalised.")
    gpus_used: int = Field(description="GPUs the strategy occupies.")
    buildable: bool = Field(description="False when the degrees do not fit the model or GPU count (see violations).")
    valid: bool = Field(description="Buildable and no error-severity violation.")
    violations: list[ViolationBrief] = Field(default_factory=list, description="First violations, errors first.")
    violations_total: int = Field(default=0, description="All violations found.")
    cost: CostBrief | None = Field(default=None, description="Predicted figures; None when not buildable.")
    meets_targets: bool = Field(default=False, description="TTFT/TPOT targets met and memory fits.")
    misses: list[str] = Field(default_factory=list, description="Missed targets and memory overflow, with the gaps.")

    @property
    def acceptable(self) -> bool:
        """Valid, fits and on target: nothing left to repair."""
        return self.valid and self.meets_targets


class CandidateBrief(Result):
    """One ranked strategy of a search."""

    strategy: str
    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    memory_per_gpu_gb: float
    meets_targets: bool
    misses: list[str] = Field(default_factory=list)


class SearchSummary(Result):
    """Ranked strategies, or why nothing fits."""

    feasible: bool = Field(description="False when no strategy fits in memory.")
    objective: str
    candidates: list[CandidateBrief] = Field(default_factory=list, description="Best first.")
    frontier: list[str] = Field(default_factory=list, description="Pareto-optimal SPECs, by tokens/s/user.")
    evaluated: int = 0
    rejected: dict[str, int] = Field(default_factory=dict, description="Pruned strategies by rule ID.")
    min_gpus: int | None = Field(default=None, description="When infeasible: fewest GPUs that would fit.")
    message: str = ""


class DagCheck(Result):
    """A DAG validated (and priced, when submitted and valid)."""

    valid: bool
    nodes: int
    edges: int
    strategy: str | None = Field(default=None, description="The DAG's strategy SPEC, when it could be read.")
    violations: list[ViolationBrief] = Field(default_factory=list)
    violations_total: int = 0
    rules_checked: int = 0
    cost: CostBrief | None = None
    meets_targets: bool | None = None
    misses: list[str] = Field(default_factory=list)


class PhaseBrief(Result):
    """One phase's schedule, briefly."""

    latency_ms: float
    exposed_communication_ms: float
    collectives: int
    inter_node_collectives: int
    bubble_fraction: float


class MemoryBrief(Result):
    """Memory per GPU of one pool."""

    pool: str
    weights_gb: float
    kv_cache_gb: float
    total_gb: float
    capacity_gb: float
    fits: bool


class CostSummary(Result):
    """A cost report without the critical paths."""

    headline: CostBrief
    prefill: PhaseBrief
    decode: PhaseBrief
    memory: list[MemoryBrief]
    kv_transfer_ms: float
    meets_targets: bool
    misses: list[str] = Field(default_factory=list)


class BuildSummary(Result):
    """What a built DAG holds."""

    strategy: str
    nodes: int
    edges: int
    node_kinds: dict[str, int] = Field(description="Nodes per kind.")
    dag: dict[str, Any] | None = Field(default=None, description="The whole DAG, when asked for.")


# --------------------------------------------------------------------------------------------- registry

A = TypeVar("A", bound=Args)


@dataclass(frozen=True)
class Capability:
    """One capability: its name, argument model, description and the function (keyword arguments)."""

    name: str
    args: type[Args]
    description: str
    func: Callable[..., Any]


CAPABILITIES: dict[str, Capability] = {}
"""Every capability by name, in definition order."""


def _field_error(exc: ValidationError) -> InputError:
    errors = exc.errors()
    places = [".".join(str(p) for p in e["loc"]) or "arguments" for e in errors]
    text = "; ".join(f"{where}: {e['msg']}" for where, e in zip(places, errors[:3], strict=False))
    if len(errors) > 3:
        text += f" (and {len(errors) - 3} more)"
    return InputError(text, field=places[0], fix=f"correct '{places[0]}' and call again")


def parse_args(model: type[A], values: dict[str, Any]) -> A:
    """``values`` checked by ``model``; a bad value raises InputError naming the field."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise _field_error(exc) from None


def capability(args_model: type[A]) -> Callable[[Callable[[A], Any]], Callable[..., Any]]:
    """Register ``func(args)`` as a capability called with keyword arguments that ``args_model`` checks."""

    def wrap(func: Callable[[A], Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def call(**kwargs: Any) -> Any:
            return func(parse_args(args_model, kwargs))

        params = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=field.annotation,
                                    default=inspect.Parameter.empty if field.is_required() else field.default)
                  for name, field in args_model.model_fields.items()]
        call.__signature__ = inspect.Signature(params, return_annotation=inspect.signature(func).return_annotation)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in params}
        description = inspect.cleandoc(func.__doc__ or args_model.__doc__ or func.__name__)
        CAPABILITIES[func.__name__] = Capability(func.__name__, args_model, description, call)
        return call

    return wrap


def _allowed_roots() -> list[Path]:
    raw = os.environ.get("SHARDPLAN_ALLOWED_ROOTS")
    roots = [Path(p) for p in raw.split(os.pathsep) if p] if raw else [Path.cwd()]
    return [r.expanduser().resolve() for r in roots]


def _check_path(value: str, field: str, *, always: bool = False) -> None:
    """Refuse a file path outside the allowed roots (the working directory, or $SHARDPLAN_ALLOWED_ROOTS)."""
    from .models import bundled_models

    looks_like_path = always or value.endswith((".json", ".yaml", ".yml")) or os.sep in value and (
        value.strip().lower() not in {r.lower() for r in bundled_models()})
    if not looks_like_path:
        return
    target = Path(value).expanduser().resolve()
    if not any(target == root or root in target.parents for root in _allowed_roots()):
        raise InputError(f"{field} path {value} lies outside the allowed folders", field=field,
                         fix="use a bundled model name, or a file under the working directory "
                             "(or a folder listed in SHARDPLAN_ALLOWED_ROOTS)")


def _r(value: float) -> float:
    return round(float(value), 3)


def _brief_violations(report: ValidationReport) -> list[ViolationBrief]:
    return [ViolationBrief(rule=v.rule, severity=v.severity, message=v.message, fix=v.fix, nodes=v.nodes[:3])
            for v in report.violations[:MAX_VIOLATIONS]]


def _brief_cost(cost: CostReport) -> CostBrief:
    return CostBrief(ttft_ms=_r(cost.ttft_ms), tpot_ms=_r(cost.tpot_ms), tokens_per_s=_r(cost.tokens_per_s),
                     tokens_per_s_per_gpu=_r(cost.tokens_per_s_per_gpu),
                     tokens_per_s_per_user=_r(cost.tokens_per_s_per_user),
                     memory_per_gpu_gb=_r(cost.memory_per_gpu_gb), fits=cost.fits)


def _misses(cost: CostReport) -> list[str]:
    misses = list(cost.target_misses)
    for pool in cost.memory:
        if not pool.fits:
            misses.append(f"memory ({pool.pool}): {pool.total_gb:.1f} GB per GPU exceeds "
                          f"{pool.capacity_gb:g} GB (MEM-1)")
    return misses


def _read_dag_json(source: str | dict[str, Any]) -> Any:
    """Parse and size-check DAG JSON before any schema work."""
    from ..validators.schema_check import parse_json

    if isinstance(source, str):
        if len(source) > MAX_DAG_CHARS:
            raise InputError(f"dag_json: {len(source):,} characters exceed the limit of {MAX_DAG_CHARS:,}",
                             field="dag_json", fix="send a smaller DAG (fewer GPUs or microbatches)")
        # Every node has one "id" key and edges have none: count them in the text, so a DAG that claims a
        # million nodes is refused before a million dicts are built.
        claimed = source.count('"id"')
        if claimed > MAX_DAG_NODES:
            raise InputError(f"dag_json: {claimed:,} nodes exceed the limit of {MAX_DAG_NODES:,}", field="dag_json",
                             fix="send a smaller DAG (fewer GPUs or microbatches)")
        source = parse_json(source)
    obj = source.get("dag") if isinstance(source, dict) and "dag" in source and "nodes" not in source else source
    nodes = obj.get("nodes") if isinstance(obj, dict) else None
    if isinstance(nodes, list) and len(nodes) > MAX_DAG_NODES:
        raise InputError(f"dag_json: {len(nodes):,} nodes exceed the limit of {MAX_DAG_NODES:,}", field="dag_json",
                         fix="send a smaller DAG (fewer GPUs or microbatches)")
    return source


# -------------------------------------------------------------------------------------- shared evaluation


def _request_key(request: PlanRequest) -> str:
    return request.model_copy(update={"policy": "builtin"}).model_dump_json()


@functools.lru_cache(maxsize=64)
def _evaluate(request_json: str, spec: str) -> StrategyCheck:
    from .contracts.strategy import parse_strategy
    from .evaluation import evaluate
    from .feasibility import strategy_problems
    from .planner import resolve_request

    request = PlanRequest.model_validate_json(request_json)
    strategy = parse_strategy(spec)
    model, cluster = resolve_request(request)
    problems = strategy_problems(model, strategy, request.workload, cluster.world_size)
    if problems:
        briefs = [ViolationBrief(rule=p.rule, severity="error", message=p.message, fix=p.fix) for p in problems]
        # The given text, not to_spec(): a plain list with sp would read back differently in decode.
        return StrategyCheck(strategy=spec, gpus_used=strategy.gpus, buildable=False, valid=False,
                             violations=briefs[:MAX_VIOLATIONS], violations_total=len(briefs))
    evaluation = evaluate(model, cluster, strategy, request.workload)
    report, cost = evaluation.validation, evaluation.cost
    misses = _misses(cost)
    return StrategyCheck(strategy=strategy.to_spec(), gpus_used=strategy.gpus, buildable=True, valid=report.valid,
                         violations=_brief_violations(report), violations_total=len(report.violations),
                         cost=_brief_cost(cost), meets_targets=not misses, misses=misses)


def evaluate_strategy(request: PlanRequest, strategy: str) -> StrategyCheck:
    """Build, validate and price ``strategy`` for ``request`` (memoised: the agent checks what a tool built).

    Raises:
        InputError: unreadable strategy text, unknown model or GPU.
    """
    return _evaluate(_request_key(request), strategy.strip()).model_copy(deep=True)


@functools.lru_cache(maxsize=8)
def _search(request_json: str) -> Any:
    from .planner import resolve_request
    from .search import search

    request = PlanRequest.model_validate_json(request_json)
    model, cluster = resolve_request(request)
    try:
        return search(model, cluster, request.workload, top=SEARCH_DEPTH)
    except InfeasibleError as exc:
        return exc


def search_request(request: PlanRequest) -> Any:
    """The strategy search for ``request`` (memoised): a SearchResult, or the InfeasibleError it raised."""
    return _search(_request_key(request))


def alternatives_for(request: PlanRequest, chosen: StrategyCheck, limit: int = 4) -> list[Alternative]:
    """The runners-up of the search for ``request`` against ``chosen``, each with why it lost."""
    from .planner import alternatives_from
    from .search import Candidate, SearchResult

    result = search_request(request)
    if not isinstance(result, SearchResult):
        return []
    match = next((c for c in result.candidates if c.spec == chosen.strategy), None)
    if match is None and chosen.cost is not None:
        from .contracts.strategy import parse_strategy

        c = chosen.cost
        match = Candidate(strategy=parse_strategy(chosen.strategy), spec=chosen.strategy, ttft_ms=c.ttft_ms,
                          tpot_ms=c.tpot_ms, tokens_per_s=c.tokens_per_s, tokens_per_s_per_gpu=c.tokens_per_s_per_gpu,
                          tokens_per_s_per_user=c.tokens_per_s_per_user, memory_per_gpu_gb=c.memory_per_gpu_gb,
                          fits=c.fits, meets_targets=chosen.meets_targets, target_misses=chosen.misses,
                          scored_by="schedule")
    if match is None:
        return []
    return alternatives_from(result, match, request.workload.objective, limit)


def infeasible_plan(request: PlanRequest, exc: InfeasibleError) -> Plan:
    """The plan of a request that nothing fits: no strategy, the fewest GPUs that would fit."""
    from .. import __version__

    return Plan(shardplan_version=__version__, request=request, status="infeasible", strategy=None,
                min_gpus=exc.min_gpus, explanation=f"{exc} (MEM-1).", messages=[str(exc)])


# ---------------------------------------------------------------------------------------------- capabilities


@capability(KnowledgeQuery)
def search_knowledge(args: KnowledgeQuery) -> list[dict[str, Any]]:
    """Search the knowledge base of inference-parallelism rules; returns sections with their rule IDs."""
    from ..knowledge import search

    return [{"doc": s.doc, "heading": s.heading, "rule_ids": s.rule_ids, "score": _r(s.score),
             "text": s.text if len(s.text) <= 1200 else s.text[:1197] + "..."} for s in search(args.query, args.k)]


@capability(RuleArgs)
def get_rule(args: RuleArgs) -> dict[str, Any]:
    """One knowledge rule by ID (e.g. DEC-1): its severity, statement and where it is written."""
    from ..knowledge import get_rule as lookup

    try:
        return lookup(args.rule_id).model_dump()
    except KeyError as exc:
        raise InputError(str(exc.args[0]), field="rule_id", fix="use an ID from search_knowledge results") from None


@capability(NoArgs)
def list_models(args: NoArgs) -> list[dict[str, Any]]:
    """The bundled models with architecture, size and whether they are mixture-of-experts."""
    from .model_math import params_active, params_total
    from .models import bundled_models, load_model

    rows = []
    for repo in bundled_models():
        spec = load_model(repo)
        rows.append({"name": repo, "architecture": spec.architecture, "params_total": params_total(spec),
                     "params_active": params_active(spec), "moe": spec.is_moe, "layers": spec.num_layers})
    return rows


@capability(NoArgs)
def list_gpus(args: NoArgs) -> list[dict[str, Any]]:
    """The GPU catalog: memory, bandwidths and peak dense TFLOP/s per GPU."""
    from .hardware import gpu_catalog

    return [{"name": name, "full_name": g.full_name, "memory_gb": g.memory_gb,
             "memory_bandwidth_gbps": g.memory_bandwidth_gbps, "dense_tflops": g.dense_tflops,
             "intra_node_bandwidth_gbps": g.intra_node_bandwidth_gbps,
             "inter_node_bandwidth_gbps": g.inter_node_bandwidth_gbps, "gpus_per_node": g.gpus_per_node}
            for name, g in gpu_catalog().items()]


@capability(ModelArgs)
def describe_model(args: ModelArgs) -> dict[str, Any]:
    """A model's architecture and derived sizes: parameters, layers, heads, experts, KV bytes per token."""
    from .model_math import flops_per_token, kv_bytes_per_token, params_active, params_total, weight_bytes
    from .models import load_model

    _check_path(args.model, "model")
    spec = load_model(args.model)
    return {
        "name": spec.name, "architecture": spec.architecture, "params_total": params_total(spec),
        "params_active": params_active(spec), "weight_bytes": weight_bytes(spec), "layers": spec.num_layers,
        "hidden_size": spec.hidden_size, "attention_heads": spec.num_attention_heads, "kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim, "intermediate_size": spec.intermediate_size,
        "attention": "mla" if spec.mla else ("mha" if spec.num_kv_heads == spec.num_attention_heads else "gqa"),
        "experts": spec.moe.num_experts if spec.moe else 0,
        "experts_per_token": spec.moe.experts_per_token if spec.moe else 0,
        "dense_layers": spec.moe.first_dense_layers if spec.moe else spec.num_layers,
        "kv_bytes_per_token": kv_bytes_per_token(spec), "flops_per_token": flops_per_token(spec),
        "weight_dtype": spec.weight_dtype, "kv_dtype": spec.kv_dtype,
    }


def _summarize_search(result: Any, objective: str, top: int) -> SearchSummary:
    from .search import SearchResult

    if not isinstance(result, SearchResult):
        return SearchSummary(feasible=False, objective=objective, min_gpus=result.min_gpus, message=str(result))
    candidates = [CandidateBrief(strategy=c.spec, ttft_ms=_r(c.ttft_ms), tpot_ms=_r(c.tpot_ms),
                                 tokens_per_s_per_gpu=_r(c.tokens_per_s_per_gpu),
                                 tokens_per_s_per_user=_r(c.tokens_per_s_per_user),
                                 memory_per_gpu_gb=_r(c.memory_per_gpu_gb), meets_targets=c.meets_targets,
                                 misses=c.target_misses) for c in result.candidates[:top]]
    return SearchSummary(feasible=True, objective=result.objective, candidates=candidates,
                         frontier=[c.spec for c in result.frontier][:10], evaluated=result.evaluated,
                         rejected=result.rejected,
                         message=f"{result.evaluated} strategies priced; best first")


@capability(SearchArgs)
def search_strategies(args: SearchArgs) -> SearchSummary:
    """Rank the strategies that fit the request, best first for its objective, with predicted figures.

    When nothing fits, ``feasible`` is false and ``min_gpus`` says how many GPUs would.
    """
    request = args.to_request()
    return _summarize_search(search_request(request), request.workload.objective, args.top)


@capability(StrategyArgs)
def propose_strategy(args: StrategyArgs) -> StrategyCheck:
    """Check one strategy for the request: build its DAG, validate it against the rules, price it.

    Returns whether it is valid, the violations (rule ID, message, fix hint), the predicted figures and
    the missed targets.
    """
    return evaluate_strategy(args.to_request(), args.strategy)


def _check_dag(source: str | dict[str, Any], *, price: bool) -> DagCheck:
    from ..validators import validate_json
    from .cost.estimate import estimate_cost as run_cost

    obj = _read_dag_json(source)
    report = validate_json(obj)
    dag_obj = obj.get("dag") if isinstance(obj, dict) and "dag" in obj and "nodes" not in obj else obj
    check = DagCheck(valid=report.valid, nodes=report.nodes, edges=report.edges,
                     violations=_brief_violations(report), violations_total=len(report.violations),
                     rules_checked=len(report.rules_checked))
    if not report.valid or not isinstance(dag_obj, dict):
        return check
    dag = DAG.model_validate(dag_obj)
    check.strategy = dag.meta.strategy.to_spec()
    if price:
        cost = run_cost(dag)
        check.cost = _brief_cost(cost)
        check.misses = _misses(cost)
        check.meets_targets = not check.misses
    return check


@capability(DagArgs)
def submit_dag(args: DagArgs) -> DagCheck:
    """Submit a whole DAG (JSON): validate it against every rule and, when valid, price it."""
    return _check_dag(args.dag_json, price=True)


@capability(DagArgs)
def validate_dag(args: DagArgs) -> DagCheck:
    """Validate a DAG (or a plan holding one) given as JSON: schema first, then every rule."""
    return _check_dag(args.dag_json, price=False)


@capability(CostArgs)
def estimate_cost(args: CostArgs) -> CostSummary:
    """Price a DAG (dag_json) or a strategy for a request: TTFT, TPOT, throughput, memory per GPU."""
    from .builder import build_dag as build
    from .contracts.strategy import parse_strategy
    from .cost.estimate import estimate_cost as run_cost
    from .planner import resolve_request

    if args.dag_json is not None:
        report = validate_dag(dag_json=args.dag_json)
        if not report.valid and any(v.rule == "SCHEMA" for v in report.violations):
            first = report.violations[0]
            raise InputError(f"dag_json is not a DAG: {first.message}", field="dag_json", fix=first.fix)
        obj = _read_dag_json(args.dag_json)
        dag = DAG.model_validate(obj.get("dag") if "dag" in obj and "nodes" not in obj else obj)
        cost = run_cost(dag)
    else:
        values = args.model_dump(exclude={"dag_json", "strategy"})
        request = parse_args(RequestArgs, values).to_request()
        model, cluster = resolve_request(request)
        cost = run_cost(build(model, cluster, parse_strategy(args.strategy or ""), request.workload), cluster)
    return CostSummary(
        headline=_brief_cost(cost),
        prefill=_phase_brief(cost, "prefill"), decode=_phase_brief(cost, "decode"),
        memory=[MemoryBrief(pool=m.pool, weights_gb=_r(m.weights_gb), kv_cache_gb=_r(m.kv_cache_gb),
                            total_gb=_r(m.total_gb), capacity_gb=m.capacity_gb, fits=m.fits) for m in cost.memory],
        kv_transfer_ms=_r(cost.kv_transfer_ms), meets_targets=cost.meets_targets and cost.fits, misses=_misses(cost))


def _phase_brief(cost: CostReport, name: Literal["prefill", "decode"]) -> PhaseBrief:
    p = getattr(cost, name)
    return PhaseBrief(latency_ms=_r(p.latency_ms), exposed_communication_ms=_r(p.exposed_communication_ms),
                      collectives=p.collectives, inter_node_collectives=p.inter_node_collectives,
                      bubble_fraction=_r(p.bubble_fraction))


@capability(BuildArgs)
def build_dag(args: BuildArgs) -> BuildSummary:
    """Build the parallel strategy DAG of a strategy; a summary, or the whole DAG with include_dag."""
    from collections import Counter

    from .builder import build_dag as build
    from .contracts.strategy import parse_strategy
    from .planner import resolve_request

    request = args.to_request()
    model, cluster = resolve_request(request)
    dag = build(model, cluster, parse_strategy(args.strategy), request.workload)
    kinds = Counter(node.kind for node in dag.nodes)
    return BuildSummary(strategy=dag.meta.strategy.to_spec(), nodes=len(dag.nodes), edges=len(dag.edges),
                        node_kinds=dict(sorted(kinds.items())),
                        dag=dag.model_dump(mode="json") if args.include_dag else None)


@capability(PlanArgs)
def plan(args: PlanArgs) -> Plan:
    """Plan a deployment: search, build, validate and price; the best strategy with runners-up and why."""
    from .planner import plan as run_plan

    result = run_plan(args.to_request())
    if not args.include_dag:
        result.dag = None
    return result


def error_dict(exc: Exception) -> dict[str, Any]:
    """A structured error an LLM or another agent can act on: ``error``, ``message``, ``field``, ``fix``."""
    if isinstance(exc, InputError):
        return exc.to_dict()
    if isinstance(exc, ValidationError):
        return _field_error(exc).to_dict()
    if isinstance(exc, InfeasibleError):
        return {"error": "InfeasibleError", "message": str(exc), "field": None, "fix": None,
                "min_gpus": exc.min_gpus}
    return {"error": type(exc).__name__, "message": str(exc)[:500], "field": None, "fix": None}


def dump(result: Any) -> Any:
    """A capability's result as JSON-able data."""
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json", exclude_none=False)
    if isinstance(result, list):
        return [dump(item) for item in result]
    return json.loads(json.dumps(result, default=str))

