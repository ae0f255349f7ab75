"""What a request leaves unsaid: the values defaulted or guessed for it, each in one line.

Every entry point (``shardplan plan``, chat, the MCP and LangChain tools) states these in its answer and
the plan carries them as ``assumptions``, so nothing is assumed silently.
"""

from __future__ import annotations

from collections.abc import Collection

from shardplan.contracts.plan import PlanRequest
from shardplan.tools.catalogs.gpus import get_gpu
from shardplan.tools.catalogs.model_names import alias_note
from shardplan.tools.catalogs.models import load_model

__all__ = ["request_assumptions"]


def request_assumptions(request: PlanRequest, given: Collection[str]) -> list[str]:
    """One line per request value that was not in ``given`` (field names: ``isl``, ``osl``, ``batch``,
    ``objective``, ``gpu``, ``gpus_per_node``, ``weight_dtype``, ``kv_dtype``) and so was defaulted, plus
    the model name read as another bundled architecture.

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
        lines.append(f"{min(per, request.gpus)} GPUs per node: the usual {request.gpu} node, not given")
    if "isl" not in given:
        lines.append(f"prompt length {w.isl} tokens: not given")
    if "osl" not in given:
        lines.append(f"output length {w.osl} tokens: not given")
    if "batch" not in given and w.batch is None:
        lines.append(f"sequences in flight: not given, so the search chooses them ({w.batching} batching)")
    elif "batch" not in given:
        lines.append(f"batch {w.batch} (sequences in flight): not given")
    if "objective" not in given:
        why = "targets or a rate given" if w.objective != "latency" else "no targets given"
        lines.append(f"objective {w.objective}: not given ({why})")
    spec = load_model(request.model, weight_dtype=request.weight_dtype, kv_dtype=request.kv_dtype)
    if "weight_dtype" not in given:
        experts = f" (experts {spec.expert_dtype})" if spec.expert_dtype else ""
        lines.append(f"weights in {spec.weight_dtype}{experts}: the model's own format, not given")
    if "kv_dtype" not in given:
        lines.append(f"KV cache in {spec.kv_dtype}: not given")
    return lines + spec.warnings
