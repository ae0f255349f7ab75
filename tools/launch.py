"""Launch commands for a plan: the vLLM, SGLang or TensorRT-LLM command line that serves its strategy.

Each engine expresses a different subset of the plan's degrees. :func:`launch_command` maps what it can
onto real flags and says in ``notes``, plainly, what the engine cannot express (a prefill SP degree,
different prefill and decode layouts on shared GPUs, a microbatch count, an expert-parallel degree the
engine derives by itself). The plan's replicas (``dp``) become separate server processes, except where
the engine has a flag for independent replicas (vLLM on dense models).

Flag names were checked against the engines' own documentation (read through the search tool):

* vLLM: ``docs/serving/data_parallel_deployment.md`` (``--data-parallel-size``, ``--tensor-parallel-size``,
  ``--max-num-seqs`` counts per DP rank; MoE expert layers form one DP x TP group, so DP ranks of an MoE
  model are attention-data-parallel, not independent; ``--data-parallel-backend ray``),
  ``docs/serving/expert_parallel_deployment.md`` (``--enable-expert-parallel``, ``EP_SIZE = TP_SIZE x
  DP_SIZE``; ``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'``),
  ``docs/features/nixl_connector_usage.md`` (``VLLM_NIXL_SIDE_CHANNEL_PORT``, prefill on port 8100 and
  decode on 8200, ``toy_proxy_server.py``), ``vllm.config.parallel`` (``--pipeline-parallel-size``,
  ``--distributed-executor-backend ray``), ``docs/features/quantization/quantized_kvcache.md``
  (``--kv-cache-dtype fp8``); context parallelism (``--prefill-context-parallel-size``) is documented only
  for a few models and backends and is not used.
* SGLang: ``docs/advanced_features/server_arguments.md`` (``--model-path``, ``--tp-size``, ``--pp-size``,
  ``--dp-size``, ``--enable-dp-attention``, ``--ep-size``, ``--moe-a2a-backend deepep``,
  ``--max-running-requests``, ``--pp-max-micro-batch-size``, ``--kv-cache-dtype fp8_e4m3``, ``--nnodes``,
  ``--node-rank``, ``--dist-init-addr``, ``--disaggregation-mode``, ``--disaggregation-transfer-backend
  nixl``); ``--enable-ep-moe`` is deprecated in favour of ``--ep-size`` (sgl-project/SpecForge#246);
  ``docs/advanced_features/pd_disaggregation.md`` (``--tp-size 16 --dp-size 8 --enable-dp-attention``,
  ``python -m sglang_router.launch_router --pd-disaggregation --prefill URL --decode URL``).
* TensorRT-LLM: ``docs/source/commands/trtllm-serve/trtllm-serve.rst`` (``trtllm-serve MODEL --tp_size
  --pp_size --ep_size --max_batch_size``, ``enable_attention_dp: true`` in the YAML, multi-node through
  ``trtllm-llmapi-launch`` under srun/mpirun; ``--config`` is the new name of ``--extra_llm_api_options``,
  which stays an equivalent alias and is what older releases accept), ``docs/source/features/
  disagg-serving.md`` (``cache_transceiver_config: {backend: NIXL, max_tokens_in_buffer}``,
  ``disable_overlap_scheduler: True`` on context servers, ``trtllm-serve disaggregated -c
  disagg_config.yaml``); Dynamo's TRT-LLM guide: attention DP sets ``attention_dp_size = tp_size``.

>>> from shardplan.tools.contracts import PlanRequest, Workload, parse_strategy
>>> from shardplan.tools.planner import plan_for_strategy, resolve_request
>>> request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=2, workload=Workload(isl=512, osl=64, batch=4))
>>> model, cluster = resolve_request(request)
>>> launch_command(plan_for_strategy(request, model, cluster, parse_strategy("tp=2")), "vllm").command
'vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 --max-num-seqs 4'
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from ..errors import InputError
from .contracts.plan import Plan
from .contracts.strategy import PhaseStrategy

__all__ = ["Engine", "ENGINES", "FlagValue", "LaunchSpec", "launch_command", "shell_word"]

Engine = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[str, ...] = get_args(Engine)
FlagValue = str | int | bool
"""A flag's value; ``True`` is a switch written without a value."""

Role = Literal["serve", "prefill", "decode", "router"]


class LaunchSpec(BaseModel):
    """How to start an engine for a plan: the shell text, the flags per role, and what it cannot express."""

    model_config = ConfigDict(extra="forbid")

    engine: Engine = Field(description="vllm, sglang or trtllm.")
    model: str = Field(description="Model id the commands serve.")
    command: str = Field(description="Shell text that starts everything: config files, servers, router.")
    commands: dict[str, str] = Field(description="Per role (serve, or prefill/decode/router), its command lines.")
    flags: dict[str, dict[str, FlagValue]] = Field(
        description="Per role, the flags of its first server process, in command order (True = a bare switch).")
    env: dict[str, dict[str, str]] = Field(description="Per role, the environment of its first server process.")
    files: dict[str, str] = Field(default_factory=dict, description="Config files the commands read: name -> text.")
    notes: list[str] = Field(default_factory=list, description="What the engine cannot express, and how to run it.")


# ------------------------------------------------------------------------------------------- context


@dataclass(frozen=True)
class _Target:
    """What every engine mapping needs to know about the plan."""

    model: str
    moe: bool
    gpus_per_node: int
    gpus: int
    """The request's GPU budget, on which the servers are placed."""
    in_flight: dict[str, int]
    """Sequences in flight per server role across all its processes, from the plan's deployment."""
    isl: int
    kv_fp8: bool

    def sequences(self, role: str) -> int:
        """Sequences the servers of ``role`` hold together (their engines' concurrency limits add up to it)."""
        return self.in_flight.get(role, self.in_flight["serve"])


@dataclass
class _Server:
    """One server role: its layout, where its GPUs start, and the flags an engine chose for it."""

    role: Role
    phase: PhaseStrategy
    starts: list[int]
    """First GPU of each of the role's processes (replicas or pool workers), each inside a node or on whole nodes."""
    program: list[str] = field(default_factory=list)
    flags: dict[str, FlagValue] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    instances: int = 1
    port: int | None = None
    multinode: str = ""

    @property
    def gpus(self) -> int:
        """GPUs of one instance (one server process group)."""
        return self.phase.replica_gpus * (self.phase.dp // self.instances)


def _target(plan: Plan) -> _Target:
    from .hardware import cluster_for

    workload = plan.request.workload
    if plan.dag is not None:
        spec = plan.dag.meta.model
    else:
        from .planner import resolve_request

        spec, _ = resolve_request(plan.request)
    # The DAG sits on one replica's GPUs; servers are placed on the nodes of the whole request.
    request = plan.request
    cluster = cluster_for(request.gpu, request.gpus, request.gpus_per_node, request.cluster)
    return _Target(model=spec.name, moe=spec.is_moe, gpus_per_node=cluster.gpus_per_node, gpus=cluster.world_size,
                   in_flight=_in_flight(plan), isl=workload.isl, kv_fp8=spec.kv_dtype == "fp8")


def _in_flight(plan: Plan) -> dict[str, int]:
    """Each role's sequences in flight: the deployment's concurrency (not a planning batch), split by pool."""
    d = plan.deployment
    if d is None:
        return {"serve": plan.request.workload.sequences}
    pools = {pool.role: pool.workers * pool.concurrency_per_worker for pool in d.pools}
    return {"serve": d.concurrency, "prefill": pools.get("prefill", d.concurrency),
            "decode": pools.get("decode", d.concurrency)}


def _fold_sp(phase: PhaseStrategy, role: str, notes: list[str]) -> PhaseStrategy:
    """No engine has a sequence-parallel prefill degree here: its GPUs join the TP group instead."""
    if phase.sp == 1:
        return phase
    notes.append(f"{role}: sp={phase.sp} (the prompt split into token shards) cannot be expressed; the {role} server "
                 f"uses those GPUs as tensor parallelism instead (tp={phase.tp * phase.sp}); check that it divides "
                 "the attention heads")
    return phase.model_copy(update={"tp": phase.tp * phase.sp, "sp": 1})


def _starts(phases: list[PhaseStrategy], target: _Target) -> list[list[int]]:
    """Where each phase's processes go: the search's own placement (serving.place_workers), else one after
    another when a hand-written strategy does not pack."""
    from .serving import place_workers

    pools = [(phase.dp, phase.replica_gpus) for phase in phases]
    placed = place_workers(pools, max(target.gpus, sum(d * g for d, g in pools)), target.gpus_per_node)
    if placed is not None:
        return placed
    first = [sum(d * g for d, g in pools[:i]) for i in range(len(pools))]
    return [[first[i] + k * g for k in range(d)] for i, (d, g) in enumerate(pools)]


def _servers(plan: Plan, notes: list[str], target: _Target) -> list[_Server]:
    strategy = plan.strategy
    assert strategy is not None
    if strategy.disaggregated:
        prefill = _fold_sp(strategy.prefill, "prefill", notes)
        decode = strategy.decode
        prefill_starts, decode_starts = _starts([prefill, decode], target)
        return [_Server("prefill", prefill, prefill_starts), _Server("decode", decode, decode_starts)]
    if strategy.prefill != strategy.decode:
        sp = strategy.prefill.sp
        notes.append(f"prefill ({strategy.prefill.to_spec()}) and decode ({strategy.decode.to_spec()}) use different "
                     "layouts on the same GPUs; an engine runs one layout for both phases, so this command uses the "
                     "decode layout, which sets TPOT and memory, and prefill runs with it too"
                     + (f"; the prefill SP degree sp={sp} is not expressed" if sp > 1 else ""))
    return [_Server("serve", strategy.decode, _starts([strategy.decode], target)[0])]


def _seqs(phase: PhaseStrategy, batch: int, groups: int) -> int:
    """Sequences per engine scheduler when the deployment's batch is spread over ``groups`` schedulers."""
    return max(1, math.ceil(batch / groups))


def _microbatch_note(engine: str, role: str, phase: PhaseStrategy, notes: list[str], flag: str = "") -> None:
    if phase.mb > 1:
        how = f"; {flag} approximates it" if flag else ""
        notes.append(f"{role}: mb={phase.mb} microbatches per step cannot be set in {engine}, which schedules "
                     f"batches through the pipeline itself{how}")


# ------------------------------------------------------------------------------------------- vLLM


def _vllm(target: _Target, server: _Server, notes: list[str], disaggregated: bool) -> None:
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
            notes.append(f"{server.role}: dp={p.dp} replicas run as separate vLLM servers (--data-parallel-size "
                         "would make them share the expert layers); put a load balancer in front")
    else:
        # One server per replica, each on its own GPUs (a load balancer in front spreads the requests).
        server.instances = p.dp
        if p.adp > 1:
            flags["--data-parallel-size"] = p.adp
            notes.append(f"{server.role}: vLLM has no data-parallel attention for dense models; the adp={p.adp} "
                         "groups run as independent data-parallel ranks")
    flags["--max-num-seqs"] = _seqs(p, target.sequences(server.role), p.dp * p.adp)
    if target.kv_fp8:
        flags["--kv-cache-dtype"] = "fp8"
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
    _microbatch_note("vLLM", server.role, p, notes)


def _vllm_extras(servers: list[_Server], notes: list[str]) -> list[tuple[Role, str, int]]:
    if any(s.multinode for s in servers):
        notes.append("a vLLM server spans nodes: start a Ray cluster first (ray start --head on the first node, "
                     "ray start --address=HEAD:6379 on the others) and run the command on the head node")
    if len(servers) > 1:
        prefill, decode = servers
        notes.append("disaggregated: NixlConnector moves the KV cache; route each request to a prefill server, then "
                     "to a decode server, with a proxy that knows both pools, e.g. vLLM's "
                     "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py --prefiller-ports "
                     f"{prefill.port} --decoder-ports {decode.port}")
    return []


# ------------------------------------------------------------------------------------------ SGLang


def _sglang(target: _Target, server: _Server, notes: list[str], disaggregated: bool) -> None:
    p = server.phase
    server.program = ["python", "-m", "sglang.launch_server"]
    flags = server.flags
    flags["--model-path"] = target.model
    server.instances = p.dp
    if p.adp > 1 and target.moe:
        # --tp-size counts every GPU of a stage; --dp-size of them attend separately (attention TP = tp).
        flags["--tp-size"] = p.adp * p.tp
        flags["--dp-size"] = p.adp
        flags["--enable-dp-attention"] = True
    elif p.adp > 1:
        flags["--tp-size"] = p.tp
        flags["--dp-size"] = p.adp
        notes.append(f"{server.role}: SGLang's data-parallel attention covers MoE models only; the adp={p.adp} groups "
                     "of this dense model run as data-parallel workers")
    else:
        flags["--tp-size"] = p.tp
    if p.pp > 1:
        flags["--pp-size"] = p.pp
    if p.ep > 1:
        flags["--ep-size"] = p.ep
        if p.ep == p.stage_gpus:
            flags["--moe-a2a-backend"] = "deepep"
        else:
            notes.append(f"{server.role}: with expert TP {p.etp}, SGLang dispatches tokens to experts by all-gather "
                         "and all-reduce (--moe-a2a-backend none), not the all-to-all the plan priced; DeepEP needs "
                         "ep equal to the TP size")
    flags["--max-running-requests"] = _seqs(p, target.sequences(server.role), p.dp)
    if p.pp > 1 and p.mb > 1:
        flags["--pp-max-micro-batch-size"] = _seqs(p, target.sequences(server.role), p.dp * p.mb)
        notes.append(f"{server.role}: mb={p.mb} is approximated by capping the pipeline microbatch size "
                     "(--pp-max-micro-batch-size); SGLang picks the count itself")
    else:
        _microbatch_note("SGLang", server.role, p, notes)
    if target.kv_fp8:
        flags["--kv-cache-dtype"] = "fp8_e4m3"
    if disaggregated:
        flags["--disaggregation-mode"] = server.role
        flags["--disaggregation-transfer-backend"] = "nixl"
        server.port = 30000 if server.role == "prefill" else 30100
    elif server.instances > 1:
        server.port = 30000
    if server.gpus > target.gpus_per_node:
        server.multinode = "sglang"


def _sglang_extras(servers: list[_Server], notes: list[str]) -> list[tuple[Role, str, int]]:
    if any(s.multinode for s in servers):
        notes.append("a server spans nodes: run its node-rank k line on node k, with HEAD_IP set to the address of "
                     "its first node")
    extras: list[tuple[Role, str, int]] = []
    if len(servers) > 1:
        prefill, decode = servers
        assert prefill.port is not None and decode.port is not None
        urls = [f"--prefill http://127.0.0.1:{prefill.port + i}" for i in range(prefill.instances)]
        urls += [f"--decode http://127.0.0.1:{decode.port + i}" for i in range(decode.instances)]
        extras.append(("router", "python -m sglang_router.launch_router --pd-disaggregation "
                       + " ".join(urls) + " --host 0.0.0.0 --port 8000", 0))
        notes.append("disaggregated: NIXL moves the KV cache; the SGLang router on port 8000 pairs prefill and decode "
                     "servers")
    elif servers[0].instances > 1:
        notes.append(f"dp={servers[0].instances} replicas run as separate SGLang servers; put a load balancer "
                     "(the SGLang router) in front")
    return extras


# ------------------------------------------------------------------------------------ TensorRT-LLM


def _trtllm(target: _Target, server: _Server, notes: list[str], disaggregated: bool,
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
    flags["--max_batch_size"] = _seqs(p, target.sequences(server.role), groups)
    _microbatch_note("TensorRT-LLM", server.role, p, notes)
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


def _trtllm_extras(servers: list[_Server], notes: list[str], files: dict[str, str]) -> list[tuple[Role, str, int]]:
    if any(s.multinode for s in servers):
        notes.append("a server spans nodes: start it under srun or mpirun with one task per GPU "
                     "(trtllm-llmapi-launch), as in trtllm-serve's multi-node Slurm example")
    extras: list[tuple[Role, str, int]] = []
    if len(servers) > 1:
        prefill, decode = servers
        assert prefill.port is not None and decode.port is not None
        lines = ["hostname: localhost", "port: 8000", "backend: pytorch", "context_servers:",
                 f"  num_instances: {prefill.instances}", "  urls:"]
        lines += [f'    - "localhost:{prefill.port + i}"' for i in range(prefill.instances)]
        lines += ["generation_servers:", f"  num_instances: {decode.instances}", "  urls:"]
        lines += [f'    - "localhost:{decode.port + i}"' for i in range(decode.instances)]
        files["disagg_config.yaml"] = "\n".join(lines) + "\n"
        extras.append(("router", "trtllm-serve disaggregated -c disagg_config.yaml", 0))
        notes.append("disaggregated: context servers hand the KV cache to generation servers over NIXL "
                     "(cache_transceiver_config); trtllm-serve disaggregated on port 8000 orchestrates them")
    elif servers[0].instances > 1:
        notes.append(f"dp={servers[0].instances} replicas run as separate trtllm-serve servers; put a load balancer "
                     "in front")
    return extras


# --------------------------------------------------------------------------------------- assembly


_PLACEHOLDER = re.compile(r"\$\{[A-Z_][A-Z0-9_]*\}(:[0-9]+)?")
"""A value the person running the command fills in (``${HEAD_IP}:5000``); nothing else may expand."""


def shell_word(text: str) -> str:
    """``text`` as one shell word that the shell reads back literally (a model named ``x$(touch f)`` or a
    path with spaces stays one inert word); only an exact ``${VAR}`` placeholder stays expandable.

    >>> shell_word("meta-llama/Llama-3.1-8B"), shell_word("my models/x$(id)"), shell_word("${HEAD_IP}:5000")
    ('meta-llama/Llama-3.1-8B', "'my models/x$(id)'", '"${HEAD_IP}:5000"')
    """
    return f'"{text}"' if _PLACEHOLDER.fullmatch(text) else shlex.quote(text)


def _flag_text(flags: dict[str, FlagValue]) -> list[str]:
    words: list[str] = []
    for name, value in flags.items():
        if value is True:
            words.append(name)
        elif value is not False:
            words += [name, shell_word(str(value))]
    return words


def _instance_lines(target: _Target, server: _Server) -> list[tuple[int, str]]:
    """(node, line) for every process of ``server``: one per instance, or per node of a multi-node SGLang server.

    Records the first process's flags and environment on ``server``.
    """
    lines: list[tuple[int, str]] = []
    per_instance = server.gpus
    base_flags, base_env = dict(server.flags), dict(server.env)
    for index in range(server.instances):
        start = server.starts[index]
        node = start // target.gpus_per_node
        env: dict[str, str] = {}
        if per_instance < target.gpus_per_node:
            local = [(start + g) % target.gpus_per_node for g in range(per_instance)]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in local)
        env.update(base_env)
        if "VLLM_NIXL_SIDE_CHANNEL_PORT" in env:
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) + index)
        flags = dict(base_flags)
        if server.port is not None:
            flags["--port"] = server.port + index
        prefix = [f"{key}={shell_word(value)}" for key, value in env.items()]
        nodes = math.ceil(per_instance / target.gpus_per_node) if server.multinode == "sglang" else 1
        for rank in range(nodes):
            if server.multinode == "sglang":
                flags.update({"--nnodes": nodes, "--node-rank": rank, "--dist-init-addr": "${HEAD_IP}:5000"})
            if index == 0 and rank == 0:
                server.flags, server.env = dict(flags), dict(env)
            lines.append((node + rank, " ".join(prefix + [shell_word(w) for w in server.program] + _flag_text(flags))))
    return lines


def _script(per_node: dict[int, list[str]], files: dict[str, str]) -> str:
    parts = [f"cat > {shell_word(name)} <<'EOF'\n{text}EOF" for name, text in files.items()]
    several_nodes = len(per_node) > 1
    for node in sorted(per_node):
        lines = per_node[node]
        if several_nodes:
            parts.append(f"# node {node}")
        if len(lines) > 1:
            parts.extend(f"{line} &" for line in lines)
            parts.append("wait")
        else:
            parts.extend(lines)
    return "\n".join(parts)


def launch_command(plan: Plan, engine: Engine) -> LaunchSpec:
    """The command line that serves ``plan``'s strategy with ``engine``.

    Colocated plans get one server role (``serve``); disaggregated plans get ``prefill`` and ``decode``
    roles and a ``router`` where the engine needs one. Each role runs ``dp`` processes when replicas are
    separate servers. Ports: vLLM 8000 (8100 prefill, 8200 decode), SGLang 30000 (30100 decode, router
    8000), TensorRT-LLM 8000 (8001 context, 8101 generation, orchestrator 8000).

    Raises:
        InputError: unknown engine, or a plan without a strategy (infeasible).
    """
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}", field="engine", fix=f"choose one of {', '.join(ENGINES)}")
    if plan.strategy is None:
        raise InputError("the plan is infeasible and has no strategy to launch", field="strategy",
                         fix=(f"plan again with at least {plan.min_gpus} GPUs" if plan.min_gpus
                              else "plan again with more GPUs or a smaller workload"))
    notes: list[str] = []
    if plan.status == "infeasible":
        notes.append("the plan is marked infeasible (it does not fit in GPU memory); these commands will not start")
    target = _target(plan)
    servers = _servers(plan, notes, target)
    disaggregated = plan.strategy.disaggregated
    files: dict[str, str] = {}
    for server in servers:
        if engine == "vllm":
            _vllm(target, server, notes, disaggregated)
        elif engine == "sglang":
            _sglang(target, server, notes, disaggregated)
        else:
            _trtllm(target, server, notes, disaggregated, files)
    if engine == "vllm":
        extras = _vllm_extras(servers, notes)
    elif engine == "sglang":
        extras = _sglang_extras(servers, notes)
    else:
        extras = _trtllm_extras(servers, notes, files)
        if target.kv_fp8:
            notes.append("the plan assumes an fp8 KV cache; set the KV-cache format in the TensorRT-LLM config as "
                         "your release documents it")
    if plan.request.weight_dtype:
        notes.append(f"the plan assumes {plan.request.weight_dtype} weights: serve a checkpoint in that format")

    per_node: dict[int, list[str]] = defaultdict(list)
    commands: dict[str, list[str]] = defaultdict(list)
    for server in servers:
        for node, line in _instance_lines(target, server):
            per_node[node].append(line)
            commands[server.role].append(line)
    for role, line, node in extras:
        per_node[node].append(line)
        commands[role].append(line)
    return LaunchSpec(
        engine=engine, model=target.model, command=_script(per_node, files),
        commands={role: "\n".join(lines) for role, lines in commands.items()},
        flags={s.role: s.flags for s in servers}, env={s.role: s.env for s in servers},
        files=files, notes=notes,
    )
