"""vLLM's command line for a plan's servers.

Flag names checked against the engine's own documentation (read through the search tool):

* vLLM: ``docs/serving/data_parallel_deployment.md`` (``--data-parallel-size``, ``--tensor-parallel-size``,
  ``--max-num-seqs`` counts per DP rank; ``--max-num-batched-tokens``, each rank's step budget, written where the
  plan's differs from the default: 8192 on GPUs of 70 GiB or more other than the A100, 2048 otherwise; MoE expert
  layers form one DP x TP group, so DP ranks of an MoE model are attention-data-parallel, not independent;
  ``--data-parallel-backend ray``),
  ``docs/serving/expert_parallel_deployment.md`` (``--enable-expert-parallel``, ``EP_SIZE = TP_SIZE x
  DP_SIZE``; ``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'``),
  ``docs/features/nixl_connector_usage.md`` (``VLLM_NIXL_SIDE_CHANNEL_PORT``, prefill on port 8100 and
  decode on 8200, ``toy_proxy_server.py``), ``vllm.config.parallel`` (``--pipeline-parallel-size``,
  ``--distributed-executor-backend ray``), ``docs/features/quantization/quantized_kvcache.md``
  (``--kv-cache-dtype fp8``), ``--gpu-memory-utilization`` (0.9 by default, written where the plan gives the
  engine another share); context parallelism (``--prefill-context-parallel-size``) is documented only
  for a few models and backends and is not used.
* Speculative decoding: ``docs/features/speculative_decoding/mtp.md`` (``--speculative-config
  '{"method":"mtp","num_speculative_tokens":1}'``; MTP works for model families whose checkpoints carry MTP layers,
  ``vllm.config.speculative.MTP_MODEL_TYPES``: deepseek_mtp, mimo_mtp, glm4_moe_mtp, qwen3_next_mtp, ...; older
  releases name the DeepSeek method ``deepseek_mtp``), ``eagle.md`` (``"method": "eagle3"`` with ``"model"`` the
  head), ``draft_model.md`` (``"method": "draft_model"``, ``"model"``; the separate ``--speculative-model`` flags are
  deprecated). Prefix caching: ``--enable-prefix-caching`` (``--no-enable-prefix-caching`` turns it off; on by
  default in the V1 engine, ``docs/design/prefix_caching.md``), written out where the plan counts on it.
"""

from __future__ import annotations

import json

from shardplan.text import counted
from shardplan.tools.launch.servers import Role, Server, Target, microbatch_note, pool_notes, seqs_per_scheduler
from shardplan.tools.serving.engine_limits import ENGINE_MEMORY_SHARE, runnable_seq_cap

__all__ = ["configure", "extras", "feature_notes"]

_METHOD = {"mtp": "mtp", "eagle": "eagle3", "draft": "draft_model"}
# Target model types behind vLLM's MTP drafters (MTP_MODEL_TYPES: deepseek_mtp, mimo_mtp, glm4_moe_mtp,
# qwen3_next_mtp), by the model_type of the checkpoint that carries the layers.
_MTP_MODEL_TYPES = frozenset({"deepseek_v3", "mimo", "glm4_moe", "qwen3_next"})


def _feature_flags(target: Target, server: Server) -> None:
    drafting = target.drafting
    if drafting is not None:
        config: dict[str, str | int] = {"method": _METHOD[drafting.spec.method]}
        if drafting.drafter is not None:
            config["model"] = drafting.drafter
        config["num_speculative_tokens"] = drafting.spec.draft_tokens
        server.flags["--speculative-config"] = json.dumps(config, separators=(",", ":"))
    if target.prefix_hit > 0:
        server.flags["--enable-prefix-caching"] = True


def feature_notes(target: Target, servers: list[Server], notes: list[str]) -> None:
    """What vLLM does with the plan's speculation that the flags do not say."""
    drafting = target.drafting
    if drafting is None:
        return
    if drafting.spec.method == "mtp" and drafting.model_type not in _MTP_MODEL_TYPES:
        notes.append(f"vLLM's MTP drafters cover deepseek_v3, mimo, glm4_moe and qwen3_next checkpoints; check that "
                     f"your release supports MTP for {drafting.model_type}")
    if drafting.spec.method == "eagle":
        notes.append("the EAGLE head is loaded as EAGLE-3 (\"method\": \"eagle3\"), as the plan priced it; an "
                     "EAGLE-1/2 head (\"method\": \"eagle\") drafts with the target's full LM head and was not priced")


def configure(target: Target, server: Server, notes: list[str], disaggregated: bool) -> None:
    p = server.phase
    server.program = ["vllm", "serve", target.model]
    flags = server.flags
    flags["--tensor-parallel-size"] = p.tp
    if p.pp > 1:
        flags["--pipeline-parallel-size"] = p.pp
    if target.moe:
        # DP ranks of an MoE model share their expert layers: they are attention-DP groups, not replicas.
        server.instances = p.dp
        if p.adp > 1:
            flags["--data-parallel-size"] = p.adp
        if p.ep > 1:
            flags["--enable-expert-parallel"] = True
            if p.ep != p.adp * p.tp:
                notes.append(f"{server.role}: vLLM sets the expert-parallel size to TP x DP = {p.adp * p.tp}; the "
                             f"plan's ep={p.ep} with expert TP {p.etp} cannot be expressed")
        if p.dp > 1:
            notes.append(f"{server.role}: the dp={counted(p.dp, 'replica')} are separate servers, not "
                         f"--data-parallel-size, "
                         "which would make them share the expert layers")
    else:
        # One server per replica, each on its own GPUs (a load balancer in front spreads the requests).
        server.instances = p.dp
        if p.adp > 1:
            flags["--data-parallel-size"] = p.adp
            notes.append(f"{server.role}: vLLM has no data-parallel attention for dense models; the adp={p.adp} "
                         "groups run as independent data-parallel ranks")
    seqs = seqs_per_scheduler(p, target.sequences(server.role), p.dp * p.adp)
    runnable = runnable_seq_cap("vllm", seqs, target.max_batched_tokens)
    if runnable < seqs:
        notes.append(f"{server.role}: vLLM starts with at most as many running sequences as its step carries tokens "
                     f"(max_num_seqs <= max_num_batched_tokens): {runnable} of the {seqs} the plan holds per "
                     "scheduler, the rest queue")
    flags["--max-num-seqs"] = runnable
    budget = target.step_budget_flag(server, "vllm")  # each data-parallel rank's scheduler has its own
    if budget is not None:
        flags["--max-num-batched-tokens"] = budget
    if target.memory_share != ENGINE_MEMORY_SHARE:  # vLLM's gpu_memory_utilization, 0.9 unless told
        flags["--gpu-memory-utilization"] = f"{target.memory_share:g}"
    if target.kv_fp8:
        flags["--kv-cache-dtype"] = "fp8"
    _feature_flags(target, server)
    if disaggregated:
        flags["--kv-transfer-config"] = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                                                   separators=(",", ":"))
        server.port = 8100 if server.role == "prefill" else 8200
        server.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = "5600" if server.role == "prefill" else "5700"
    elif server.instances > 1:
        server.port = 8000
    if server.gpus > target.gpus_per_node:
        data_parallel = "--data-parallel-size" in flags
        flags["--data-parallel-backend" if data_parallel else "--distributed-executor-backend"] = "ray"
        server.multinode = "ray"
    microbatch_note("vLLM", server.role, p, notes)


def extras(servers: list[Server], notes: list[str]) -> list[tuple[Role, str, int]]:
    pair = pool_notes(
        servers,
        notes,
        multinode="a vLLM server spans nodes: start a Ray cluster first (ray start --head on the first node, ray "
        "start --address=HEAD:6379 on the others) and run the command on the head node",
        engine="vLLM",
    )
    if pair is not None:
        prefill, decode = pair
        assert prefill.port is not None and decode.port is not None  # split_pair checked them
        prefill_ports = " ".join(str(prefill.port + i) for i in range(prefill.instances))
        decode_ports = " ".join(str(decode.port + i) for i in range(decode.instances))
        notes.append("disaggregated: NixlConnector moves the KV cache; route each request to a prefill server, then "
                     "to a decode server, with a proxy that knows both pools, e.g. vLLM's "
                     "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py --prefiller-ports "
                     f"{prefill_ports} --decoder-ports {decode_ports}")
    return []
