"""TensorRT-LLM's command line (and config files) for a plan's servers.

Flag names checked against the engine's own documentation (read through the search tool):

* TensorRT-LLM: ``docs/source/commands/trtllm-serve/trtllm-serve.rst`` (``trtllm-serve MODEL --tp_size
  --pp_size --ep_size --max_batch_size --max_num_tokens``, the last written where the plan's step budget differs
  from its default 8192, ``enable_attention_dp: true`` in the YAML, multi-node through
  ``trtllm-llmapi-launch`` under srun/mpirun; ``--config`` is the new name of ``--extra_llm_api_options``,
  which stays an equivalent alias and is what older releases accept), ``docs/source/features/
  disagg-serving.md`` (``cache_transceiver_config: {backend: NIXL, max_tokens_in_buffer}``, the buffer sized to at
  least the longest prompt, as the guide recommends,
  ``disable_overlap_scheduler: True`` on context servers, ``trtllm-serve disaggregated -c
  disagg_config.yaml``); Dynamo's TRT-LLM guide: attention DP sets ``attention_dp_size = tp_size``.
* Speculative decoding: ``docs/source/features/speculative-decoding.md`` (``speculative_config`` in the YAML,
  ``decoding_type`` MTP, Eagle3 or DraftTarget; MTP "is currently only supported by Deepseek", its
  ``num_nextn_predict_layers`` must match ``max_draft_len``; Eagle3 and DraftTarget take ``max_draft_len`` and
  ``speculative_model_dir``, the older name that newer releases keep as an alias of ``speculative_model``; the
  draft/target example disables the overlap scheduler). Prefix caching: ``kv_cache_config.enable_block_reuse``
  (``KvCacheConfig``, default true in recent releases), written out where the plan counts on it;
  ``kv_cache_config.free_gpu_memory_fraction`` (0.9 by default) where the plan gives the engine another share.
* Chunked prefill: ``enable_chunked_prefill`` (an LLM API argument, False by default), written out where the
  workload's prompts can be longer than ``max_num_tokens``, which TensorRT-LLM otherwise refuses
  (:func:`~shardplan.tools.serving.engine_limits.trtllm_chunks_prompts`).
"""

from __future__ import annotations

import json
import re

from shardplan.text import counted
from shardplan.tools.launch.servers import Role, Server, Target, microbatch_note, pool_notes, seqs_per_scheduler
from shardplan.tools.serving.engine_limits import ENGINE_MEMORY_SHARE, trtllm_chunks_prompts

__all__ = ["configure", "extras", "feature_notes"]

_DECODING_TYPE = {"mtp": "MTP", "eagle": "Eagle3", "draft": "DraftTarget"}
_MTP_MODEL_TYPES = frozenset({"deepseek_v3"})
_PLAIN_YAML = re.compile(r"[A-Za-z0-9_./-]+")


def _yaml_text(text: str) -> str:
    """``text`` as a YAML scalar: plain where it is a simple path or id, else a JSON string (valid YAML)."""
    return text if _PLAIN_YAML.fullmatch(text) and text[0] not in "-." else json.dumps(text)


def _feature_options(target: Target, options: list[str]) -> None:
    drafting = target.drafting
    if drafting is not None:
        k = drafting.spec.draft_tokens
        options += ["speculative_config:", f"  decoding_type: {_DECODING_TYPE[drafting.spec.method]}",
                    f"  max_draft_len: {k}"]
        if drafting.spec.method == "mtp":
            options.append(f"  num_nextn_predict_layers: {k}")
        if drafting.drafter is not None:
            options.append(f"  speculative_model_dir: {_yaml_text(drafting.drafter)}")
        if drafting.spec.method == "draft" and "disable_overlap_scheduler: true" not in options:
            options.append("disable_overlap_scheduler: true")
    cache = ["  enable_block_reuse: true"] if target.prefix_hit > 0 else []
    if target.memory_share != ENGINE_MEMORY_SHARE:  # KvCacheConfig.free_gpu_memory_fraction, 0.9 unless told
        cache.append(f"  free_gpu_memory_fraction: {target.memory_share:g}")
    if cache:
        options += ["kv_cache_config:", *cache]


def feature_notes(target: Target, servers: list[Server], notes: list[str]) -> None:
    """What TensorRT-LLM does with the plan's speculation that the options do not say."""
    drafting = target.drafting
    if drafting is not None and drafting.spec.method == "mtp" and drafting.model_type not in _MTP_MODEL_TYPES:
        notes.append(f"TensorRT-LLM documents MTP for DeepSeek models only; {drafting.model_type} is not one, so this "
                     "speculative_config may not load")


def configure(target: Target, server: Server, notes: list[str], disaggregated: bool,
            files: dict[str, str]) -> None:
    p = server.phase
    server.program = ["trtllm-serve", target.model]
    flags = server.flags
    server.instances = p.dp
    flags["--backend"] = "pytorch"
    flags["--tp_size"] = p.stage_gpus
    if p.pp > 1:
        flags["--pp_size"] = p.pp
    if p.ep > 1:
        flags["--ep_size"] = p.ep
    options: list[str] = []
    attention_dp = p.adp > 1
    if attention_dp:
        options.append("enable_attention_dp: true")
        if p.tp > 1:
            notes.append(f"{server.role}: TensorRT-LLM's attention DP gives every GPU its own attention "
                         f"(attention_dp_size = tp_size = {p.stage_gpus}); the plan's adp={counted(p.adp, 'group')} of "
                         f"tp={p.tp} cannot be expressed")
        if not target.moe:
            notes.append(f"{server.role}: attention DP is meant for MoE models; on this dense model consider "
                         f"dp={p.adp} separate servers instead")
    groups = p.dp * (p.stage_gpus if attention_dp else 1)
    flags["--max_batch_size"] = seqs_per_scheduler(p, target.sequences(server.role), groups)
    budget = target.step_budget_flag(server, "trtllm")  # per rank under attention DP
    if budget is not None:
        flags["--max_num_tokens"] = budget
    # A generation server of a split deployment takes its prompts' KV cache, not the prompts: no check applies there.
    if server.role != "decode" and trtllm_chunks_prompts(target.longest_prompt, target.max_batched_tokens):
        options.append("enable_chunked_prefill: true")
        prompts = "no bound on the prompts" if target.longest_prompt is None else \
            f"prompts of up to {counted(target.longest_prompt, 'token', spec=',')}"
        notes.append(f"{server.role}: {prompts} against a step of {target.max_batched_tokens:,} tokens "
                     "(max_num_tokens): TensorRT-LLM refuses a longer prompt without chunked prefill, so "
                     "enable_chunked_prefill is on, which the plan's prompt chunks assume")
    microbatch_note("TensorRT-LLM", server.role, p, notes)
    if disaggregated and server.role == "prefill":
        options.append("disable_overlap_scheduler: true")
    _feature_options(target, options)
    if disaggregated:
        # The buffer must hold the longest prompt's KV cache, or transfers time out and the workers deadlock under
        # load (Dynamo's TensorRT-LLM known issues); the model's context bounds a prompt nothing else bounds.
        buffer = target.longest_prompt or target.max_context
        options += ["cache_transceiver_config:", "  backend: NIXL", f"  max_tokens_in_buffer: {buffer}"]
        server.port = 8001 if server.role == "prefill" else 8101
    elif server.instances > 1:
        server.port = 8000
    if options:
        name = "extra_llm_api_options.yaml" if server.role == "serve" else f"{server.role}_config.yaml"
        files[name] = "\n".join(options) + "\n"
        flags["--extra_llm_api_options"] = name
    if server.gpus > target.gpus_per_node:
        server.multinode = "mpi"
        server.program = ["trtllm-llmapi-launch", *server.program]


def extras(servers: list[Server], notes: list[str], files: dict[str, str]) -> list[tuple[Role, str, int]]:
    pair = pool_notes(
        servers,
        notes,
        multinode="a server spans nodes: start it under srun or mpirun with one task per GPU (trtllm-llmapi-launch), "
        "as in trtllm-serve's multi-node Slurm example",
        engine="trtllm-serve",
    )
    if pair is None:
        return []
    prefill, decode = pair
    assert prefill.port is not None and decode.port is not None  # split_pair checked them
    lines = ["hostname: localhost", "port: 8000", "backend: pytorch", "context_servers:",
             f"  num_instances: {prefill.instances}", "  urls:"]
    lines += [f'    - "localhost:{prefill.port + i}"' for i in range(prefill.instances)]
    lines += ["generation_servers:", f"  num_instances: {decode.instances}", "  urls:"]
    lines += [f'    - "localhost:{decode.port + i}"' for i in range(decode.instances)]
    files["disagg_config.yaml"] = "\n".join(lines) + "\n"
    notes.append("disaggregated: context servers hand the KV cache to generation servers over NIXL "
                 "(cache_transceiver_config); trtllm-serve disaggregated on port 8000 orchestrates them")
    return [("router", "trtllm-serve disaggregated -c disagg_config.yaml", 0)]
