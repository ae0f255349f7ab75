"""Plain-language planning requests read into fields, deterministically (no language model).

``shardplan chat`` with the ``builtin`` policy reads a request such as *"Plan DeepSeek-V3 on two nodes of
8 H200 for 8k prompts and 1k outputs, first token under 2 s"* with :func:`parse_request`, asks back with
:func:`clarifying_question` when :func:`missing_fields` is not empty, and plans :func:`to_plan_request`.

How the text is read:

* Each field family has one reader (models, GPU types, GPU counts, targets, lengths, batch, objective,
  formats, disaggregation). Readers run in a fixed order over one copy of the text and blank out what
  they matched, so no phrase is read twice ("Mixtral 8x7B" is a model, never 8 GPUs of something).
* ``k`` after a length is 1024 and ``m`` is 1024²: "8k prompts" is 8192 tokens, "1k outputs" 1024,
  following the power-of-two convention of serving benchmarks. Written-out numbers are taken as they are
  ("prompts of 1,000 tokens" is 1000).
* A bare format ("in fp8") sets the weight format only; the KV cache changes only when "kv" is said.
* Two different values for one field in one message are recorded in ``contradictions``, never raised;
  the first one is kept. A value after "instead of", "rather than", "from", "replace" or "not" is the one
  being dropped and is ignored ("use H200 instead of H100").
* A follow-up is read on its own and laid over ``previous``: what it says wins, the rest is kept.

>>> parse_request("Llama 3.1 70B on 8 H100s, 4k prompts, TTFT under 500 ms").ttft_ms
500.0
"""

from __future__ import annotations

import re
from functools import partial

from pydantic import BaseModel, ConfigDict, Field

from shardplan.agent.parse.constraint_phrases import read_constraints
from shardplan.agent.parse.corrections import read_with_corrections
from shardplan.agent.parse.edits import apply_edits, read_edits
from shardplan.agent.parse.features import (
    FEATURE_SETTINGS,
    missing_features,
    read_features,
    settle_features,
    workload_features,
)
from shardplan.agent.parse.formats import read_dtypes
from shardplan.agent.parse.machines import read_machines
from shardplan.agent.parse.pools import read_pools
from shardplan.agent.parse.quantities import read_quantities
from shardplan.agent.parse.readers import (
    _note_leftovers,
    _read_disaggregation,
    _read_gpu_counts,
    _read_gpu_types,
    _read_intent,
    _read_models,
    _read_objective,
)
from shardplan.agent.parse.settle import Counts, across_all, merge_constraints, settle_counts
from shardplan.agent.parse.targets import read_percentile, read_targets
from shardplan.agent.parse.text import Findings, Intent, Scan, _normalise
from shardplan.agent.parse.traffic import read_arrival, read_length_ranges, read_price, read_rate, read_trace
from shardplan.agent.parse.typos import mend_typos
from shardplan.contracts.common import DType, Objective
from shardplan.contracts.constraints import parse_constraints
from shardplan.contracts.economics import GpuPrice
from shardplan.contracts.model import WeightComponent
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.targets import SloPercentile
from shardplan.contracts.workload import Workload, default_objective
from shardplan.errors import InputError
from shardplan.limits import MAX_RATE, MIN_RATE
from shardplan.text import counted
from shardplan.tools.catalogs.drafters import check_drafter
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.catalogs.models import check_context
from shardplan.tools.catalogs.weight_formats import request_model
from shardplan.tools.planning.assumptions import request_assumptions
from shardplan.tools.planning.gpu_choice import ANY, parse_gpu_types
from shardplan.tools.traffic.sizing import parse_traffic, workload_fields

__all__ = [
    "DEFAULT_ISL",
    "DEFAULT_OSL",
    "Intent",
    "ParsedRequest",
    "parse_request",
    "missing_fields",
    "to_plan_request",
    "gpu_types",
    "clarifying_question",
]

DEFAULT_ISL = 2048
"""Prompt length assumed when a request gives none."""
DEFAULT_OSL = 256
"""Output length assumed when a request gives none."""


class ParsedRequest(BaseModel):
    """What a plain-language message said; every field is None when the message did not say it."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, description="Bundled Hugging Face id.")
    gpu: str | None = Field(default=None, description="GPU catalog name.")
    gpus: int | None = Field(default=None, ge=1, description="GPUs in all.")
    gpus_per_node: int | None = Field(default=None, ge=1, description="GPUs in one node.")
    nodes: int | None = Field(default=None, ge=1, description="Nodes.")
    isl: int | None = Field(default=None, ge=1, description="Prompt length in tokens.")
    osl: int | None = Field(default=None, ge=1, description="Output length in tokens.")
    isl_dist: str | None = Field(default=None, description="Prompt lengths as a distribution (uniform:A,B).")
    osl_dist: str | None = Field(default=None, description="Output lengths as a distribution (uniform:A,B).")
    batch: int | None = Field(default=None, ge=1, description="Batch size or concurrent users.")
    arrival: str | None = Field(
        default=None, description="How requests arrive, as text: gamma:cv=3 (bursty), poisson, closed:N (N concurrent "
        "users or clients)."
    )
    rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE, description="Requests per second to serve.")
    trace: str | None = Field(
        default=None, description="A bundled request trace by name (azure-conv, azure-code), or a trace file's path "
        "(CSV or JSON Lines): its prompt and output lengths stand for the traffic's."
    )
    ttft_ms: float | None = Field(default=None, gt=0, description="Time-to-first-token target, ms.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Time-per-output-token target, ms.")
    slo_percentile: SloPercentile | None = Field(
        default=None, description="What the targets bound: p50, p90, p95 or p99 over requests; None: the mean."
    )
    objective: Objective | None = Field(default=None, description="latency, throughput or goodput.")
    weight_dtype: DType | None = Field(default=None, description="Weight format override.")
    kv_dtype: DType | None = Field(default=None, description="KV-cache format override.")
    weight_formats: dict[WeightComponent, DType] | None = Field(
        default=None, description="Parts stored apart from weight_dtype, as a request given whole stated them (the "
        "words are not read for them); a follow-up keeps them.")
    disaggregated: bool | None = Field(default=None, description="Prefill and decode on separate GPUs.")
    spec_method: str | None = Field(
        default=None, description="Speculative decoding's drafter: mtp, eagle or draft:MODEL (a bundled id or path)."
    )
    spec_tokens: int | None = Field(default=None, ge=1, description="Draft tokens per step (K).")
    spec_accept: float | None = Field(
        default=None, ge=0, description="Mean accepted draft tokens per step, as said (never assumed)."
    )
    prefix_hit: float | None = Field(
        default=None, ge=0, lt=1, description="Share of prompt tokens found in the prefix cache."
    )
    prefix_tokens: int | None = Field(default=None, ge=1, description="Tokens of a prefix every prompt shares.")
    gpu_price: float | None = Field(
        default=None, gt=0, description="US dollars per GPU-hour of the request's GPU, as said (\"$2.5/h\")."
    )
    said: dict[str, str] = Field(
        default_factory=dict, description="Each field this message set -> the words it was read from, echoed back."
    )
    intent: Intent = Field(default="plan", description="What the message asks for.")
    about: str | None = Field(
        default=None, description="Technique(s) asked about, comma-separated: pp, tp, ep, sp, dp, adp, disagg, mb."
    )
    constraints: list[str] = Field(
        default_factory=list, description="Constraints in text form (pp=1, tp-in-node, ep>=2 ...), this message's and "
        "the earlier ones it did not replace."
    )
    contradictions: list[str] = Field(default_factory=list, description="Things the message says both ways.")
    notes: list[str] = Field(default_factory=list, description="Assumptions made and things not understood.")


_SETTINGS = (
    "model",
    "gpu",
    "gpus",
    "gpus_per_node",
    "nodes",
    "isl",
    "osl",
    "isl_dist",
    "osl_dist",
    "batch",
    "arrival",
    "rate",
    "trace",
    "ttft_ms",
    "tpot_ms",
    "slo_percentile",
    "objective",
    "weight_dtype",
    "kv_dtype",
    "disaggregated",
    "gpu_price",
    *FEATURE_SETTINGS,
)
"""The fields a message sets and a follow-up inherits."""


# ---------------------------------------------------------------------------------------------------------
# Putting a request together


def _assemble(found: Findings, intent: Intent, about: str | None, previous: ParsedRequest | None) -> ParsedRequest:
    """This message's findings laid over ``previous``, with counts settled and defaults noted."""
    said = {name: found.first(name) for name in _SETTINGS}
    clients = found.values.get("clients")
    if said["arrival"] is None and clients:
        said["arrival"] = f"closed:{clients[0]}"  # "64 concurrent users": a closed loop, unless arrivals are named
        found.said.setdefault("arrival", found.said.get("clients", ""))
    merged = {name: getattr(previous, name) for name in _SETTINGS} if previous else dict.fromkeys(_SETTINGS)
    dropped = apply_edits(said, dict(merged), found)  # "double the batch": relative to the thread's last request
    drafter_before = merged["spec_method"]
    if said["batch"] is not None and said["arrival"] is None and str(merged["arrival"]).startswith("closed:"):
        # The earlier clients were the earlier concurrency, which this message replaces: with a count of users or
        # clients ("try 64 users instead") the loop keeps its kind at the new count, with a batch it is gone.
        clients_said = re.search(r"\b(?:users?|clients?|sessions?)\b", found.said.get("batch", ""))
        merged["arrival"] = f"closed:{said['batch']}" if clients_said else None
        if clients_said:
            found.said.setdefault("arrival", found.said["batch"])
    merged.update({name: value for name, value in said.items() if value is not None})
    merged.update(dict.fromkeys(dropped))
    if said["prefix_hit"] is not None or said["prefix_tokens"] is not None:  # the latest way of saying it wins
        merged.update(prefix_hit=said["prefix_hit"], prefix_tokens=said["prefix_tokens"])
    settle_features(merged, drafter_before, found)
    before = Counts(previous.gpus, previous.nodes, previous.gpus_per_node) if previous else Counts()
    counts = settle_counts(Counts(said["gpus"], said["nodes"], said["gpus_per_node"]), before, merged["gpu"], found)
    merged.update(gpus=counts.gpus, nodes=counts.nodes, gpus_per_node=counts.per_node)
    stated = next((found.said[n] for n in ("gpus", "nodes", "gpus_per_node") if n in found.said), None)
    for name in ("gpus", "nodes", "gpus_per_node"):  # a count that follows from the ones said, from their words
        if stated and merged[name] is not None and merged[name] != (getattr(previous, name) if previous else None):
            found.said.setdefault(name, stated)
    if merged["objective"] == "throughput" and (merged["ttft_ms"] or merged["tpot_ms"]):
        merged["objective"] = "goodput"
        found.notes.append("Throughput with latency targets is planned as goodput (throughput under the targets).")
    if intent == "plan":
        for name, default, what in (("isl", DEFAULT_ISL, "prompt"), ("osl", DEFAULT_OSL, "output")):
            # a trace's lengths stand in for both, a distribution's mean for its own
            if merged[name] is None and merged["trace"] is None and merged[f"{name}_dist"] is None:
                found.notes.append(f"No {what} length given; assuming {counted(default, 'token')}.")
    said_constraints = across_all(list(dict.fromkeys(found.values.get("constraints", []))), counts.gpus, found)
    constraints = merge_constraints(previous.constraints if previous else [], said_constraints, found)
    said_words = {k: v for k, v in found.said.items() if k in _SETTINGS or k.startswith("constraint ")}
    return ParsedRequest(**merged, intent=intent, about=about, constraints=constraints, said=said_words,
                         contradictions=found.contradictions, notes=found.notes,
                         weight_formats=previous.weight_formats if previous else None)


def parse_request(text: str, previous: ParsedRequest | None = None) -> ParsedRequest:
    """Read a plain-language planning request; with ``previous``, read it as a follow-up to that one.

    Never raises on odd text: what cannot be read is left None and explained in ``notes``, and what is
    said two ways is listed in ``contradictions``.

    >>> r = parse_request("Plan DeepSeek-V3 on two nodes of 8 H200 for 8k prompts and 1k outputs, "
    ...                   "first token under 2 s")
    >>> (r.model, r.gpu, r.gpus, r.nodes, r.isl, r.osl, r.ttft_ms)
    ('deepseek-ai/DeepSeek-V3', 'H200', 16, 2, 8192, 1024, 2000.0)
    >>> parse_request("now with 4 nodes", previous=r).gpus
    32
    """
    normalised, mended = mend_typos(_normalise(text))
    return read_with_corrections(normalised, previous, mended, partial(_read_message, original=text))


def _read_message(text: str, previous: ParsedRequest | None, notes: list[str], original: str = "") -> ParsedRequest:
    """One message (or one correction of it), already normalised, read over ``previous``."""
    scan = Scan(text)
    intent, about = _read_intent(scan)
    found = Findings(comparing=intent == "compare", original=original, notes=list(notes))
    for reader in (
        read_edits,
        read_features,
        read_price,
        _read_models,
        read_constraints,
        read_machines,
        _read_gpu_types,
        read_pools,
        _read_gpu_counts,
        read_percentile,
        read_rate,
        read_trace,
        read_targets,
        read_arrival,
        read_length_ranges,
        read_quantities,
        _read_objective,
        read_dtypes,
        _read_disaggregation,
        _note_leftovers,
    ):
        reader(scan, found)
    return _assemble(found, intent, about, previous)


def gpu_types(parsed: ParsedRequest) -> list[str]:
    """The GPU types the request names: one, or several when it asks which to use ("H100 or H200?", "any GPU").

    >>> gpu_types(parse_request("Llama 3.1 70B at 10 req/s: H100 or H200?"))
    ['H100', 'H200']
    """
    if parsed.gpu == ANY:
        return parse_gpu_types(ANY)
    return parsed.gpu.split(",") if parsed.gpu else []


def missing_fields(parsed: ParsedRequest) -> list[str]:
    """The essential fields a plan still needs, in asking order: ``model``, ``gpu`` (type), ``gpus`` (a GPU
    or node count). Lengths are not essential: they default to DEFAULT_ISL and DEFAULT_OSL.

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
        policy=policy,
        constraints=parse_constraints(texts) if texts else None,
        price=GpuPrice(gpu=gpu, usd_per_gpu_hour=parsed.gpu_price, source="the request's words")
        if parsed.gpu_price is not None else None,
    )
    model = request_model(request)
    check_context(model, workload.isl, workload.osl)
    check_drafter(model, workload.speculation)
    given = {name for name in _SETTINGS if getattr(parsed, name) is not None}
    if parsed.spec_method is not None:
        given.add("spec")
    if parsed.nodes and parsed.gpus_per_node is None:
        given.discard("gpus_per_node")
    stated = request_assumptions(request, given)
    # The parser's own notes say what it read into words and what it did not use; the defaults are stated once.
    return request.model_copy(update={"assumptions": notes + stated})
