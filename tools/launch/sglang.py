"""SGLang's command line for a plan's servers.

Flag names checked against the engine's own documentation (read through the search tool):

* SGLang: ``docs/advanced_features/server_arguments.md`` (``--model-path``, ``--tp-size``, ``--pp-size``,
  ``--dp-size``, ``--enable-dp-attention``, ``--ep-size``, ``--moe-a2a-backend deepep``,
  ``--max-running-requests``, ``--pp-max-micro-batch-size``, ``--kv-cache-dtype fp8_e4m3``, ``--nnodes``,
  ``--node-rank``, ``--dist-init-addr``, ``--disaggregation-mode``, ``--disaggregation-transfer-backend
  nixl``); ``--enable-ep-moe`` is deprecated in favour of ``--ep-size`` (sgl-project/SpecForge#246);
  ``docs/advanced_features/pd_disaggregation.md`` (``--tp-size 16 --dp-size 8 --enable-dp-attention``,
  ``python -m sglang_router.launch_router --pd-disaggregation --prefill URL --decode URL``). The step budget:
  ``--chunked-prefill-size`` (default by GPU memory, divided among the ranks under ``--enable-dp-attention``) and
  ``--max-prefill-tokens`` (16384), written where the plan's budget differs from the default.
* Speculative decoding: ``docs/advanced_features/speculative_decoding.md`` (``--speculative-algorithm`` EAGLE,
  EAGLE3, STANDALONE or NEXTN, the alias of EAGLE that MTP models use; ``--speculative-draft-model-path``, which MTP
  models may leave out; ``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``,
  set all three or none, and with topk 1 the draft tokens are num_steps + 1; STANDALONE does not support
  ``--enable-dp-attention``). Prefix caching: the radix cache is on by default (``--disable-radix-cache`` in
  ``server_arguments.md`` turns it off), so a plan that counts on it needs no flag.
"""

from __future__ import annotations

from shardplan.text import counted
from shardplan.tools.launch.servers import Role, Server, Target, microbatch_note, pool_notes, seqs_per_scheduler

__all__ = ["configure", "extras", "feature_notes"]

_ALGORITHM = {"mtp": "NEXTN", "eagle": "EAGLE3", "draft": "STANDALONE"}
_MAX_PREFILL_TOKENS = 16384
"""SGLang's default ``--max-prefill-tokens``: the prompt tokens one prefill batch takes at most."""
# SGLang's documented MTP models: MiMo (speculative_decoding.md) and DeepSeek (basic_usage/deepseek_v32.md).
_MTP_MODEL_TYPES = frozenset({"deepseek_v3", "deepseek_v32", "mimo"})


def _feature_flags(target: Target, server: Server) -> None:
    drafting = target.drafting
    if drafting is None:
        return
    flags = server.flags
    flags["--speculative-algorithm"] = _ALGORITHM[drafting.spec.method]
    if drafting.drafter is not None:
        flags["--speculative-draft-model-path"] = drafting.drafter
    # One chain of K drafts (topk 1), as the plan priced it: K drafting steps, K + 1 tokens verified.
    flags["--speculative-num-steps"] = drafting.spec.draft_tokens
    flags["--speculative-eagle-topk"] = 1
    flags["--speculative-num-draft-tokens"] = drafting.spec.verify_tokens


def feature_notes(target: Target, servers: list[Server], notes: list[str]) -> None:
    """What SGLang does with the plan's speculation and prefix caching that the flags do not say."""
    drafting = target.drafting
    if drafting is not None and drafting.spec.method == "mtp" and drafting.model_type not in _MTP_MODEL_TYPES:
        notes.append(f"SGLang documents MTP (NEXTN) for DeepSeek and MiMo models; check that your release supports "
                     f"it for {drafting.model_type}")
    if drafting is not None and drafting.spec.method == "draft":
        for server in servers:
            if server.flags.get("--enable-dp-attention"):
                notes.append(f"{server.role}: SGLang's STANDALONE draft model does not support "
                             "--enable-dp-attention; drop one of the two")
    if drafting is not None and drafting.spec.method == "eagle":
        notes.append("the EAGLE head is loaded as EAGLE-3 (--speculative-algorithm EAGLE3), as the plan priced it; an "
                     "EAGLE-1/2 head (EAGLE) drafts with the target's full LM head and was not priced")
    if target.prefix_hit > 0:
        notes.append(f"the plan counts on {target.prefix_hit:.0%} of prompt tokens found in the prefix cache: "
                     "SGLang's radix cache, on by default, finds them (do not pass --disable-radix-cache)")
    # SGLang sizes its KV pool with its own share of the GPU, which depends on the release and the TP size (0.4.x:
    # 0.88 at one GPU down to 0.81 at eight and 0.79 at sixteen, ServerArgs); the plan gave the engine a share of the
    # whole GPU as vLLM takes it. Written as a note, not a flag: SGLang's smaller default leaves room for what it
    # captures beside the pool (CUDA graphs, communication buffers), which the plan's memory account does not hold.
    notes.append(f"the plan sized the KV cache with {target.memory_share:g} of each GPU for the engine, as vLLM takes "
                 "it; SGLang takes its own --mem-fraction-static (0.79 to 0.88 by TP size in its 0.4 releases), so its "
                 "cache may hold fewer sequences than the plan's")


def configure(target: Target, server: Server, notes: list[str], disaggregated: bool) -> None:
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
        notes.append(f"{server.role}: SGLang's data-parallel attention covers MoE models only; the "
                     f"adp={counted(p.adp, 'group')} "
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
    flags["--max-running-requests"] = seqs_per_scheduler(p, target.sequences(server.role), p.dp)
    ranks = p.adp if flags.get("--enable-dp-attention") else 1
    budget = target.step_budget_flag(server, "sglang", ranks)
    if budget is not None:
        flags["--chunked-prefill-size"] = budget
        if target.max_batched_tokens > _MAX_PREFILL_TOKENS:  # a prompt batch is capped by this too
            flags["--max-prefill-tokens"] = target.max_batched_tokens
    if p.pp > 1 and p.mb > 1:
        flags["--pp-max-micro-batch-size"] = seqs_per_scheduler(p, target.sequences(server.role), p.dp * p.mb)
        notes.append(f"{server.role}: mb={p.mb} is approximated by capping the pipeline microbatch size "
                     "(--pp-max-micro-batch-size); SGLang picks the count itself")
    else:
        microbatch_note("SGLang", server.role, p, notes)
    if target.kv_fp8:
        flags["--kv-cache-dtype"] = "fp8_e4m3"
    _feature_flags(target, server)
    if disaggregated:
        flags["--disaggregation-mode"] = server.role
        flags["--disaggregation-transfer-backend"] = "nixl"
        server.port = 30000 if server.role == "prefill" else 30100
    elif server.instances > 1:
        server.port = 30000
    if server.gpus > target.gpus_per_node:
        server.multinode = "sglang"


def extras(servers: list[Server], notes: list[str]) -> list[tuple[Role, str, int]]:
    pair = pool_notes(
        servers,
        notes,
        multinode="a server spans nodes: run its node-rank k line on node k, with HEAD_IP set to the address of its "
        "first node",
        engine="SGLang",
        balancer="a load balancer (the SGLang router)",
    )
    if pair is None:
        return []
    prefill, decode = pair
    assert prefill.port is not None and decode.port is not None  # split_pair checked them
    urls = [f"--prefill http://127.0.0.1:{prefill.port + i}" for i in range(prefill.instances)]
    urls += [f"--decode http://127.0.0.1:{decode.port + i}" for i in range(decode.instances)]
    notes.append("disaggregated: NIXL moves the KV cache; the SGLang router on port 8000 pairs prefill and decode "
                 "servers")
    return [("router", "python -m sglang_router.launch_router --pd-disaggregation " + " ".join(urls)
             + " --host 0.0.0.0 --port 8000", 0)]
