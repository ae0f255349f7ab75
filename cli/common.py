"""What several commands share: the request options, and turning them into contracts.

``plan``, ``search`` and ``build`` take the same model, hardware and workload options. They are
declared once here; :func:`request_options` adds them to a command and hands it the
:class:`~shardplan.contracts.PlanRequest` they describe.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer

from shardplan.cli.request_options import REQUEST_PARAMETERS as _REQUEST_PARAMETERS
from shardplan.contracts.common import ServingEngine
from shardplan.contracts.constraints import parse_constraints
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.speculation import speculation_option
from shardplan.contracts.targets import parse_slo_percentile
from shardplan.contracts.workload import Workload, default_objective
from shardplan.errors import InputError
from shardplan.limits import MAX_INT_DIGITS, RATE_RANGE
from shardplan.tools.catalogs.drafters import check_drafter
from shardplan.tools.catalogs.gpus import cluster_for, get_gpu, gpu_catalog
from shardplan.tools.catalogs.models import check_workload_context
from shardplan.tools.catalogs.pools import check_two_pools
from shardplan.tools.catalogs.weight_formats import parse_weight_formats, request_model
from shardplan.tools.planning.assumptions import request_assumptions
from shardplan.tools.planning.engine_choice import parse_engines, several_engines
from shardplan.tools.planning.gpu_choice import several_gpu_types
from shardplan.tools.planning.planner import resolve_request
from shardplan.tools.traffic.sizing import parse_traffic, workload_fields

__all__ = ["build_request", "request_options", "resolve_target", "JsonFlag", "SeveralGpus", "SeveralEngines"]

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]

_KW = inspect.Parameter.KEYWORD_ONLY
_REQUEST_NAMES = [p.name for p in _REQUEST_PARAMETERS]


def build_request(
    model: str,
    gpu: str | None = None,
    gpus: int | None = None,
    gpus_per_node: int | None = None,
    cluster: str | Path | None = None,
    isl: int | None = None,
    osl: int | None = None,
    batch: int | None = None,
    prefill_batch: int | None = None,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    slo_percentile: str | None = None,
    objective: str | None = None,
    engine: str = "vllm",
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    attention_dtype: str | None = None,
    weight_dtype_for: list[str] | None = None,
    policy: str = "builtin",
    batching: str = "continuous",
    rate: float | None = None,
    gpu_memory_utilization: float = 0.9,
    max_batched_tokens: int = 8192,
    constraint: list[str] | None = None,
    isl_dist: str | None = None,
    osl_dist: str | None = None,
    workload: str | None = None,
    arrival: str | None = None,
    spec: str | None = None,
    spec_accept: float | None = None,
    prefix_hit: float | None = None,
    decode_gpu: str | None = None,
    decode_gpus: int | None = None,
) -> PlanRequest:
    """The PlanRequest that command-line options describe; the hardware part is resolved (and checked) here.
    Options left out take their defaults (prompt 2048, output 256, concurrency chosen by the search, objective
    throughput when targets or a rate are given and latency otherwise, GPU H100), and
    the request's ``assumptions`` say so, one line each. A length distribution or trace (``isl_dist``,
    ``osl_dist``, ``workload``) and an arrival process (``arrival``) become the workload's ``traffic``, and its
    lengths, sequences in flight and rate follow from them where not given
    (:func:`~shardplan.tools.traffic.sizing.workload_fields`).

    Raises:
        InputError: unknown GPU, unreadable cluster file, contradicting options, a count that does not
            fit, or a workload or format value out of range; the message names the option.

    >>> build_request("llama-3.1-8b", "H100", 4, isl=512).gpus
    4
    """
    from pydantic import ValidationError


    given = {name for name, value in (("isl", isl), ("osl", osl), ("batch", batch), ("objective", objective),
                                      ("gpu", gpu or cluster), ("gpus_per_node", gpus_per_node or cluster),
                                      ("weight_dtype", weight_dtype), ("kv_dtype", kv_dtype), ("rate", rate),
                                      ("weight_formats", weight_dtype_for),
                                      ("spec", spec))
             if value is not None}
    constraints = parse_constraints(constraint) if constraint else None
    where = cluster_for(gpu if gpu is not None else (None if cluster else "H100"), gpus, gpus_per_node, cluster,
                        decode_gpu, decode_gpus)
    # batch None: the search chooses the concurrency (unless a closed loop of clients fixes it)
    traffic = workload_fields(parse_traffic(isl_dist, osl_dist, workload, arrival), isl=isl, osl=osl, batch=batch,
                              rate=rate)
    if objective is None:
        objective = default_objective(ttft_ms, tpot_ms, traffic["rate"])
    try:
        # Options arrive as plain strings; validation turns them into the contract's closed vocabularies.
        request_workload = Workload.model_validate(
            {
                **traffic,
                "prefill_batch": prefill_batch,
                "ttft_ms": ttft_ms,
                "tpot_ms": tpot_ms,
                "slo_percentile": parse_slo_percentile(slo_percentile) if slo_percentile else "mean",
                "objective": objective,
                "batching": batching,
                "gpu_memory_utilization": gpu_memory_utilization,
                "max_batched_tokens": max_batched_tokens,
                "engine": engine,
                "speculation": speculation_option(spec, spec_accept),
                "prefix_hit": 0.0 if prefix_hit is None else prefix_hit,
            }
        )
        request = PlanRequest.model_validate(
            {
                "model": model,
                "gpu": where.gpu.name,
                "gpus": where.world_size,
                "gpus_per_node": where.gpus_per_node,
                "cluster": str(cluster) if cluster else None,
                "decode_gpu": where.decode_pool.gpu.name if where.decode_pool is not None else None,
                "decode_gpus": where.decode_pool.gpus if where.decode_pool is not None else None,
                "workload": request_workload,
                "weight_dtype": weight_dtype,
                "kv_dtype": kv_dtype,
                "attention_dtype": attention_dtype,
                "weight_formats": parse_weight_formats(weight_dtype_for),
                "policy": policy,
                "constraints": constraints,
            }
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][-1]) if first["loc"] else "request"
        raise InputError(
            f"--{name.replace('_', '-')}={first.get('input')!r}: {first['msg']}",
            field=name,
            fix=_FIXES.get(name, "see shardplan plan --help"),
        ) from None
    # The model is read now, so a wrong name or a broken config.json fails before any planning starts.
    model_spec = request_model(request)
    check_workload_context(model_spec, request.workload)
    check_drafter(model_spec, request.workload.speculation)
    check_two_pools(model_spec, where, request.workload, request.constraints)
    return request.model_copy(update={"assumptions": request_assumptions(request, given)})


_FIXES = {
    "isl": "give the prompt length in tokens, 1 or more",
    "osl": "give the output length in tokens, 1 or more",
    "batch": "give the number of concurrent sequences, 1 or more",
    "prefill_batch": "give how many prompts are prefilled together, from 1 up to --batch",
    "ttft_ms": "give the time-to-first-token target in milliseconds, above 0",
    "tpot_ms": "give the time-per-output-token target in milliseconds, above 0",
    "objective": "choose latency, throughput or goodput",
    "batching": "choose continuous or static",
    "rate": f"give the requests per second to serve, {RATE_RANGE}",
    "gpu_memory_utilization": "give the share of GPU memory the engine may use, above 0 and at most 1 (e.g. 0.9)",
    "max_batched_tokens": "give the tokens one step may carry, 1 or more (e.g. 8192)",
    "engine": "choose vllm, sglang or trtllm (plan also takes auto, or a comma list, to compare them)",
    "prefix_hit": "give the share of prompt tokens found in the prefix cache, from 0 up to below 1 (e.g. 0.5)",
    "weight_dtype": "choose bf16, fp16, fp8, int8 or fp4",
    "kv_dtype": "choose bf16, fp16, fp8, int8 or fp4",
    "attention_dtype": "choose bf16 or fp8 (fp8 needs --kv-dtype fp8)",
}


def resolve_target(**options: Any) -> tuple[ModelSpec, Cluster, Workload]:
    """The model, cluster and workload that the request options describe (see :func:`build_request`)."""

    request = build_request(**options)
    model, cluster = resolve_request(request)
    return model, cluster, request.workload


def _check_digits(values: dict[str, Any]) -> None:
    """Refuse an integer option of more digits than any real count has, before anything adds or prints it:
    click reads up to 4,300 digits, and a sum or a message past that limit would be a traceback.

    Raises:
        InputError: naming the option and the limit.
    """
    for name, value in values.items():
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_INT_DIGITS:
            option = "--" + name.replace("_", "-")
            raise InputError(f"{option} has {len(str(abs(value))):,} digits, more than {MAX_INT_DIGITS}", field=name,
                             fix=f"give {option} a realistic whole number")


_GPU_TEXT = "gpu_types"
"""A command with a parameter of this name takes several GPU types in --gpu (a comma list or 'any')."""


class SeveralGpus(NamedTuple):
    """--gpu naming several GPU types: its text, and the GPU budget and node size the user gave (None: one node
    of each type, of its catalog size)."""

    text: str
    budget: int | None
    gpus_per_node: int | None


def _several_gpus(options: dict[str, Any]) -> SeveralGpus | None:
    """The --gpu text when it names several GPU types (None for one); the request is then built for the first
    catalog GPU, with one node of it where --gpus is left out, and the command plans each type itself.

    Raises:
        InputError: several types with --cluster (a cluster file holds one type).
    """
    text = options.get("gpu")
    if text is None or not several_gpu_types(text):
        return None
    if options.get("cluster") is not None:
        raise InputError("several GPU types in --gpu with --cluster", field="gpu",
                         fix="a cluster file holds one GPU type: leave out --gpu, or --cluster to compare types")
    if options.get("decode_gpu") is not None:
        raise InputError("several GPU types in --gpu with --decode-gpu", field="decode_gpu",
                         fix="name one prefill GPU type in --gpu with --decode-gpu, or leave out --decode-gpu")
    first = get_gpu(next(iter(gpu_catalog())))
    budget, per_node = options.get("gpus"), options.get("gpus_per_node")
    options["gpu"] = first.name
    options["gpus"] = budget or per_node or first.gpus_per_node
    return SeveralGpus(text, budget, per_node)


_ENGINE_TEXT = "engines"
"""A command with a parameter of this name takes several engines in --engine (a comma list or 'auto')."""

SeveralEngines = list[ServingEngine]
"""--engine naming several engines: their names, in the order given."""


def _several_engines(options: dict[str, Any]) -> list[ServingEngine] | None:
    """The engines --engine names when it names several (None for one); the request is then built for the first,
    and the command plans each itself."""
    text = options.get("engine")
    if text is None or not several_engines(text):
        return None
    engines = list(parse_engines(text))
    options["engine"] = engines[0]
    return engines


def request_options(command: Callable[..., None] | None = None, *, optional: bool = False) -> Any:
    """Give a command the shared request options; it receives them as ``request`` (a PlanRequest).

    With ``optional=True`` the model may be left out, and the command then gets ``request=None`` (for
    commands that also read a file). The command's own ``policy`` option, if any, goes into the request.
    """

    def decorate(func: Callable[..., None]) -> Callable[..., None]:
        own = [
            p.replace(kind=_KW)
            for p in inspect.signature(func, eval_str=True).parameters.values()
            if p.name not in ("request", _GPU_TEXT, _ENGINE_TEXT)
        ]
        several = _GPU_TEXT in inspect.signature(func).parameters
        several_engine = _ENGINE_TEXT in inspect.signature(func).parameters
        shared = list(_REQUEST_PARAMETERS)
        if optional:
            shared[0] = shared[0].replace(
                default=None, annotation=Annotated[str | None, shared[0].annotation.__metadata__[0]]
            )

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> None:
            _check_digits(kwargs)
            options = {name: kwargs.pop(name) for name in _REQUEST_NAMES}
            if "policy" in kwargs:
                options["policy"] = kwargs["policy"]
            if several:
                kwargs[_GPU_TEXT] = _several_gpus(options)
            if several_engine:
                kwargs[_ENGINE_TEXT] = _several_engines(options)
            request = None if options["model"] is None else build_request(**options)
            func(request=request, **kwargs)

        parameters = shared + own
        wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper

    return decorate(command) if command is not None else decorate
