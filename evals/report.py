"""Reports of an evaluation run: per-policy summary as ``report.md``, ``report.json`` and ``report.png``.

Rates, per policy:

* ``valid_rate``: plans with a strategy whose DAG passes every mandatory rule, over the cases that
  expect a plan (not those that must come out infeasible or be asked back);
* ``expectations_rate``: cases whose every expectation held, over all cases (what ``--fail-under``
  looks at); ``checks_rate``: single checks that held, over all checks;
* ``targets_met_rate``: plans that meet their TTFT/TPOT targets, over the cases that set targets and got
  a plan;
* ``reference_match_rate``: plans whose strategy is the case's reference layout, over the cases with a
  reference and a plan (informational: a plan may rightly beat the reference);
  ``reference_sharding_rate``: the same for how the weights are sharded (pp, tp, ep per phase);
* ``median_cost_gap``: median relative gap to the exhaustive search's best on the objective;
* ``mean_wall_s``, ``mean_tool_calls``, ``mean_iterations``, ``tokens`` (total): what the runs cost.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shardplan.io import write_atomic

__all__ = ["SUMMARY_COLUMNS", "summarize", "summary_rows", "render_markdown", "write_report", "plot_rates", "below"]

_RATES = (("valid_rate", "valid plans"), ("expectations_rate", "cases passed"), ("checks_rate", "checks met"),
          ("targets_met_rate", "targets met"))


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-policy metrics of a run's records (see the module docstring), policies in first-seen order.

    >>> summarize([{"policy": "builtin", "case": "a", "valid_plan": True, "expects_plan": True,
    ...             "passed": True, "expectations": 2, "expectations_met": 2, "targets_met": None,
    ...             "cost_gap": 0.0, "wall_s": 1.0, "tool_calls": 2, "iterations": 2, "tokens": None,
    ...             "error": None}])["builtin"]["expectations_rate"]
    1.0
    """
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_policy.setdefault(record["policy"], []).append(record)
    summary = {}
    for policy, rows in by_policy.items():
        plannable = [r for r in rows if r.get("expects_plan", True)]
        targeted = [r for r in rows if r.get("targets_met") is not None]
        referenced = [r for r in rows if r.get("matches_reference") is not None]
        gaps = [r["cost_gap"] for r in rows if r.get("cost_gap") is not None]
        tokens = [r["tokens"] for r in rows if r.get("tokens") is not None]
        summary[policy] = {
            "cases": len(rows),
            "valid_rate": _rate(sum(bool(r.get("valid_plan")) for r in plannable), len(plannable)),
            "expectations_rate": _rate(sum(bool(r.get("passed")) for r in rows), len(rows)),
            "checks_rate": _rate(sum(r.get("expectations_met", 0) for r in rows),
                                 sum(r.get("expectations", 0) for r in rows)),
            "targets_met_rate": _rate(sum(bool(r["targets_met"]) for r in targeted), len(targeted)),
            "reference_match_rate": _rate(sum(bool(r["matches_reference"]) for r in referenced), len(referenced)),
            "reference_sharding_rate": _rate(
                sum(bool(r.get("matches_reference_sharding")) for r in referenced), len(referenced)
            ),
            "median_cost_gap": round(statistics.median(gaps), 4) if gaps else None,
            "max_cost_gap": round(max(gaps), 4) if gaps else None,
            "mean_wall_s": _mean([r.get("wall_s", 0.0) for r in rows]),
            "mean_iterations": _mean([r["iterations"] for r in rows if r.get("iterations") is not None]),
            "mean_tool_calls": _mean([r["tool_calls"] for r in rows if r.get("tool_calls") is not None]),
            "tokens": sum(tokens) if tokens else None,
            "errors": sum(1 for r in rows if r.get("error")),
            "failed_cases": [r["case"] for r in rows if not r.get("passed")],
        }
    return summary


def below(summary: dict[str, dict[str, Any]], threshold: float) -> list[str]:
    """The policies whose expectations rate is under ``threshold``."""
    return [p for p, s in summary.items() if (s["expectations_rate"] or 0.0) < threshold]


def _cell(value: Any, percent: bool = False) -> str:
    if value is None:
        return "-"
    if percent:
        return f"{value:.0%}" if isinstance(value, float) else str(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def summary_rows(summary: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The summary as table rows (one per policy), in the column order of :data:`SUMMARY_COLUMNS`."""
    rows = []
    for policy, s in summary.items():
        gap = s["median_cost_gap"]
        rows.append([policy, str(s["cases"]), _cell(s["valid_rate"], True), _cell(s["expectations_rate"], True),
                     _cell(s["checks_rate"], True), _cell(s["targets_met_rate"], True),
                     _cell(s["reference_match_rate"], True), _cell(s.get("reference_sharding_rate"), True),
                     "-" if gap is None else f"{gap:+.1%}", _cell(s["mean_wall_s"]), _cell(s["mean_iterations"]),
                     _cell(s["mean_tool_calls"]), _cell(s["tokens"]), str(s["errors"])])
    return rows


SUMMARY_COLUMNS = ["policy", "cases", "valid plans", "cases passed", "checks met", "targets met",
                   "reference layout", "reference sharding", "median cost gap", "mean wall s", "mean model calls",
                   "mean tool calls", "tokens", "errors"]
"""Column headers of the summary table."""


def render_markdown(records: Sequence[dict[str, Any]], summary: dict[str, dict[str, Any]]) -> str:
    """The report as markdown: summary table, failed expectations, and one row per case and policy."""
    lines = ["# shardplan evaluation", "", "| " + " | ".join(SUMMARY_COLUMNS) + " |",
             "|" + "---|" * len(SUMMARY_COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(summary)]
    lines += ["", "Valid plans: over cases that expect a plan. Targets met: over cases with targets and a plan. "
              "Reference layout: plans equal to the case's reference strategy, over cases with one (a plan may "
              "rightly beat it); reference sharding: plans that shard the weights as it does (pp, tp, ep per phase), "
              "whatever their microbatches, replicas or token split. "
              "Cost gap: relative to the exhaustive search's best strategy on the request's "
              "objective.", ""]
    failed = [r for r in records if not r.get("passed")]
    lines.append("## Failed expectations")
    lines.append("")
    if not failed:
        lines.append("None: every case met every expectation.")
    for r in failed:
        lines.append(f"- **{r['case']}** ({r['policy']}): " + "; ".join(r.get("failures") or [r.get("error") or "?"]))
    lines += ["", "## Cases", "", "| case | policy | status | strategy | checks | cost gap | wall s |",
              "|---|---|---|---|---|---|---|"]
    for r in records:
        gap = r.get("cost_gap")
        lines.append(f"| {r['case']} | {r['policy']} | {r.get('status')} | {(r.get('strategy') or '-')} | "
                     f"{r.get('expectations_met', 0)}/{r.get('expectations', 0)} | "
                     f"{'-' if gap is None else f'{gap:+.1%}'} | {_cell(r.get('wall_s'))} |")
    return "\n".join(lines) + "\n"


def plot_rates(summary: dict[str, dict[str, Any]], path: str | Path) -> Path:
    """Grouped bars of each policy's rates, saved as a PNG at ``path`` (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(summary)
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for i, policy in enumerate(policies):
        values = [(summary[policy][key] or 0.0) * 100 for key, _ in _RATES]
        xs = [x + (i - (len(policies) - 1) / 2) * width for x in range(len(_RATES))]
        bars = ax.bar(xs, values, width, label=policy)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(_RATES)), [label for _, label in _RATES])
    ax.set_ylabel("%")
    ax.set_ylim(0, 125)
    ax.set_title("shardplan eval: policies compared")
    ax.legend(loc="upper center", ncol=max(len(policies), 1), fontsize=8, frameon=False)
    fig.tight_layout()
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(target)
    return target


def write_report(records: Sequence[dict[str, Any]], out_dir: str | Path, *, plot: bool = True) -> dict[str, Path]:
    """Write ``report.md``, ``report.json`` and (with ``plot``) ``report.png`` into ``out_dir``; returns their paths.

    Raises:
        InputError: the folder is missing or not writable.
    """
    out = Path(out_dir)
    summary = summarize(records)
    paths = {"markdown": write_atomic(out / "report.md", render_markdown(records, summary)),
             "json": write_atomic(out / "report.json",
                                  json.dumps({"policies": summary, "cases": list(records)}, indent=1) + "\n")}
    if plot and summary:
        paths["plot"] = plot_rates(summary, out / "report.png")
    return paths
