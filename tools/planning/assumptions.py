"""What a request leaves unsaid: the values defaulted or guessed for it, each in one line.

Every entry point (``shardplan plan``, chat, the MCP and LangChain tools) states these in its answer and
the plan carries them as ``assumptions``, so nothing is assumed silently.
"""

from __future__ import annotations

from collections.abc import Collection

from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.traffic import ClosedLoop, GammaArrivals, TraceArrivals, arrival_text
from shardplan.contracts.workload import Workload
from shardplan.text import counted
from shardplan.tools.catalogs.drafters import mtp_layers
from shardplan.tools.catalogs.gpus import get_gpu
from shardplan.tools.catalogs.model_names import alias_note
from shardplan.tools.catalogs.weight_formats import request_model, weight_formats_text
from shardplan.tools.traffic.sizing import length_source

__all__ = ["request_assumptions"]


def _traffic_lines(w: Workload, given: Collection[str]) -> list[str]:
    """What the workload's traffic decided for it besides its lengths: sequences in flight from a closed loop, the
    rate from a trace; and how the analytic model prices arrivals that are not Poisson."""
    traffic = w.traffic
    if traffic is None:
        return []
    lines = []
    arrival = traffic.arrival
    if isinstance(arrival, ClosedLoop) and "batch" not in given and w.batch == arrival.clients:
        lines.append(f"{counted(w.batch, 'sequence')} in flight: the {counted(arrival.clients, 'client')} of arrival "
                     f"closed:"
                     f"{arrival.clients}, no batch given")
    if isinstance(arrival, TraceArrivals) and "rate" not in given and w.rate is not None:
        lines.append(f"rate {w.rate:.3g} requests/s: the mean rate of trace '{traffic.trace}', not given")
    if isinstance(arrival, GammaArrivals | TraceArrivals):
        # The steady-state model's queues assume Poisson arrivals: bursts are replayed only by a simulation.
        lines.append(f"arrivals {arrival_text(arrival)}: the analytic model queues them as Poisson arrivals at the "
                     "same mean rate")
    return lines


def request_assumptions(request: PlanRequest, given: Collection[str]) -> list[str]:
    """One line per request value that was not in ``given`` (field names: ``isl``, ``osl``, ``batch``,
    ``objective``, ``gpu``, ``gpus_per_node``, ``weight_dtype``, ``kv_dtype``, ``rate``, ``spec``) and so was
    defaulted or taken from the workload's traffic, plus the model name read as another bundled architecture and
    how bursty or replayed arrivals are priced; speculative decoding left off on a model with MTP layers.

    >>> from shardplan.contracts.workload import Workload
    >>> r = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=1, workload=Workload(isl=512, osl=256))
    >>> request_assumptions(r, {"isl", "gpu", "batch", "objective", "weight_dtype", "kv_dtype"})
    ['output length 256 tokens: not given']
    """

    w = request.workload
    lines = []
    note = alias_note(request.model)
    if note:
        lines.append(note)
    if "gpu" not in given:
        lines.append(f"GPU {request.gpu}: not given")
    if "gpus_per_node" not in given and request.gpus > 1 and request.cluster is None:
        per = request.gpus_per_node or get_gpu(request.gpu).gpus_per_node
        lines.append(f"{counted(min(per, request.gpus), 'GPU')} per node: the usual {request.gpu} node, not given")
    for which, what in (("isl", "prompt length"), ("osl", "output length")):
        source = length_source(w.traffic, which)
        if which not in given:
            mean = f"the mean of {source}, " if source else ""
            lines.append(f"{what} {counted(getattr(w, which), 'token')}: {mean}not given")
    lines += _traffic_lines(w, given)
    if w.prefix_hit > 0:
        cached = w.isl - w.prefill_tokens
        lines.append(f"prefix cache: {w.prefix_hit:.0%} of each prompt ({counted(cached, 'token')}) is one prefix "
                     f"shared by "
                     "every request of a replica (a decode worker when split), held once in its KV cache; prefill "
                     "computes the rest")
    arrival = w.traffic.arrival if w.traffic is not None else None
    from_clients = isinstance(arrival, ClosedLoop) and w.batch == arrival.clients  # stated with the traffic
    if "batch" not in given and w.batch is None:
        lines.append(f"sequences in flight: not given, so the search chooses them ({w.batching} batching)")
    elif "batch" not in given and not from_clients:
        lines.append(f"batch {w.batch} (sequences in flight): not given")
    if "objective" not in given:
        why = "targets or a rate given" if w.objective != "latency" else "no targets given"
        lines.append(f"objective {w.objective}: not given ({why})")
    spec = request_model(request)
    if "weight_dtype" not in given:
        parts = weight_formats_text(spec)
        if request.weight_formats:
            parts = "for the parts --weight-dtype-for does not name"
        lines.append(f"weights in {spec.weight_dtype}{f' ({parts})' if parts else ''}: the model's own format, not "
                     "given")
    if "kv_dtype" not in given:
        lines.append(f"KV cache in {spec.kv_dtype}: not given")
    if spec.attention_dtype == "fp8":
        # The measured tables time FP8 attention math only for TensorRT-LLM's GQA prompts (its FP8 context FMHA);
        # their MLA and decode rows are the engine's kernel for the KV format, which a Hopper engine may widen.
        lines.append("attention in FP8, as given: the roofline prices it at the FP8 peak; measured tables keep their "
                     "own kernels (FP8 math for TensorRT-LLM's GQA prompts, the KV format's kernel for decode and for "
                     "MLA, whose rows are bf16 math)")
    return lines + ([] if "spec" in given else _speculation_lines(w, spec)) + spec.warnings


def _speculation_lines(w: Workload, model: ModelSpec) -> list[str]:
    """Speculative decoding left off where the model could draft with its own MTP layers: a reader weighing TPOT
    wants to know it is priced without. The acceptance that would turn it on is the reader's to measure, never
    filled in here."""
    layers = mtp_layers(model) if w.speculation is None else 0
    if not layers:
        return []
    return [f"speculative decoding off: not given ({model.name} has {counted(layers, 'MTP layer')}; "
            f"--spec mtp:{layers} with --spec-accept A, the accepted drafts per step your engine measures, turns it "
            "on)"]
