"""GPU prices: the bundled, dated list prices (editable defaults) and the user's own, from a flag or a file."""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from shardplan.contracts.economics import GpuPrice
from shardplan.errors import InputError
from shardplan.reading import parse_yaml_text, read_text
from shardplan.text import one_line
from shardplan.tools.catalogs.gpus import get_gpu

__all__ = ["bundled_prices", "parse_gpu_prices", "load_prices", "price_for", "PRICE_FLAG_FIX"]

PRICE_FLAG_FIX = "write GPU=DOLLARS per GPU-hour, comma-separated, e.g. --gpu-price H100=2.5,H200=3.6"


def _bundled_source(name: str, entry: dict[str, Any]) -> str:
    # The transcription it was read through stays in the YAML; the plan names the vendor, page and date.
    return f"bundled list price (editable default): {entry['vendor']}, {entry['url']}, read {entry['read_on']}"


@lru_cache(maxsize=1)
def bundled_prices() -> dict[str, GpuPrice]:
    """The bundled on-demand list prices by GPU catalog name (``tools/data/prices.yaml``), each with its source.

    >>> bundled_prices()["H100"].usd_per_gpu_hour > 0
    True
    """
    import yaml

    raw = yaml.safe_load((resources.files("shardplan.tools") / "data" / "prices.yaml").read_text())
    return {
        name: GpuPrice(gpu=name, usd_per_gpu_hour=entry["usd_per_gpu_hour"], source=_bundled_source(name, entry))
        for name, entry in raw["prices"].items()
    }


def _price(gpu: str, value: Any, source: str, field: str, fix: str) -> GpuPrice:
    """One price checked: a known GPU (its catalog name kept) and a positive, finite number of dollars."""
    name = get_gpu(str(gpu)).name
    try:
        dollars = float(value)
    except (TypeError, ValueError):
        raise InputError(f"the price of {name} is not a number: {one_line(str(value), 40)!r}", field=field,
                         fix=fix) from None
    if not math.isfinite(dollars) or dollars <= 0:
        raise InputError(f"the price of {name} is {value!r}, not a positive number of dollars per GPU-hour",
                         field=field, fix=fix)
    return GpuPrice(gpu=name, usd_per_gpu_hour=dollars, source=source)


def parse_gpu_prices(text: str) -> dict[str, GpuPrice]:
    """Prices from ``--gpu-price`` text, ``GPU=DOLLARS`` pairs separated by commas.

    Raises:
        InputError: a pair without '=', an unknown GPU, a price that is not a positive number, a GPU twice.

    >>> parse_gpu_prices("h100=2.5, H200=3.6")["H200"].usd_per_gpu_hour
    3.6
    """
    prices: dict[str, GpuPrice] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        gpu, sep, value = part.partition("=")
        if not sep or not gpu.strip() or not value.strip():
            raise InputError(f"cannot read the price {one_line(part, 60)!r}", field="gpu_price", fix=PRICE_FLAG_FIX)
        price = _price(gpu.strip(), value.strip(), "--gpu-price", "gpu_price", PRICE_FLAG_FIX)
        if price.gpu in prices:
            raise InputError(f"{price.gpu} is priced twice", field="gpu_price", fix="give each GPU one price")
        prices[price.gpu] = price
    if not prices:
        raise InputError("--gpu-price names no GPU", field="gpu_price", fix=PRICE_FLAG_FIX)
    return prices


def load_prices(path: str | Path) -> dict[str, GpuPrice]:
    """Prices from a YAML file: ``prices:`` mapping GPU names to dollars per GPU-hour, either a number or a mapping
    with ``usd_per_gpu_hour`` (and, optionally, ``vendor``, ``url``, ``read_on``), as the bundled file has.

    Raises:
        InputError: an unreadable file, no ``prices`` mapping, an unknown GPU, a price that is not a positive number.
    """
    file = Path(path)
    what = f"prices file {one_line(str(path), 200)}"
    fix = "give a YAML file with 'prices: {H100: 2.5, H200: 3.6}' (dollars per GPU-hour)"
    raw = parse_yaml_text(read_text(file, what=what, field="prices", fix=fix), what=what, field="prices", fix=fix)
    table = raw.get("prices") if isinstance(raw, dict) else None
    if not isinstance(table, dict) or not table:
        raise InputError(f"{what} has no 'prices' mapping", field="prices", fix=fix)
    prices: dict[str, GpuPrice] = {}
    for gpu, entry in table.items():
        value = entry.get("usd_per_gpu_hour") if isinstance(entry, dict) else entry
        label = f"prices file {file.name}"
        if isinstance(entry, dict) and entry.get("vendor"):
            label += f": {entry['vendor']}" + (f", {entry['url']}" if entry.get("url") else "") + (
                f", read {entry['read_on']}" if entry.get("read_on") else "")
        price = _price(str(gpu), value, label, f"prices.{gpu}", fix)
        prices[price.gpu] = price
    return prices


def price_for(gpu: str, given: dict[str, GpuPrice] | None = None) -> GpuPrice | None:
    """The price of ``gpu``: the one given (a flag, a file), else the bundled list price, else None (a GPU
    described in a cluster file has no bundled price)."""
    try:
        name = get_gpu(gpu).name
    except InputError:
        name = gpu
    if given and name in given:
        return given[name]
    return bundled_prices().get(name)
