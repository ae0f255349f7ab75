"""Launch commands for a plan: the vLLM, SGLang or TensorRT-LLM command line that serves its deployment.

Each engine expresses a different subset of the plan's degrees. :func:`launch_command` maps what it can
onto real flags and says in ``notes``, plainly, what the engine cannot express (a prefill SP degree,
different prefill and decode layouts on shared GPUs, a microbatch count, an expert-parallel degree the
engine derives by itself). Every replica or pool worker is a server process of its own, on the GPUs the
deployment's placement gives it (:func:`shardplan.tools.serving.place_workers`), with the engine's
concurrency limit taken from the deployment. One module per engine holds its flags and the documentation
they were checked against.

>>> from shardplan.contracts.plan import PlanRequest
>>> from shardplan.contracts.workload import Workload
>>> from shardplan.contracts.strategy import parse_strategy
>>> from shardplan.tools.planning.planner import plan_for_strategy, resolve_request
>>> request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=2, workload=Workload(isl=512, osl=64, batch=4))
>>> model, cluster = resolve_request(request)
>>> launch_command(plan_for_strategy(request, model, cluster, parse_strategy("tp=2")), "vllm").command
'vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 --max-num-seqs 4'
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel, ConfigDict, Field

from shardplan.contracts.plan import Plan
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.launch import sglang, trtllm, vllm
from shardplan.tools.launch.servers import (
    ENGINES,
    Engine,
    FlagValue,
    node_labels,
    open_arrivals,
    plan_servers,
    plan_target,
)
from shardplan.tools.launch.shell import instance_lines, script, shell_word

__all__ = ["Engine", "ENGINES", "FlagValue", "LaunchSpec", "launch_command", "shell_word"]


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


def launch_command(plan: Plan, engine: Engine, spec_model: str | None = None) -> LaunchSpec:
    """The command line that serves ``plan``'s strategy with ``engine``.

    Colocated plans get one server role (``serve``); disaggregated plans get ``prefill`` and ``decode``
    roles and a ``router`` where the engine needs one. Each role runs ``dp`` processes when replicas are
    separate servers. Ports: vLLM 8000 (8100 prefill, 8200 decode), SGLang 30000 (30100 decode, router
    8000), TensorRT-LLM 8000 (8001 context, 8101 generation, orchestrator 8000).

    A plan that speculates gets each engine's speculative-decoding flags on every server (prefill and decode pools
    hold the same layers, the drafter's included, so the KV cache they hand over has one layout); ``spec_model``
    is the EAGLE head (required for ``eagle``) or a local copy of the draft model. A plan that counts on prefix
    caching gets the flag that turns the engine's cache on where it is not on by default.

    Raises:
        InputError: unknown engine, a plan without a strategy (infeasible), or a drafter that cannot be loaded
            (:func:`shardplan.tools.launch.features.drafting`).
    """
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}", field="engine", fix=f"choose one of {', '.join(ENGINES)}")
    if plan.strategy is None:
        raise InputError("the plan is infeasible and has no strategy to launch", field="strategy",
                         fix=(f"plan again with at least {counted(plan.min_gpus, 'GPU')}" if plan.min_gpus
                              else "plan again with more GPUs or a smaller workload"))
    notes: list[str] = []
    if plan.status == "infeasible":
        notes.append("the plan is marked infeasible (it does not fit in GPU memory); these commands will not start")
    priced = plan.request.workload.engine
    if engine != priced:
        # Each engine has its own kernel tables, collectives and scheduler in the cost model: the plan's figures are
        # those of the engine it was priced for.
        notes.append(f"the plan was priced for {priced}: its figures are {priced}'s, not {engine}'s (kernels, "
                     f"collectives and scheduling differ); plan again with --engine {engine} for {engine}'s own")
    target = plan_target(plan, spec_model)
    running = target.sequences("decode" if plan.strategy.disaggregated else "serve")
    if open_arrivals(plan) and plan.deployment is not None and running > plan.deployment.concurrency:
        notes.append(f"the plan keeps {counted(plan.deployment.concurrency, 'sequence')} in flight on average at "
                     f"{plan.request.workload.rate:g} requests/s; the engines' limits are what their KV cache holds "
                     f"({running} in all), so arrivals above the mean run rather than queue")
    servers = plan_servers(plan, notes, target)
    disaggregated = plan.strategy.disaggregated
    files: dict[str, str] = {}
    for server in servers:
        if engine == "vllm":
            vllm.configure(target, server, notes, disaggregated)
        elif engine == "sglang":
            sglang.configure(target, server, notes, disaggregated)
        else:
            trtllm.configure(target, server, notes, disaggregated, files)
    if engine == "vllm":
        vllm.feature_notes(target, servers, notes)
        extras = vllm.extras(servers, notes)
    elif engine == "sglang":
        sglang.feature_notes(target, servers, notes)
        extras = sglang.extras(servers, notes)
    else:
        trtllm.feature_notes(target, servers, notes)
        extras = trtllm.extras(servers, notes, files)
        if target.kv_fp8:
            notes.append("the plan assumes an fp8 KV cache; set the KV-cache format in the TensorRT-LLM config as "
                         "your release documents it")
    if target.drafting is not None and target.drafting.head_note:
        notes.append(f"the plan priced this {target.drafting.head_note}")
    if plan.request.weight_dtype:
        notes.append(f"the plan assumes {plan.request.weight_dtype} weights: serve a checkpoint in that format")
    if plan.request.attention_dtype == "fp8":
        # No engine flag names the attention math apart from the KV format; the kernel the backend picks decides.
        notes.append("the plan prices attention in FP8 (FP8 queries over the FP8 KV cache on FP8 tensor cores): run "
                     "an attention backend that does so (FlashMLA's FP8 decode kernel for MLA, TensorRT-LLM's FP8 "
                     "context FMHA for prompts) as your release documents it; with a backend that widens the cache "
                     "to bf16 the attention is slower than planned")
    if plan.request.weight_formats:
        # Engines read each part's format from the checkpoint (its quantization config), not from a flag.
        parts = ", ".join(f"{part} {dtype}" for part, dtype in plan.request.weight_formats.items())
        notes.append(f"the plan assumes these parts stored apart ({parts}): serve a checkpoint whose quantization "
                     "config stores them so")

    per_node: dict[int, list[str]] = defaultdict(list)
    commands: dict[str, list[str]] = defaultdict(list)
    for server in servers:
        for node, line in instance_lines(target, server):
            per_node[node].append(line)
            commands[server.role].append(line)
    for role, line, node in extras:
        per_node[node].append(line)
        commands[role].append(line)
    return LaunchSpec(
        engine=engine, model=target.model, command=script(per_node, files, node_labels(servers, target)),
        commands={role: "\n".join(lines) for role, lines in commands.items()},
        flags={s.role: s.flags for s in servers}, env={s.role: s.env for s in servers},
        files=files, notes=notes,
    )
