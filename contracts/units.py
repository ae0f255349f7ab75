"""Bandwidth figures in hardware files: one unambiguous unit (GB/s), and the unit strings people write.

A NIC is sold as "400 Gb/s" (gigabits) while HBM and NVLink are quoted in GB/s (gigabytes), so a bare
``400`` under a name like ``*_gbps`` is easy to misread by a factor of 8. Bandwidth fields are therefore
named ``*_gb_per_s`` and hold gigabytes per second; a string that carries its unit is converted, the case
of the ``b`` deciding between bits (``b``) and bytes (``B``), as in SI usage.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

from shardplan.errors import DeprecatedFieldWarning

__all__ = ["GBPerSecond", "parse_gb_per_s", "BANDWIDTH_FORMS", "RENAMED_BANDWIDTH_FIELDS", "rename_old_fields"]

BANDWIDTH_FORMS = (
    "a number in GB/s (50), gigabytes per second (50GB/s, 50 GBps) or gigabits per second (400Gbps, 400 Gb/s)"
)
"""The accepted forms, as error messages name them."""

RENAMED_BANDWIDTH_FIELDS: dict[str, str] = {
    "memory_bandwidth_gbps": "memory_bandwidth_gb_per_s",
    "intra_node_bandwidth_gbps": "intra_node_bandwidth_gb_per_s",
    "inter_node_bandwidth_gbps": "inter_node_bandwidth_gb_per_s",
}
"""Old field names (read as GB/s, as they always were) and the names that replaced them."""

_PREFIX_TO_GIGA = {"m": 1e-3, "g": 1.0, "t": 1e3}
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_UNIT = r"[MmGgTt](?:b(?:it)?|B(?:yte)?)(?:ps|/s)"
_BANDWIDTH = re.compile(rf"^\s*({_NUMBER})\s*({_UNIT})\s*$")
# The same forms for JSON Schema readers (ECMA-262 regex: no named groups): a number, optionally with a unit.
_SCHEMA_PATTERN = rf"^\s*{_NUMBER}\s*(?:{_UNIT})?\s*$"


def parse_gb_per_s(value: Any) -> Any:
    """A bandwidth in GB/s from a number (already GB/s) or a string with its unit.

    Numbers, and strings holding only a number, pass through for the field's own checks (positive,
    finite). ``b``/``bit`` means bits, ``B``/``Byte`` bytes; M, G and T prefixes are decimal.

    Raises:
        ValueError: a string that is neither a number nor a bandwidth with one of the accepted units.

    >>> parse_gb_per_s("400Gbps"), parse_gb_per_s("400 Gb/s"), parse_gb_per_s("50GB/s"), parse_gb_per_s(50)
    (50.0, 50.0, 50.0, 50)
    >>> parse_gb_per_s("3.35 TB/s")
    3350.0
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    match = _BANDWIDTH.match(text)
    if match is None:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(f"'{shown}' is not a bandwidth; give {BANDWIDTH_FORMS}")
    number, unit = float(match[1]), match[2]
    scaled = number * _PREFIX_TO_GIGA[unit[0].lower()]
    gigabytes = scaled / 8 if unit[1] == "b" else scaled
    if not math.isfinite(gigabytes):
        raise ValueError(f"'{text}' is not a finite bandwidth")
    return gigabytes


GBPerSecond = Annotated[
    float,
    BeforeValidator(parse_gb_per_s),
    Field(gt=0, allow_inf_nan=False),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {"type": "string", "pattern": _SCHEMA_PATTERN},
            ]
        }
    ),
]
"""A positive bandwidth in GB/s (decimal gigabytes per second), given as a number or a unit string."""


def rename_old_fields(data: Any, owner: str) -> Any:
    """``data`` with the old ``*_gbps`` keys moved to their ``*_gb_per_s`` names, with one warning naming them.

    Raises:
        ValueError: both the old and the new name of one field are given.
    """
    if not isinstance(data, dict) or not any(old in data for old in RENAMED_BANDWIDTH_FIELDS):
        return data
    renamed = dict(data)
    moves = []
    for old, new in RENAMED_BANDWIDTH_FIELDS.items():
        if old not in renamed:
            continue
        if new in renamed:
            raise ValueError(f"{old} and {new} are both given; keep only {new} ({old} is its old name)")
        renamed[new] = renamed.pop(old)
        moves.append(f"{owner}.{old} -> {owner}.{new}")
    warnings.warn(
        f"deprecated field name{'s' if len(moves) > 1 else ''}: rename {', '.join(moves)}; "
        f"{'the values are' if len(moves) > 1 else 'the value is'} read as GB/s (gigabytes per second)",
        DeprecatedFieldWarning,
        stacklevel=2,
    )
    return renamed
