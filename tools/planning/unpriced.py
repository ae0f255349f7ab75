"""Why a given deployment has no priced figures for a request, in one sentence with its fix.

A strategy the user gives (``-s``) is built, validated and priced like a searched one, but it can fail to be
priced at every concurrency where a searched one would simply not be chosen: its GPUs cannot hold it, or the
batch asked for cannot give every attention data-parallel group and microbatch of each replica a sequence.
The plan then says which, instead of figures.
"""

from __future__ import annotations

from shardplan.contracts.arithmetic.feasibility import needed_sequences_text, sequences_needed
from shardplan.contracts.reports import MemoryReport
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.workload import Workload
from shardplan.text import counted

__all__ = ["batch_fix", "unpriced_reason"]


def batch_fix(needed: int) -> str:
    """The fix for a batch below :func:`sequences_needed`, for the command line and the tools alike."""
    return f"Give a batch of {needed} or more (--batch), or a layout with fewer groups"


def unpriced_reason(strategy: Strategy, workload: Workload, memory: list[MemoryReport]) -> str:
    """Why no concurrency of ``strategy`` is priced for ``workload``; ``memory`` is its replica DAG's account."""
    spec = strategy.to_spec()
    needed = sequences_needed(strategy)
    if workload.batch is not None and workload.batch < needed:
        return (
            f"{spec} is not priced at a batch of {workload.batch}: it needs {needed_sequences_text(needed)}, and "
            f"shardplan does not price groups left without a sequence. {batch_fix(needed)}."
        )
    full = [m for m in memory if not m.fits]
    if full:
        worst = max(full, key=lambda m: m.total_gb / m.capacity_gb)
        return (
            f"{spec} does not fit: {worst.total_gb:.1f} GB per GPU ({worst.weights_gb:.1f} GB of weights) of "
            f"{worst.capacity_gb:.0f} GB in its {worst.pool} GPUs. Give a layout that splits the model over more "
            f"GPUs, or drop -s to search for one (MEM-1)."
        )
    return (
        f"{spec} has no concurrency that fits in its GPUs' memory for this request (at most "
        f"{counted(min((m.max_batch for m in memory), default=0), 'sequence')} fit). Give a smaller --batch or "
        f"shorter lengths, "
        f"or drop -s to search for a layout (MEM-1)."
    )
