"""In-place edits of ``tools/data/calibration.yaml``: the fitted numbers replace the old ones, and every
comment and the layout are kept, so a refit reads as a diff of numbers.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from shardplan.tools.cost.calibration import Calibration

__all__ = ["CALIBRATION_YAML", "current_value", "edit_yaml", "write_yaml", "profile_entry", "write_profiles"]

CALIBRATION_YAML = Path(str(resources.files("shardplan.tools") / "data" / "calibration.yaml"))

# parameter -> (section, key, key inside a flow mapping or None, format)
_YAML_SLOTS: dict[str, tuple[str, str, str | None, str]] = {
    "gemm.max_efficiency.bf16": ("gemm", "max_efficiency", "bf16", "{:.2f}"),
    "gemm.max_efficiency.fp16": ("gemm", "max_efficiency", "fp16", "{:.2f}"),
    "gemm.max_efficiency.fp8": ("gemm", "max_efficiency", "fp8", "{:.2f}"),
    "gemm.max_efficiency.int8": ("gemm", "max_efficiency", "int8", "{:.2f}"),
    "gemm.m_half": ("gemm", "m_half", None, "{:.1f}"),
    "gemm.k_half": ("gemm", "k_half", None, "{:.1f}"),
    "memory.efficiency": ("memory", "efficiency", None, "{:.2f}"),
    "attention.max_efficiency": ("attention", "max_efficiency", None, "{:.2f}"),
    "attention.l_half": ("attention", "l_half", None, "{:.1f}"),
    "collectives.latency_factor.all_reduce": ("collectives", "latency_factor", "all_reduce", "{:.2f}"),
    "collectives.bandwidth_efficiency.intra_node": ("collectives", "bandwidth_efficiency", "intra_node", "{:.2f}"),
}
_NUMBER = r"[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"


def edit_yaml(text: str, values: dict[str, float]) -> str:
    """``text`` with the numbers of ``values`` replaced in place; every other character kept."""
    done: Counter[str] = Counter()
    lines, section = [], ""
    for line in text.splitlines(keepends=True):
        top = re.match(r"^([A-Za-z_]\w*):", line)
        if top:
            section = top.group(1)
        for name, value in values.items():
            sec, key, sub, fmt = _YAML_SLOTS[name]
            if sec != section or not re.match(rf"^\s+{key}:", line):
                continue
            number = fmt.format(value)  # digits only, safe in a replacement string
            pattern = rf"^(\s+{key}:\s*){_NUMBER}" if sub is None else rf"([{{,]\s*{sub}:\s*){_NUMBER}"
            line, count = re.subn(pattern, rf"\g<1>{number}", line)
            done[name] += count
        lines.append(line)
    missing = [name for name in values if done[name] != 1]
    if missing:
        raise SystemExit(f"could not place {missing} in {CALIBRATION_YAML}; edit it by hand")
    return "".join(lines)


def write_yaml(values: dict[str, float]) -> None:
    text = edit_yaml(CALIBRATION_YAML.read_text(), values)
    check = Calibration.model_validate(yaml.safe_load(text))
    for name, value in values.items():
        sec, key, sub, _ = _YAML_SLOTS[name]
        got = getattr(getattr(check, sec), key)
        got = got[sub] if sub else got
        if not math.isclose(got, value, abs_tol=1e-9):
            raise SystemExit(f"edit check failed for {name}: wrote {got}, wanted {value}")
    CALIBRATION_YAML.write_text(text)


def current_value(cal: Calibration, name: str) -> float:
    sec, key, sub, _ = _YAML_SLOTS[name]
    got = getattr(getattr(cal, sec), key)
    return float(got[sub] if sub else got)


def write_profiles(profiles: dict[str, Any]) -> None:
    """Add ``profiles`` to the ``profiles`` section (the last one of the file), replacing those of the same name and
    keeping every other: the tables' profiles and a public-kernel one are written by different scripts."""
    text = CALIBRATION_YAML.read_text()
    head = text[: text.index("\nprofiles:") + 1]
    merged = {**(yaml.safe_load(text).get("profiles") or {}), **profiles}
    body = yaml.safe_dump({"profiles": merged}, sort_keys=False, default_flow_style=None, width=110)
    Calibration.model_validate(yaml.safe_load(head + body))
    CALIBRATION_YAML.write_text(head + body)


def profile_entry(gpu: str, cal: Calibration, residuals: dict[str, float], **about: Any) -> dict[str, Any]:
    """The YAML entry of ``gpu``'s profile: ``cal``'s roofline sections, its fit residuals, and what ``about`` adds
    (where a public-kernel profile came from, which categories it fitted)."""
    return {"gpus": [gpu], **about, **{section: getattr(cal, section).model_dump(exclude_none=True)
                                       for section in ("gemm", "memory", "attention", "collectives", "moe")},
            "residuals": residuals}
