"""The engine features a request turns on, and what they did, in the words every surface prints them with (the
terminal's and the chat's request lines and plan, the report's panels)."""

from __future__ import annotations

from shardplan.contracts.feature_effects import PrefixCacheEffect, SpeculationEffect
from shardplan.contracts.plan import Plan
from shardplan.contracts.speculation import Speculation, speculation_text
from shardplan.contracts.workload import Workload
from shardplan.text import counted

__all__ = ["speculation_words", "feature_words", "effect_lines"]


def speculation_words(spec: Speculation) -> str:
    """``spec`` as a person reads it.

    >>> from shardplan.contracts.speculation import parse_speculation
    >>> speculation_words(parse_speculation("mtp:1", 0.8))
    'speculative decoding mtp:1, 0.8 accepted per step (1.8 tokens per step)'
    """
    return (f"speculative decoding {speculation_text(spec)}, {spec.accepted:g} accepted per step "
            f"({spec.tokens_per_step:g} tokens per step)")


def feature_words(workload: Workload) -> str:
    """``, speculative decoding ..., prefix hit 50%`` for what ``workload`` turns on; empty when nothing.

    >>> feature_words(Workload(isl=2048, osl=256, prefix_hit=0.5))
    ', prefix hit 50% of prompt tokens'
    """
    parts = []
    if workload.speculation is not None:
        parts.append(speculation_words(workload.speculation))
    if workload.prefix_hit > 0:
        parts.append(f"prefix hit {workload.prefix_hit:.0%} of prompt tokens")
    return "".join(f", {part}" for part in parts)


def _speculation_line(spec: Speculation | None, effect: SpeculationEffect, tpot_ms: float) -> str:
    what = speculation_text(spec) if spec is not None else "speculation"
    accepted = f", {spec.accepted:g} of {counted(spec.draft_tokens, 'draft')} accepted" if spec is not None else ""
    return (f"speculative decoding {what}{accepted}: {effect.tokens_per_step:g} tokens per step "
            f"({effect.verify_tokens} verified); step {effect.step_ms:.2f} ms (drafting {effect.draft_ms:.2f}) vs "
            f"{effect.step_without_ms:.2f} ms plain; TPOT {tpot_ms:.2f} ms, {effect.tpot_without_ms:.2f} ms without; "
            f"drafter {effect.draft_memory_gb:.2f} GB per GPU")


def _prefix_line(effect: PrefixCacheEffect, isl: int, ttft_ms: float) -> str:
    source = {"request": "the request's", "trace": "the trace's prefix groups", "simulation": "the simulated cache"}
    parts = [f"prefix caching: {effect.hit:.0%} of prompt tokens hit ({source[effect.source]}); prefill computes "
             f"{effect.prefill_tokens_computed:,.0f} of {isl:,} prompt tokens, {effect.prefill_work_saved:.0%} of "
             f"its time saved; TTFT {ttft_ms:,.1f} ms, {effect.ttft_without_ms:,.1f} ms without; shared prefix KV "
             f"{effect.shared_kv_gb:.2f} GB per GPU"]
    if effect.max_concurrency is not None and effect.max_concurrency_without is not None:
        parts.append(f"{counted(effect.max_concurrency, 'sequence', spec=',')} per worker fit, "
                     f"{effect.max_concurrency_without:,} without")
    if effect.prefill_gpus_without is not None:
        parts.append(f"{effect.prefill_gpus_without} prefill GPUs without the cache")
    return "; ".join(parts)


def effect_lines(plan: Plan) -> list[str]:
    """What speculative decoding and prefix caching did in ``plan``'s deployment (its cost report's effects beside
    the plan's figures), one line each, then the notes on how they were priced; empty where neither is on."""
    cost = plan.dag_cost
    if cost is None:
        return []
    figures = plan.figures if plan.figures is not None else cost.figures
    lines = []
    if cost.speculation is not None:
        lines.append(_speculation_line(plan.request.workload.speculation, cost.speculation, figures.tpot_ms))
        lines += cost.speculation.notes
    if cost.prefix_cache is not None:
        lines.append(_prefix_line(cost.prefix_cache, plan.request.workload.isl, figures.ttft_ms))
        lines += cost.prefix_cache.notes
    return lines
