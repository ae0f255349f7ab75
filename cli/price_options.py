"""The price options of ``plan`` and ``sweep``: ``--gpu-price GPU=DOLLARS,...`` and ``--prices FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shardplan.contracts.economics import GpuPrice
from shardplan.tools.catalogs.prices import load_prices, parse_gpu_prices

__all__ = ["GpuPriceOption", "PricesOption", "given_prices"]

GpuPriceOption = Annotated[
    str | None,
    typer.Option("--gpu-price", help="Dollars per GPU-hour, e.g. H100=2.5,H200=3.6 (default: the bundled, dated "
                 "list prices, editable defaults; see README)."),
]
PricesOption = Annotated[
    Path | None,
    typer.Option("--prices", help="A prices YAML ('prices: {H100: 2.5}'); --gpu-price overrides its entries."),
]


def given_prices(gpu_price: str | None, prices: Path | None) -> dict[str, GpuPrice]:
    """The prices the options give (the file's, then the flag's over them); empty when neither is given.

    Raises:
        InputError: an unreadable file or flag (named in the message).
    """
    given: dict[str, GpuPrice] = {}
    if prices is not None:
        given.update(load_prices(prices))
    if gpu_price is not None:
        given.update(parse_gpu_prices(gpu_price))
    return given

