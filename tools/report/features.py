"""The report's section on the engine features the request turned on: speculative decoding (the drafter, draft
tokens and acceptance, the verify step against a plain one, TPOT with and without, the drafter's memory) and
prefix caching (the hit rate and where it comes from, the prefill work saved, TTFT with and without, the
sequences memory holds, the prefill GPUs a split deployment needs without it)."""

from __future__ import annotations

from shardplan.contracts.feature_effects import PrefixCacheEffect, SpeculationEffect
from shardplan.contracts.plan import Plan
from shardplan.contracts.speculation import speculation_text
from shardplan.tools.report.svg import esc

__all__ = ["features_html"]

_SOURCES = {"request": "the request", "trace": "the trace's prefix groups", "simulation": "the simulated cache"}


def _rows(rows: list[tuple[str, str, str]]) -> str:
    body = "".join(f"<tr><th>{esc(name)}</th><td>{esc(with_)}</td><td>{esc(without)}</td></tr>"
                   for name, with_, without in rows)
    return ('<table class="figures"><thead><tr><th></th><th>with</th><th>without</th></tr></thead>'
            f"<tbody>{body}</tbody></table>")


def _speculation(plan: Plan, effect: SpeculationEffect, tpot_ms: float) -> str:
    spec = plan.request.workload.speculation
    said = (f"{speculation_text(spec)}: {spec.draft_tokens} draft tokens per step, {spec.accepted:g} accepted on "
            "average (given)" if spec is not None else "speculative decoding")
    rows = [("tokens per step", f"{effect.tokens_per_step:g} ({effect.verify_tokens} verified)", "1"),
            ("decode step", f"{effect.step_ms:.2f} ms (drafting {effect.draft_ms:.2f} ms)",
             f"{effect.step_without_ms:.2f} ms"),
            ("TPOT", f"{tpot_ms:.2f} ms", f"{effect.tpot_without_ms:.2f} ms"),
            ("drafter memory per GPU", f"{effect.draft_memory_gb:.2f} GB", "0 GB")]
    notes = "".join(f"<li>{esc(note)}</li>" for note in effect.notes)
    return (f"<h3>Speculative decoding</h3><p>{esc(said)}</p>{_rows(rows)}"
            + (f'<ul class="notes">{notes}</ul>' if notes else ""))


def _prefix(plan: Plan, effect: PrefixCacheEffect, ttft_ms: float) -> str:
    isl = plan.request.workload.isl
    rows = [("prompt tokens prefill computes", f"{effect.prefill_tokens_computed:,.0f}", f"{isl:,}"),
            ("prefill time saved", f"{effect.prefill_work_saved:.0%}", "0%"),
            ("TTFT", f"{ttft_ms:,.1f} ms", f"{effect.ttft_without_ms:,.1f} ms"),
            ("shared prefix KV per GPU", f"{effect.shared_kv_gb:.2f} GB", "0 GB")]
    if effect.max_concurrency is not None and effect.max_concurrency_without is not None:
        rows.append(("sequences memory holds per worker", f"{effect.max_concurrency:,}",
                     f"{effect.max_concurrency_without:,}"))
    d = plan.deployment
    if effect.prefill_gpus_without is not None and d is not None:
        used = sum(p.workers * p.gpus_per_worker for p in d.pools if p.role == "prefill")
        rows.append(("prefill GPUs for the rate", f"{used}", f"{effect.prefill_gpus_without}"))
    notes = "".join(f"<li>{esc(note)}</li>" for note in effect.notes)
    return (f"<h3>Prefix caching</h3><p>{effect.hit:.0%} of prompt tokens found in the cache (from "
            f"{esc(_SOURCES[effect.source])})</p>{_rows(rows)}" + (f'<ul class="notes">{notes}</ul>' if notes else ""))


def features_html(plan: Plan) -> str:
    """The section's HTML; empty when the plan's cost report holds neither effect."""
    cost = plan.dag_cost
    if cost is None or (cost.speculation is None and cost.prefix_cache is None):
        return ""
    figures = plan.figures if plan.figures is not None else cost.figures
    parts = []
    if cost.speculation is not None:
        parts.append(_speculation(plan, cost.speculation, figures.tpot_ms))
    if cost.prefix_cache is not None:
        parts.append(_prefix(plan, cost.prefix_cache, figures.ttft_ms))
    return "".join(parts)
