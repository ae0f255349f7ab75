"""Which rules each engine's scheduler runs a replica by, as ``shardplan export`` launches it (or as a replayed run's
release ran it), and what the simulation's notes say of them.

* vLLM (V1) mixes prompt chunks and decodes in one step, admits a request on its prompt's blocks and preempts when
  decoding outgrows the cache; it runs no more sequences than its step carries tokens (it refuses ``max_num_seqs``
  above ``max_num_batched_tokens``). Its V0 engine without chunked prefill (``vllm_v0_unchunked``, for replays)
  runs whole prompts in steps of their own, prompts first, and refuses a prompt longer than its budget.
* TensorRT-LLM admits a request only when its whole prompt and output fit (GUARANTEED_NO_EVICT) and runs prompts
  whole, unless they can outgrow its step, which it refuses unchunked: chunked prefill is then on
  (:func:`~shardplan.tools.serving.engine_limits.trtllm_chunks_prompts`).
* SGLang runs a step of prompt chunks or a step of decodes, prompts first (unless ``--enable-mixed-chunk``), and
  admits by its reservation (:mod:`.reservation`). A split deployment's decode workers only decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.serving.engine_limits import runnable_seq_cap, trtllm_chunks_prompts

__all__ = ["SchedulerRules", "scheduler_rules"]


@dataclass(frozen=True)
class SchedulerRules:
    """How one replica's (or decode worker's) schedulers run, and the notes that say so."""

    seqs_per_rank: int
    """Running sequences each scheduler admits at most."""
    chunked: bool
    """Prompts split under the step budget (:attr:`~.engine.Engine.chunked_prefill`)."""
    prefill_first: bool
    """Steps of one kind, prompts first (:attr:`~.engine.Engine.prefill_first`)."""
    reserve_whole: bool
    """TensorRT-LLM's GUARANTEED_NO_EVICT (:attr:`~.engine.Engine.reserve_whole`)."""
    reservation: bool
    """SGLang's admission reservation (:attr:`~.engine.Engine.reservation`)."""
    notes: list[str] = field(default_factory=list)


def scheduler_rules(
    workload: Workload,
    longest_drawn: int,
    asked_per_rank: int,
    disaggregated: bool,
    *,
    trtllm_chunked_context: bool = False,
    vllm_v0_unchunked: bool = False,
    sglang_mixed_chunk: bool = False,
) -> SchedulerRules:
    """The rules ``workload``'s engine runs by, its requests' longest prompt drawn ``longest_drawn`` tokens and
    ``asked_per_rank`` running sequences asked of each scheduler; the keyword options as
    :class:`~.run.SimulationOptions` names them.

    Raises:
        InputError: vLLM V0 without chunked prefill meets a prompt longer than its step budget.

    >>> rules = scheduler_rules(Workload(isl=20000, osl=64, engine="trtllm"), 20000, 300, False)
    >>> rules.chunked, rules.reserve_whole, rules.prefill_first
    (True, True, False)
    >>> scheduler_rules(Workload(isl=512, osl=64, max_batched_tokens=256), 512, 1024, False).seqs_per_rank
    256
    """
    engine, budget, notes = workload.engine, workload.max_batched_tokens, []
    runnable = runnable_seq_cap(engine, asked_per_rank, budget)
    if runnable < asked_per_rank:
        # vLLM would not start with more; a step carries a token for each running sequence.
        notes.append(f"vLLM runs at most {runnable} sequences a scheduler, its step budget (it refuses max_num_seqs "
                     f"above max_num_batched_tokens), where {asked_per_rank} were asked for")
    trtllm = engine == "trtllm"
    longest = workload.longest_prompt
    must_chunk = trtllm and trtllm_chunks_prompts(longest, budget)
    v0 = engine == "vllm" and vllm_v0_unchunked and not disaggregated
    if v0 and longest_drawn > budget:
        raise InputError(f"vLLM's V0 scheduler without chunked prefill takes a prompt only whole, and a prompt of "
                         f"{counted(longest_drawn, 'token', spec=',')} exceeds the step budget of {budget:,}",
                         field="max_batched_tokens",
                         fix="give a step budget of at least the longest prompt (V0 sets max_model_len)")
    chunked = (not trtllm or trtllm_chunked_context or must_chunk) and not v0
    sglang = engine == "sglang" and not disaggregated
    prefill_first = (sglang and not sglang_mixed_chunk) or v0
    if trtllm:
        prompts = "whole prompts (no context chunking)"
        if must_chunk:
            longest_text = "no bound on the prompts" if longest is None else \
                f"prompts of up to {counted(longest, 'token', spec=',')}"
            prompts = (f"prompts chunked under the step budget (enable_chunked_prefill, as shardplan export sets it: "
                       f"{longest_text} against {budget:,} a step, which TensorRT-LLM refuses unchunked)")
        elif chunked:
            prompts = "prompts chunked under the step budget (enable_chunked_prefill)"
        notes.append(f"TensorRT-LLM's scheduler: {prompts}, and a request admitted only when the KV cache holds its "
                     "whole prompt and output (GUARANTEED_NO_EVICT): no preemption")
    if v0:
        notes.append(f"vLLM's V0 scheduler without chunked prefill: a step carries whole prompts (up to {budget:,} "
                     "tokens) or decodes, prompts first")
    elif prefill_first:
        notes.append("SGLang's scheduler: a step carries prompt chunks or decodes, never both, and prompts go first "
                     "(--enable-mixed-chunk off, its default): the decoding sequences sit out each prompt step")
    if sglang:
        notes.append("SGLang's admission: a request waits until its prompt and its output (up to 4,096 tokens) fit "
                     "beside new_token_ratio of the running requests' remaining outputs (0.7, falling to 0.098 over "
                     "600 decode steps, reset when idle, raised after a retraction)")
    return SchedulerRules(runnable, chunked, prefill_first, trtllm, sglang, notes)
