"""Economics of a plan: what its deployment costs in dollars and draws in power.

A plan's figures say how fast it serves; these say what that service costs. Dollars follow from the GPUs the
deployment uses and a price per GPU-hour (the request's, or a bundled, dated list price); energy follows from
the GPUs' board power. Both are divided over the tokens the deployment serves, so an under-loaded deployment
(a rate well below its capacity) shows a higher price and more joules per token.
"""

from __future__ import annotations

from pydantic import Field

from shardplan.contracts.common import Contract

__all__ = ["GpuPrice", "Dollars", "Energy", "Economics", "economics_lines"]


class GpuPrice(Contract):
    """The price of one GPU-hour of one GPU type, and where it comes from."""

    gpu: str = Field(min_length=1, description="GPU catalog name the price is for.")
    usd_per_gpu_hour: float = Field(gt=0, allow_inf_nan=False, description="US dollars per GPU per hour.")
    source: str = Field(
        description="Where the price comes from: the request ('--gpu-price', a prices file) or the bundled list "
        "price with its vendor, page and the date it was read."
    )


class Dollars(Contract):
    """What the deployment costs to rent, and that cost per million tokens served."""

    price: GpuPrice = Field(description="The GPU-hour price used (of the prefill pool's GPU when decode_price is set).")
    decode_price: GpuPrice | None = Field(
        default=None,
        description="The decode pool's GPU-hour price when it runs on another GPU type: usd_per_hour then sums each "
        "pool's GPUs at its own price; None: every GPU at price.",
    )
    gpus: int = Field(ge=1, description="GPUs the deployment rents (its GPUs used; idle ones of the budget are not).")
    usd_per_hour: float = Field(ge=0, description="GPUs used x price per GPU-hour.")
    usd_per_million_output_tokens: float = Field(
        ge=0,
        description="The whole hourly cost over the output tokens served in an hour, x 1e6: what a million "
        "generated tokens cost with their prompts included (the figure to compare deployments by).",
    )
    usd_per_million_input_tokens: float = Field(
        ge=0, description="The prompt share of the hourly cost (prefill_share) over the prompt tokens served, x 1e6."
    )
    usd_per_million_output_tokens_decode: float = Field(
        ge=0,
        description="The decode share of the hourly cost (1 - prefill_share) over the output tokens served, x 1e6; "
        "with usd_per_million_input_tokens it prices input and output separately, as API price sheets do.",
    )
    prefill_share: float = Field(ge=0, le=1, description="Share of the hourly cost charged to prompts.")
    split_basis: str = Field(description="How prefill_share was obtained.")


class Energy(Contract):
    """Power and energy per token of the deployment: an estimate, with its basis stated."""

    power_kw: float = Field(ge=0, description="Power of the deployment's GPUs, kW.")
    joules_per_output_token: float = Field(ge=0, description="Power over the output tokens served per second.")
    board_power_w: float = Field(gt=0, description="Board power (TDP) of one GPU, watts, from the GPU catalog.")
    upper_bound: bool = Field(
        description="True when every GPU is taken at its board power all the time: the real draw is lower."
    )
    basis: str = Field(description="How the estimate was made, in one sentence.")


class Economics(Contract):
    """Dollars and energy of a plan's deployment; either is None where its input (a price, a board power) is
    missing, and ``notes`` says which and how to give it."""

    dollars: Dollars | None = Field(default=None, description="Cost; None without a price for the GPU.")
    energy: Energy | None = Field(default=None, description="Power and energy; None without the GPU's board power.")
    notes: list[str] = Field(default_factory=list, description="What is missing or assumed, one line each.")


def economics_lines(economics: Economics) -> list[str]:
    """The economics as the terminal and the report print them: cost, then energy, then what is missing.

    >>> price = GpuPrice(gpu="H100", usd_per_gpu_hour=2.5, source="--gpu-price")
    >>> usd = Dollars(price=price, gpus=8, usd_per_hour=20, usd_per_million_output_tokens=1.5,
    ...               usd_per_million_input_tokens=0.1, usd_per_million_output_tokens_decode=1.2, prefill_share=0.2,
    ...               split_basis="pools")
    >>> for part in economics_lines(Economics(dollars=usd))[0].split(" | "):
    ...     print(part)
    cost: $20.00/h (8 x H100 at $2.50/GPU-h, --gpu-price)
    $1.500 per 1M output tokens, prompts included
    split by GPU time: $0.100 per 1M input, $1.200 per 1M output
    """
    lines = []
    d, e = economics.dollars, economics.energy
    if d is not None:
        rented = f"{d.gpus} x {d.price.gpu} at ${d.price.usd_per_gpu_hour:.2f}/GPU-h, {d.price.source}"
        if d.decode_price is not None:
            rented = (f"prefill {d.price.gpu} at ${d.price.usd_per_gpu_hour:.2f}/GPU-h, decode {d.decode_price.gpu} at "
                      f"${d.decode_price.usd_per_gpu_hour:.2f}/GPU-h; {d.split_basis}")
        lines.append(
            f"cost: ${d.usd_per_hour:,.2f}/h ({rented}) | "
            f"${d.usd_per_million_output_tokens:,.3f} per 1M output tokens, prompts included | "
            f"split by GPU time: ${d.usd_per_million_input_tokens:,.3f} per 1M input, "
            f"${d.usd_per_million_output_tokens_decode:,.3f} per 1M output"
        )
    if e is not None:
        bound = "upper bound, every GPU at its TDP" if e.upper_bound else "estimate"
        lines.append(f"energy ({bound}): {e.power_kw:,.1f} kW | {e.joules_per_output_token:,.2f} J per output token")
    return lines + list(economics.notes)
