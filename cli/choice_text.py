"""The terminal table of a plan across several GPU types or engines: each one's deployment, price, what priced it,
and why it lost."""

from __future__ import annotations

from rich.table import Table

from shardplan.cli.app import console
from shardplan.contracts.choice import Choice

__all__ = ["print_choice"]


def _money(value: float | None, digits: int) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"


def print_choice(choice: Choice) -> None:
    """The choice under the plan: one row per GPU type or engine, the chosen first, then the rule and the budget."""
    by_engine = choice.dimension == "engine"
    first = "engine" if by_engine else "GPU"
    title = "engines compared" if by_engine else "GPU types compared"
    columns = [first] if by_engine else [first, "engine"]
    table = Table(*columns, "status", "priced by", "GPUs", "deployment", "$/h", "$/1M out", "tok/s/GPU", "reason",
                  title=f"{title}: {choice.chosen or 'none meets the targets'}")
    for o in choice.options:
        used = f"{o.gpus_used}/{o.gpu_budget}" if o.gpus_used and o.gpu_budget else "-"
        rate = "-" if o.tokens_per_s_per_gpu is None else f"{o.tokens_per_s_per_gpu:,.0f}"
        names = [o.engine or "-"] if by_engine else [o.gpu, o.engine or "-"]
        table.add_row(*names, o.status, o.pricing or "-", used, o.deployment or "-", _money(o.usd_per_hour, 2),
                      _money(o.usd_per_million_output_tokens, 3), rate, o.reason)
    out = console()
    out.print(table)
    out.print(f"chosen by {choice.basis}; {choice.budget}")
    if by_engine:
        for o in choice.options:
            if o.pricing is not None:
                out.print(f"[dim]{o.engine}: {o.pricing} ({o.pricing_data})[/dim]")
