"""What would make a request that does not fit in memory fit: one change at a time, each checked.

Each hint changes one thing (the weight format, the KV-cache format, the GPU count, the context, the
sequences in flight), is checked with the memory test the search screens layouts with
(:mod:`shardplan.tools.search.fitting`), and is listed only when that test passes, with the figures of the
roomiest layout that makes it fit.
"""

from __future__ import annotations

from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import FitHint
from shardplan.contracts.workload import Workload
from shardplan.text import counted
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.cost.memory import kv_bytes_per_sequence_per_gpu, largest_fitting
from shardplan.tools.search.fitting import Fit, PhaseFilter, any_layout, best_fit, fits

__all__ = ["fit_hints", "with_weight_dtype", "with_kv_dtype", "with_context"]

NARROWER_WEIGHTS = ("fp8", "fp4")
"""Weight formats a hint may propose, widest first; fp4 only on GPUs with native fp4 (Blackwell)."""


def with_weight_dtype(model: ModelSpec, dtype: str) -> ModelSpec:
    """``model`` stored in ``dtype``, as ``--weight-dtype`` loads it (one format for every weight)."""
    return model.model_copy(update={"weight_dtype": dtype, "expert_dtype": None, "weight_formats": {}})


def with_kv_dtype(model: ModelSpec, dtype: str) -> ModelSpec:
    """``model`` with its KV cache in ``dtype``, as ``--kv-dtype`` loads it."""
    return model.model_copy(update={"kv_dtype": dtype})


def with_context(workload: Workload, isl: int) -> Workload:
    """``workload`` with a prompt of ``isl`` tokens and one sequence in flight."""
    update: dict[str, object] = {"isl": isl}
    if workload.batch is not None:
        update |= {"batch": 1, "prefill_batch": None}
    return workload.model_copy(update=update)


def _where(fit: Fit) -> str:
    spec = fit.layout.to_spec()
    return spec if fit.replicas == 1 else f"{counted(fit.replicas, 'replica')} of {spec}"


def _tokens(workload: Workload) -> str:
    return f"{workload.isl}+{counted(workload.osl, 'token')}"


def _weight_hint(model: ModelSpec, cluster: Cluster, workload: Workload, allowed: PhaseFilter) -> FitHint | None:
    for dtype in NARROWER_WEIGHTS:
        if DTYPE_BYTES[dtype] >= DTYPE_BYTES[model.weight_dtype]:
            continue
        if dtype == "fp4" and "fp4" not in cluster.gpu.dense_tflops:
            continue
        fit = best_fit(with_weight_dtype(model, dtype), cluster, workload, allowed)
        if fits(fit, workload):
            assert fit is not None
            return FitHint(
                change="weight_dtype",
                value=dtype,
                text=f"{dtype} weights: {fit.weights_gb:.1f} GB per GPU on {_where(fit)}, up to {fit.sequences} "
                f"sequences in flight at {_tokens(workload)}",
            )
    return None


def _kv_hint(model: ModelSpec, cluster: Cluster, workload: Workload, allowed: PhaseFilter) -> FitHint | None:
    if DTYPE_BYTES[model.kv_dtype] <= DTYPE_BYTES["fp8"]:
        return None
    narrower = with_kv_dtype(model, "fp8")
    fit = best_fit(narrower, cluster, workload, allowed)
    if not fits(fit, workload):
        return None
    assert fit is not None
    tokens = workload.isl + workload.osl
    before = kv_bytes_per_sequence_per_gpu(model, fit.layout, tokens) / 1e9
    after = kv_bytes_per_sequence_per_gpu(narrower, fit.layout, tokens) / 1e9
    return FitHint(
        change="kv_dtype",
        value="fp8",
        text=f"fp8 KV cache: {after:.2f} GB per sequence per GPU instead of {before:.2f} on {_where(fit)}, up to "
        f"{counted(fit.sequences, 'sequence')} in flight at {_tokens(workload)}",
    )


def _gpus_hint(
    model: ModelSpec, cluster: Cluster, workload: Workload, min_gpus: int | None, allowed: PhaseFilter
) -> FitHint | None:
    if min_gpus is None:
        return None
    per_node = max(cluster.gpus_per_node, cluster.gpu.gpus_per_node) if cluster.nodes == 1 else cluster.gpus_per_node
    larger = make_cluster(cluster.gpu, min_gpus, per_node)
    fit = best_fit(model, larger, workload, allowed)
    if not fits(fit, workload):
        return None  # the count came from the same test; only a changed filter could refuse it
    assert fit is not None
    nodes = f"{counted(larger.nodes, 'node')} of {larger.gpus_per_node}" if larger.nodes > 1 else "one node"
    return FitHint(
        change="gpus",
        value=min_gpus,
        text=f"{min_gpus} x {cluster.gpu.name} ({nodes}), the fewest that fit: {fit.weights_gb:.1f} GB of weights "
        f"per GPU on {_where(fit)}, up to {counted(fit.sequences, 'sequence')} in flight at {_tokens(workload)}",
    )


def _context_hint(model: ModelSpec, cluster: Cluster, workload: Workload, allowed: PhaseFilter) -> FitHint | None:
    def fits_with_prompt(isl: int) -> bool:
        shorter = with_context(workload, isl)
        return fits(best_fit(model, cluster, shorter, allowed), shorter)

    if fits_with_prompt(workload.isl):
        return None  # the whole context fits one sequence: the sequences in flight are what does not fit
    longest = largest_fitting(fits_with_prompt, limit=workload.isl - 1) if workload.isl > 1 else 0
    if not longest:
        return None
    shorter = with_context(workload, longest)
    fit = best_fit(model, cluster, shorter, allowed)
    assert fit is not None
    return FitHint(
        change="context",
        value=longest + workload.osl,
        text=f"a context of at most {counted(longest + workload.osl, 'token')} (a {longest}-token prompt and "
             f"{workload.osl} "
        f"output tokens) with one sequence in flight, on {fit.layout.to_spec()}",
    )


def _batch_hint(model: ModelSpec, cluster: Cluster, workload: Workload, allowed: PhaseFilter) -> FitHint | None:
    if not workload.batch or workload.batch <= 1:
        return None
    fit = best_fit(model, cluster, workload, allowed)
    if fit is None or fit.sequences >= workload.batch:
        return None
    return FitHint(
        change="batch",
        value=fit.sequences,
        text=f"at most {counted(fit.sequences, 'sequence')} in flight instead of {workload.batch} at "
             f"{_tokens(workload)}, on "
        f"{_where(fit)}",
    )


def fit_hints(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    min_gpus: int | None = None,
    allowed: PhaseFilter = any_layout,
) -> list[FitHint]:
    """The single changes that make ``model`` serving ``workload`` fit in the memory of ``cluster``.

    In order: a narrower weight format (the widest that fits), an fp8 KV cache, the fewest GPUs that fit
    (``min_gpus``, from :func:`~shardplan.tools.search.fitting.min_gpus_to_fit`), the longest context that fits
    with one sequence in flight, and the most sequences in flight at the asked lengths. Empty when the
    request already fits or nothing single helps.

    >>> from shardplan.tools.catalogs.models import load_model
    >>> from shardplan.tools.catalogs.gpus import make_cluster
    >>> hints = fit_hints(load_model("meta-llama/Llama-3.1-405B"), make_cluster("H100", 8), Workload(isl=2048, osl=256))
    >>> [(h.change, h.value) for h in hints]
    [('weight_dtype', 'fp8')]
    """
    if fits(best_fit(model, cluster, workload, allowed), workload):
        return []
    found = [
        _weight_hint(model, cluster, workload, allowed),
        _kv_hint(model, cluster, workload, allowed),
        _gpus_hint(model, cluster, workload, min_gpus, allowed),
        _context_hint(model, cluster, workload, allowed),
        _batch_hint(model, cluster, workload, allowed),
    ]
    return [hint for hint in found if hint is not None]
