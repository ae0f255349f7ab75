"""The KV cache a worker holds, in blocks: what the memory model leaves once weights, workspace and
activations are placed.

The planner's ``max seqs`` is this capacity in whole sequences of ``isl + osl`` tokens; an engine hands it
out in blocks of 16 tokens, so sequences shorter than the mean leave room for more of them and a long one
takes its share.
"""

from __future__ import annotations

from typing import Literal

from shardplan.contracts.hardware import GPU
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.tools.cost.memory import GB, drafter_bytes_per_gpu, kv_bytes_per_sequence_per_gpu, memory_report
from shardplan.tools.serving.engine_limits import engine_seq_cap

__all__ = ["BLOCK_TOKENS", "kv_blocks", "engine_seq_cap"]

BLOCK_TOKENS = 16
"""Tokens per KV-cache block (vLLM's default block size)."""


def kv_blocks(
    model: ModelSpec,
    gpu: GPU,
    layout: PhaseStrategy,
    workload: Workload,
    pool: Literal["shared", "decode"],
    prefill_layout: PhaseStrategy | None = None,
    block_tokens: int = BLOCK_TOKENS,
) -> int:
    """KV-cache blocks of one worker of ``layout`` (``dp`` ignored) at the workload's lengths and headroom: the
    memory of its worst GPU left by the weights, the workspace and the activations at the largest batch that
    fits, over the KV bytes of a token there, times its attention groups (each holds its own sequences); 0 when
    not even one sequence fits. ``prefill_layout`` adds prefill's activations where both phases share the GPUs.

    >>> from shardplan.tools.catalogs.gpus import make_cluster
    >>> from shardplan.tools.catalogs.models import load_model
    >>> model, w = load_model("llama-3.1-8b"), Workload(isl=1024, osl=256)
    >>> blocks = kv_blocks(model, make_cluster("H100", 1).gpu, PhaseStrategy(), w, "shared", PhaseStrategy())
    >>> blocks * BLOCK_TOKENS // (w.isl + w.osl)  # whole sequences: the planner's max seqs, 316
    316
    """
    worker = layout.model_copy(update={"dp": 1})
    tokens = workload.isl + workload.osl
    one = memory_report(model, gpu, worker, workload.at_concurrency(1), pool, tokens, prefill_layout)
    if one.max_batch < 1:
        return 0
    full = memory_report(model, gpu, worker, workload.at_concurrency(one.max_batch), pool, tokens, prefill_layout)
    free = (full.capacity_gb - full.weights_gb - full.workspace_gb - full.activations_gb) * GB
    # A speculative drafter keeps a KV cache of its own beside the target's, token for token.
    drafter_kv = drafter_bytes_per_gpu(model, worker, workload, tokens)[1]
    per_token = (kv_bytes_per_sequence_per_gpu(model, worker, tokens) + drafter_kv) / tokens
    return int(free / per_token) * worker.adp // block_tokens
