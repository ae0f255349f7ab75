"""What an engine admits when not told otherwise: its default cap on the sequences one scheduler runs in a step.

The serving model needs it where a step could otherwise take more sequences than any engine runs (a prefill step
of prompts almost wholly cached); the simulator, where open arrivals meet the engine's own cap.
"""

from __future__ import annotations

from shardplan.contracts.hardware import GPU

__all__ = ["engine_seq_cap"]


def engine_seq_cap(engine: str, gpu: GPU) -> int:
    """The running sequences an engine admits per scheduler when not told: what open arrivals meet, since a
    deployment sized for a rate has a mean number in flight, not a cap.

    vLLM (V1) defaults ``max_num_seqs`` to 1024 on GPUs of 70 GB or more and 256 below (its ``EngineArgs``
    defaults for the OpenAI server); TensorRT-LLM's ``max_batch_size`` defaults to 2048; SGLang sizes
    ``max_running_requests`` from the KV cache itself, which the blocks bound here anyway.

    >>> from shardplan.tools.catalogs.gpus import make_cluster
    >>> engine_seq_cap("vllm", make_cluster("H100", 1).gpu), engine_seq_cap("vllm", make_cluster("L40S", 1).gpu)
    (1024, 256)
    """
    if engine == "trtllm":
        return 2048
    if engine == "sglang":
        return 1 << 20
    return 1024 if gpu.memory_gb >= 70 else 256
