"""What an engine runs when not told otherwise: its default cap on the sequences one scheduler runs in a step, its
default step budget and memory share, and the settings an engine refuses: more running sequences than vLLM's step
budget, a prompt longer than TensorRT-LLM's step without chunked prefill.

The serving model needs the cap where a step could otherwise take more sequences than any engine runs (a prefill
step of prompts almost wholly cached); the simulator, where open arrivals meet the engine's own cap. The budget is
what a server launched without a budget flag runs: ``shardplan export`` writes the flag where the plan's budget
differs from it, and a replay of a measured run launched without one uses it.
"""

from __future__ import annotations

from shardplan.contracts.hardware import GPU

__all__ = ["ENGINE_MEMORY_SHARE", "engine_seq_cap", "engine_step_budget", "runnable_seq_cap", "trtllm_chunks_prompts"]

ENGINE_MEMORY_SHARE = 0.9
"""The memory share vLLM (``gpu_memory_utilization``, of the whole GPU) and TensorRT-LLM
(``KvCacheConfig.free_gpu_memory_fraction``, of the memory free after the weights) take unless told otherwise."""

_GIB = 2**30
_MIB = 2**20


def _vllm_large(gpu: GPU) -> bool:
    """vLLM's larger defaults: a GPU of 70 GiB or more that is not an A100 (``EngineArgs.get_batch_defaults``; the
    A100 is left out because a larger budget lowered its throughput, vLLM pull #17885)."""
    return gpu.memory_gb * 1e9 >= 70 * _GIB and "A100" not in gpu.name.upper()


def engine_seq_cap(engine: str, gpu: GPU) -> int:
    """The running sequences an engine admits per scheduler when not told: what open arrivals meet, since a
    deployment sized for a rate has a mean number in flight, not a cap.

    vLLM (V1) defaults ``max_num_seqs`` to 1024 on GPUs of 70 GiB or more other than the A100 and to 256 otherwise
    (its ``EngineArgs`` defaults for the OpenAI server); TensorRT-LLM's ``max_batch_size`` defaults to 2048; SGLang
    sizes ``max_running_requests`` from the KV cache itself, which the blocks bound here anyway.

    >>> from shardplan.tools.catalogs.gpus import make_cluster
    >>> [engine_seq_cap("vllm", make_cluster(g, 1).gpu) for g in ("H100", "L40S", "A100")]
    [1024, 256, 256]
    """
    if engine == "trtllm":
        return 2048
    if engine == "sglang":
        return 1 << 20
    return 1024 if _vllm_large(gpu) else 256


def engine_step_budget(engine: str, gpu: GPU, adp: int = 1) -> int:
    """The tokens one scheduler's step carries when the engine is launched without a budget flag.

    * vLLM (V1, OpenAI server): ``max_num_batched_tokens`` 8192 on GPUs of 70 GiB or more other than the A100, 2048
      otherwise (``EngineArgs.get_batch_defaults``); each data-parallel rank's scheduler has its own.
    * SGLang: ``chunked_prefill_size`` 2048 below 35 GiB of GPU memory, 8192 below 160 GiB, 16384 above
      (``ServerArgs``: "B200, MI300"), divided among the attention data-parallel ranks under
      ``--enable-dp-attention`` (``_handle_data_parallelism``: ``chunked_prefill_size // dp_size``).
    * TensorRT-LLM: ``max_num_tokens`` 8192 (trtllm-serve).

    >>> from shardplan.tools.catalogs.gpus import make_cluster
    >>> [engine_step_budget(e, make_cluster("H100", 1).gpu) for e in ("vllm", "sglang", "trtllm")]
    [8192, 8192, 8192]
    >>> a100, b200 = make_cluster("A100", 1).gpu, make_cluster("B200", 1).gpu
    >>> engine_step_budget("vllm", a100), engine_step_budget("sglang", b200)
    (2048, 16384)
    >>> engine_step_budget("sglang", make_cluster("H200", 8).gpu, adp=8)
    1024
    """
    if engine == "trtllm":
        return 8192
    if engine == "sglang":
        mib = gpu.memory_gb * 1e9 / _MIB
        chunk = 2048 if mib < 35 * 1024 else 8192 if mib < 160 * 1024 else 16384
        return max(1, chunk // adp)
    return 8192 if _vllm_large(gpu) else 2048


def trtllm_chunks_prompts(longest_prompt: int | None, budget: int) -> bool:
    """Whether a TensorRT-LLM server with a step budget of ``budget`` tokens (``max_num_tokens``) must run chunked
    prefill to take prompts of up to ``longest_prompt`` tokens (None: no bound known, as for a trace).

    trtllm-serve starts without it (``enable_chunked_prefill`` False), and then refuses a prompt longer than the
    budget: the LLM API rejects the request ("The sum of prompt length ..., query length ... should not exceed
    max_num_tokens", ``tensorrt_llm/llmapi/llm.py`` ``_check_arguments``, PyTorch backend, every request but a
    disaggregated generation server's), and the C++ executor's ``MicroBatchScheduler`` fails the step ("The number
    of context tokens ... exceeds the limit value"), its context limit being ``max_num_tokens`` under context FMHA
    (``TrtGptModelInflightBatching``). Chunked prefill splits such a prompt under the budget, which is how the plan
    priced it; ``shardplan export`` turns it on and the simulator runs it so.

    >>> trtllm_chunks_prompts(5000, 8192), trtllm_chunks_prompts(20000, 8192), trtllm_chunks_prompts(None, 8192)
    (False, True, True)
    """
    return longest_prompt is None or longest_prompt > budget


def runnable_seq_cap(engine: str, seqs: int, budget: int) -> int:
    """The most running sequences an engine with a step budget of ``budget`` tokens starts with, where ``seqs`` are
    asked for.

    vLLM refuses to start when ``max_num_seqs`` exceeds ``max_num_batched_tokens`` ("max_num_batched_tokens ... must
    be greater than or equal to max_num_seqs", ``SchedulerConfig`` verification): every running sequence takes a
    token of the step. SGLang's decode steps do not count against its prompt budget, and TensorRT-LLM starts with
    any ``max_batch_size`` (a step then leaves out the generation requests its ``max_num_tokens`` cannot carry).

    >>> runnable_seq_cap("vllm", 537, 512), runnable_seq_cap("sglang", 537, 512), runnable_seq_cap("vllm", 64, 8192)
    (512, 537, 64)
    """
    return min(seqs, budget) if engine == "vllm" else seqs
