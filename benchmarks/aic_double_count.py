"""The all-reduces AIConfigurator 0.12.0 counts twice in DeepSeek on vLLM, read from its own per-op breakdown.

vLLM runs two tensor-parallel all-reduces in each DeepSeek decoder layer: the attention's output projection
(``RowParallelLinear``, ``reduce_results=True``) and the MoE layer's output (``FusedMoE`` reduces the routed and
shared experts' sum once; the shared experts are built with ``reduce_results=False``), in
vllm/model_executor/models/deepseek_v2.py. With the attention tensor-parallel and no attention data parallelism
there is nothing to dispatch: every rank already holds every token.

AIConfigurator's DeepSeek model (``aiconfigurator_core/sdk/models/deepseek.py``) prices four. It composes both
all-reduces itself, ``context_tp_allreduce`` and ``generation_tp_allreduce`` (``2 x num_layers`` custom
all-reduces, "one collective after attention proj, one after MoE", added by github.com/ai-dynamo/aiconfigurator
pull 1064), and also keeps its ``MoEDispatch`` ops, whose vLLM branch charges a custom all-reduce of the same
tokens before the experts and another after them when the attention is tensor-parallel
(``aic-core/.../operators/moe_dispatch.rs``: "Pre-dispatch AR is a proxy for the attention-output all-reduce;
skipped when the model prices it itself"). The switch that skips the proxy, ``attn_ar_modeled``, is set by its
Qwen3.5 model only (pull 1503); DeepSeek leaves it off, and the post-dispatch all-reduce is the MoE output's
again. So each layer carries two all-reduces vLLM does not run, each priced exactly as one of the model's own:
in the prefill breakdown ``context_moe_pre_dispatch`` and ``context_moe_post_dispatch`` (equal, together equal
to ``context_tp_allreduce``), in the decode breakdown inside ``generation_moe_overlap`` (equal together to
``generation_tp_allreduce``, the one priced on its own line).

:func:`without_double_count` takes them out of AIConfigurator's TTFT and TPOT, from the breakdown that
``cli estimate --detail time`` prints, so the comparison can show AIConfigurator's estimate with and without
them. It is AIConfigurator's own arithmetic with two ops left out, not a model of shardplan's.
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass, field

from aiconfigurator_cli import AicError, parse_error

__all__ = ["Breakdown", "parse_breakdown", "run_breakdown", "counts_allreduces_twice", "without_double_count"]

_SECTION = re.compile(r"^(Context phase|Generation phase|Mix Step|Gen-Only Step) \(total = ([\d,.]+) ms")
_OP = re.compile(r"^\s+([a-z0-9_]+)\s+([\d,.]+) ms")
_STEPS = re.compile(r"^Scheduling: ([\d.]+) mix steps \+ ([\d.]+) gen-only steps")
_ARCHITECTURE = re.compile(r"architecture=([A-Za-z0-9_]+)")
# The architecture AIConfigurator resolves DeepSeek-V3/R1 to (its log: "Loaded model config ... architecture=").
DEEPSEEK_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM"})
_PRE, _POST = "context_moe_pre_dispatch", "context_moe_post_dispatch"


@dataclass
class Breakdown:
    """``cli estimate --detail time``: each section's total and its ops (ms), the agg schedule's step counts."""

    architecture: str = ""
    totals: dict[str, float] = field(default_factory=dict)
    ops: dict[str, dict[str, float]] = field(default_factory=dict)
    mix_steps: float = 0.0
    genonly_steps: float = 0.0


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse_breakdown(stdout: str) -> Breakdown:
    """The sections of the detail report (its ``... (others, N items)`` line is not an op and is skipped)."""
    found = Breakdown()
    section = None
    for line in stdout.splitlines():
        if not found.architecture and (match := _ARCHITECTURE.search(line)):
            found.architecture = match.group(1)
        if match := _STEPS.match(line):
            found.mix_steps, found.genonly_steps = float(match.group(1)), float(match.group(2))
        elif match := _SECTION.match(line):
            section = match.group(1)
            found.totals[section] = _number(match.group(2))
            found.ops[section] = {}
        elif section is not None and (match := _OP.match(line)):
            found.ops[section][match.group(1)] = _number(match.group(2))
        elif not line.strip():
            section = None
    return found


def run_breakdown(command: list[str], timeout_s: float) -> Breakdown:
    """Run a ``cli estimate ... --detail time`` call and read its breakdown (``AicError`` when it prints none)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AicError(f"{command[0]} did not finish: {error}") from error
    found = parse_breakdown(done.stdout + "\n" + done.stderr)
    if not found.ops:
        raise AicError(parse_error(done.stdout + "\n" + done.stderr))
    return found


def counts_allreduces_twice(breakdown: Breakdown, engine: str, tp: int, attention_dp: int) -> bool:
    """Whether AIConfigurator's estimate carries the two extra all-reduces a layer: its DeepSeek model on vLLM with
    the attention tensor-parallel and no attention data parallelism (where its dispatch ops price all-reduces)."""
    return (breakdown.architecture in DEEPSEEK_ARCHITECTURES and engine == "vllm" and tp > 1 and attention_dp == 1
            and any(_PRE in ops for ops in breakdown.ops.values()))


def _queuing_factor(batch: int) -> float:
    """AIConfigurator's vLLM agg TTFT multiplier on the prefill step (``VllmBackend._ttft_queuing_factor``)."""
    return 1.0 if batch <= 1 else min(1.0 + math.log2(batch) / 8.0, 2.0)


def without_double_count(breakdown: Breakdown, ttft_ms: float, tpot_ms: float, batch: int) -> tuple[float, float]:
    """AIConfigurator's (TTFT, TPOT) less the all-reduces it counts twice (:func:`counts_allreduces_twice`).

    Static: TTFT is the prefill's op sum, less its pre- and post-dispatch all-reduces; TPOT is the decode's op sum
    over the tokens, less the decode's two extra all-reduces a layer, ``generation_tp_allreduce`` (the experts
    outlast the shared experts they overlap, so the two inside ``generation_moe_overlap`` add to it in full).
    Agg: TTFT is AIConfigurator's prefill step (the mix step, plus its per-layer dispatch allowance) times its
    queuing factor, so the step's two all-reduces come out times that factor; TPOT is the mean of the mix and
    decode-only steps, so each step's share comes out in proportion.
    """
    if "Mix Step" in breakdown.ops:
        mix, gen = breakdown.ops["Mix Step"], breakdown.ops.get("Gen-Only Step", {})
        mix_extra = mix.get(_PRE, 0.0) + mix.get(_POST, 0.0)
        ttft = ttft_ms - _queuing_factor(batch) * mix_extra
        total = breakdown.mix_steps * breakdown.totals["Mix Step"] + breakdown.genonly_steps * breakdown.totals.get(
            "Gen-Only Step", 0.0)
        extra = breakdown.mix_steps * mix_extra + breakdown.genonly_steps * gen.get("generation_tp_allreduce", 0.0)
        return ttft, tpot_ms * (1 - extra / total) if total > 0 else tpot_ms
    context, generation = breakdown.ops["Context phase"], breakdown.ops.get("Generation phase", {})
    ttft = ttft_ms - context.get(_PRE, 0.0) - context.get(_POST, 0.0)
    total = breakdown.totals.get("Generation phase", 0.0)
    tpot = tpot_ms * (1 - generation.get("generation_tp_allreduce", 0.0) / total) if total > 0 else tpot_ms
    return ttft, tpot
