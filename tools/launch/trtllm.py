"""TensorRT-LLM's command line (and config files) for a plan's servers.

Flag names checked against the engine's own documentation (read through the search tool):

* TensorRT-LLM: ``docs/source/commands/trtllm-serve/trtllm-serve.rst`` (``trtllm-serve MODEL --tp_size
  --pp_size --ep_size --max_batch_size``, ``enable_attention_dp: true`` in the YAML, multi-node through
  ``trtllm-llmapi-launch`` under srun/mpirun; ``--config`` is the new name of ``--extra_llm_api_options``,
  which stays an equivalent alias and is what older releases accept), ``docs/source/features/
  disagg-serving.md`` (``cache_transceiver_config: {backend: NIXL, max_tokens_in_buffer}``,
  ``disable_overlap_scheduler: True`` on context servers, ``trtllm-serve disaggregated -c
  disagg_config.yaml``); Dynamo's TRT-LLM guide: attention DP sets ``attention_dp_size = tp_size``.
"""

from __future__ import annotations

from shardplan.tools.launch.servers import Role, Server, Target, microbatch_note, pool_notes, seqs_per_scheduler

__all__ = ["configure", "extras"]


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
                         f"(attention_dp_size = tp_size = {p.stage_gpus}); the plan's adp={p.adp} groups of "
                         f"tp={p.tp} cannot be expressed")
        if not target.moe:
            notes.append(f"{server.role}: attention DP is meant for MoE models; on this dense model consider "
                         f"dp={p.adp} separate servers instead")
    groups = p.dp * (p.stage_gpus if attention_dp else 1)
    flags["--max_batch_size"] = seqs_per_scheduler(p, target.sequences(server.role), groups)
    microbatch_note("TensorRT-LLM", server.role, p, notes)
    if disaggregated:
        if server.role == "prefill":
            options.append("disable_overlap_scheduler: true")
        options += ["cache_transceiver_config:", "  backend: NIXL", f"  max_tokens_in_buffer: {target.isl}"]
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
