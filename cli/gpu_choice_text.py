"""The terminal table of a plan across several GPU types: each type's deployment, price and why it lost."""

from __future__ import annotations

from rich.table import Table

from shardplan.cli.app import console
from shardplan.contracts.gpu_choice import GpuChoice

__all__ = ["print_gpu_choice"]


def _money(value: float | None, digits: int) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"


def print_gpu_choice(choice: GpuChoice) -> None:
    """The choice under the plan: one row per GPU type, the chosen first, then the rule and the budget."""
    table = Table("GPU", "status", "GPUs", "deployment", "$/h", "$/1M out", "tok/s/GPU", "reason",
                  title=f"GPU types compared: {choice.chosen or 'none meets the targets'}")
    for o in choice.options:
        used = f"{o.gpus_used}/{o.gpu_budget}" if o.gpus_used and o.gpu_budget else "-"
        rate = "-" if o.tokens_per_s_per_gpu is None else f"{o.tokens_per_s_per_gpu:,.0f}"
        table.add_row(o.gpu, o.status, used, o.deployment or "-", _money(o.usd_per_hour, 2),
                      _money(o.usd_per_million_output_tokens, 3), rate, o.reason)
    out = console()
    out.print(table)
    out.print(f"chosen by {choice.basis}; {choice.budget}")
