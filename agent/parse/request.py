"""Plain-language planning requests read into fields, deterministically (no language model).

``shardplan chat`` with the ``builtin`` policy reads a request such as *"Plan DeepSeek-V3 on two nodes of
8 H200 for 8k prompts and 1k outputs, first token under 2 s"* with :func:`parse_request`, asks back
with :func:`~.plan_request.clarifying_question` when :func:`~.plan_request.missing_fields` is not empty, and plans
:func:`~.plan_request.to_plan_request`.

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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shardplan.agent.parse.constraint_phrases import read_constraints
from shardplan.agent.parse.corrections import read_with_corrections
from shardplan.agent.parse.dates import read_dates_and_ports
from shardplan.agent.parse.edits import apply_edits, read_edits
from shardplan.agent.parse.features import (
    FEATURE_SETTINGS,
    read_features,
    settle_features,
)
from shardplan.agent.parse.formats import read_dtypes
from shardplan.agent.parse.intents import read_intent
from shardplan.agent.parse.lengths import read_length_ranges
from shardplan.agent.parse.machines import read_machines
from shardplan.agent.parse.pools import read_pools
from shardplan.agent.parse.quantities import read_quantities
from shardplan.agent.parse.readers import (
    _note_leftovers,
    _read_context_window,
    _read_disaggregation,
    _read_gpu_counts,
    _read_gpu_types,
    _read_models,
    _read_objective,
    sibling_model,
)
from shardplan.agent.parse.settings import read_settings
from shardplan.agent.parse.settle import Counts, across_all, merge_constraints, settle_counts
from shardplan.agent.parse.targets import read_percentile, read_targets
from shardplan.agent.parse.text import Findings, Intent, Scan, _normalise
from shardplan.agent.parse.traffic import read_arrival, read_price, read_rate, read_trace
from shardplan.agent.parse.typos import mend_typos
from shardplan.contracts.common import AttentionDType, DType, Objective
from shardplan.contracts.model import WeightComponent
from shardplan.contracts.targets import SloPercentile
from shardplan.limits import MAX_RATE, MIN_RATE
from shardplan.text import counted

__all__ = [
    "DEFAULT_ISL",
    "DEFAULT_OSL",
    "Intent",
    "ParsedRequest",
    "default_length_note",
    "parse_request",
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
    attention_dtype: AttentionDType | None = Field(
        default=None, description="Format attention multiplies in, as a request given whole stated it (the words are "
        "not read for it); a follow-up keeps it.")
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


def _switch_sibling(found: Findings, merged: dict[str, Any]) -> None:
    """A model named by its size alone ("switch to the 120b"): the thread's model's sibling of that size; else a note
    that the size was not used."""
    for size in found.values.get("model_size", []):
        sibling = sibling_model(merged["model"], size) if merged["model"] and "model" not in found.said else None
        if sibling is None:
            found.notes.append(f"'{size}' was not used: name the model it is the size of.")
            continue
        merged["model"] = sibling
        found.said["model"] = found.said.get("model_size", size)
        found.notes.append(f"Read '{size}' as {sibling}, the thread's model at that size.")
        return


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
    for length in ("isl", "osl"):  # a distribution said now replaces the thread's fixed length, and the other way
        if said[f"{length}_dist"] is not None and said[length] is None:
            merged[length] = None
        elif said[length] is not None and said[f"{length}_dist"] is None:
            merged[f"{length}_dist"] = None
        elif _off_middle(said[f"{length}_dist"], said[length]):
            what = "prompt" if length == "isl" else "output"
            found.contradictions.append(f"The request gives the {what} length both as {said[length]} tokens and as a "
                                        f"range ({said[f'{length}_dist']}); say which one you mean.")
    _switch_sibling(found, merged)
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
        for name, what in (("isl", "prompt"), ("osl", "output")):
            # a trace's lengths stand in for both, a distribution's mean for its own
            if merged[name] is None and merged["trace"] is None and merged[f"{name}_dist"] is None:
                found.notes.append(default_length_note(what))
    said_constraints = across_all(list(dict.fromkeys(found.values.get("constraints", []))), counts.gpus, found)
    constraints = merge_constraints(previous.constraints if previous else [], said_constraints, found)
    said_words = {k: v for k, v in found.said.items() if k in _SETTINGS or k.startswith("constraint ")}
    if intent == "compare" and previous is not None and previous.gpu and said["gpu"] and not about:
        # "compare with H200" after a plan on H100: both types, planned as "H100 or H200?" is (the cheapest kept)
        types = list(dict.fromkeys(previous.gpu.split(",") + str(said["gpu"]).split(",")))
        if len(types) > 1:
            merged["gpu"] = ",".join(types)
    return ParsedRequest(**merged, intent=intent, about=about, constraints=constraints, said=said_words,
                         contradictions=found.contradictions, notes=found.notes,
                         weight_formats=previous.weight_formats if previous else None,
                         attention_dtype=previous.attention_dtype if previous else None)


def _off_middle(dist: str | None, length: int | None) -> bool:
    """Whether a fixed length said beside a uniform range is not the range's middle (two lengths, then; a length at
    the middle is the range's mean, as vLLM's ``--random-input-len`` with its range ratio is)."""
    if length is None or not (dist or "").startswith("uniform:"):
        return False
    low, high = (int(end) for end in str(dist).removeprefix("uniform:").split(","))
    return abs(length - (low + high) / 2) > 0.5


def default_length_note(what: str) -> str:
    """The note a reading leaves for a length no message gave; ``what`` is ``prompt`` or ``output``.

    >>> default_length_note("output")
    'No output length given; assuming 256 tokens.'
    """
    return f"No {what} length given; assuming {counted(DEFAULT_ISL if what == 'prompt' else DEFAULT_OSL, 'token')}."


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
    intent, about = read_intent(scan)
    found = Findings(comparing=intent == "compare", original=original, notes=list(notes))
    for reader in (
        read_dates_and_ports,
        read_settings,
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
        _read_disaggregation,  # before the quantities: "one decode pool" is no output length of one token
        _read_context_window,  # before the quantities: "a 32k context window" is no prompt length
        read_quantities,
        _read_objective,
        read_dtypes,
        _note_leftovers,
    ):
        reader(scan, found)
    return _assemble(found, intent, about, previous)
