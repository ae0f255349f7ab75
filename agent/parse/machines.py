"""Machines named by product rather than by GPU: cloud instance types ("p5.48xlarge", "a3-highgpu-8g",
"ND H100 v5") and NVIDIA systems ("DGX H100", "HGX B200", "GB200 NVL72"); GPU variants ("A100 40GB", "H100 PCIe")
mapped to their catalog entries; and GPUs the catalog has no specs for ("L4", "V100", "RTX 4090"), named in a note.

A machine is one node of a known GPU and size; a count before it ("2 DGX H100", "4x p5.48xlarge") is the
node count.
"""

from __future__ import annotations

import re

from shardplan.agent.parse.text import _COUNT, _START, Findings, Scan, _count
from shardplan.text import counted

__all__ = ["read_machines", "read_uncatalogued_gpus", "gpu_variant"]

_INSTANCES: dict[str, tuple[str, int]] = {
    r"p5(?:\.48x(?:large|l))?": ("H100", 8),
    r"p5en(?:\.48x(?:large|l))?": ("H200", 8),
    r"p5e(?:\.48x(?:large|l))?": ("H200", 8),
    r"g6e\.(?:xlarge|2xlarge|4xlarge|8xlarge|16xlarge)": ("L40S", 1),
    r"g6e\.(?:12xlarge|24xlarge)": ("L40S", 4),
    r"g6e\.48xlarge": ("L40S", 8),
    r"p4d\.24xlarge": ("A100-40GB", 8),
    r"p4de\.24xlarge": ("A100", 8),
    r"p6-b200\.48xlarge": ("B200", 8),
    r"a3-(?:highgpu|megagpu|edgegpu)-8g": ("H100", 8),
    r"a3-ultragpu-8g": ("H200", 8),
    r"a2-ultragpu-8g": ("A100", 8),
    r"a2-highgpu-8g": ("A100-40GB", 8),
    r"a4-highgpu-8g": ("B200", 8),
    r"(?:standard[\s_-]*)?nd[\s_-]*(?:96is[ar][\s_-]*)?h100[\s_-]*v5": ("H100", 8),
    r"(?:standard[\s_-]*)?nd[\s_-]*(?:96is[ar][\s_-]*)?h200[\s_-]*v5": ("H200", 8),
    r"(?:standard[\s_-]*)?nd[\s_-]*(?:96amsr[\s_-]*a100|a100)[\s_-]*v4": ("A100", 8),
    r"(?:standard[\s_-]*)?nd[\s_-]*mi300x[\s_-]*v5": ("MI300X", 8),
    r"(?:dgx|hgx)[\s-]*h100": ("H100", 8),
    r"(?:dgx|hgx)[\s-]*h200": ("H200", 8),
    r"(?:dgx|hgx)[\s-]*b200": ("B200", 8),
    r"(?:dgx|hgx)[\s-]*h20": ("H20", 8),
    r"(?:dgx|hgx)[\s-]*a100(?:[\s-]*80\s*gb)?": ("A100", 8),
    r"(?:dgx[\s-]*)?gb200[\s-]*nvl[\s-]*72": ("GB200", 72),
}
_MACHINE = re.compile(
    rf"{_START}(?:(?P<n>{_COUNT})\s*(?:[x×*]\s*)?(?:(?:nodes?|servers?|boxes|instances?|machines?)\s+(?:of\s+)?)?)?"
    r"(?P<what>" + "|".join(f"(?:{p})" for p in sorted(_INSTANCES, key=len, reverse=True)) + r")"
    r"(?:\s*(?:nodes?|servers?|systems?|boxes|instances?|machines?|racks?))?(?!\w|\.\w)"
)


def read_machines(scan: Scan, found: Findings) -> None:
    """Cloud instances and NVIDIA systems: each is a node of a known GPU and size."""
    for match in scan.take(_MACHINE):
        what = match.group("what")
        gpu, per = next(v for p, v in _INSTANCES.items() if re.fullmatch(p, what))
        nodes = _count(match.group("n")) if match.group("n") else 1
        if nodes < 1:
            continue
        for name, value in (("gpu", gpu), ("nodes", nodes), ("gpus_per_node", per)):
            found.add(name, value, match.group())
        found.notes.append(f"Read '{match.group().strip()}' as {counted(nodes, 'node')} of {per} {gpu}.")


_UNCATALOGUED = re.compile(
    rf"{_START}(?:(?P<n>{_COUNT})\s*[x×]?\s*)?(?:nvidia\s+|amd\s+|intel\s+|google\s+)?(?P<name>"
    r"l4|l40(?!s)|t4|a10g?|a16|a30|a40|v100|p100|p40|h800|a800|b100|b300|gb300|"
    r"rtx[\s-]*(?:pro[\s-]*)?(?:a?\d{4}(?:[\s-]*ada)?|a\d{4})|"
    r"mi210|mi250x?|mi300a|mi325x|mi355x|gaudi[\s-]*[123]|tpu[\s-]*v\d+[a-z]*)"
    r"(?:\s*(?:gpus?|cards?|accelerators?))?s?(?!\w|\.\w)"
)
"""Accelerators people deploy on that the catalog has no specs for: a plan for one needs a cluster file that gives
them, so the reader names it instead of leaving its count unexplained ("'1' was not used")."""


def read_uncatalogued_gpus(scan: Scan, found: Findings, catalog: frozenset[str]) -> None:
    """GPUs named that ``catalog`` lacks: each gets a note naming the catalog and the way to describe it; their
    counts are taken with them, since a count of GPUs whose specs are unknown plans nothing."""
    for match in scan.take(_UNCATALOGUED):
        name = re.sub(r"[\s-]+", " ", match.group("name")).upper()
        if name in catalog:
            continue
        listed = ", ".join(sorted(catalog))
        found.notes.append(f"'{match.group().strip()}': the {name} is not in shardplan's GPU catalog ({listed}); "
                           "describe it in a cluster file (--cluster FILE) to plan for it.")


_VARIANTS = (
    (r"a100", r"40\s*gb|40g\b", "A100-40GB"),
    (r"h100", r"pcie", "H100-PCIe"),
)


def gpu_variant(base: str, text: str, catalog: set[str]) -> str:
    """The catalog entry a GPU mention means once its variant words are read: "A100 40GB" → A100-40GB,
    "H100 PCIe" → H100-PCIe; ``base`` when no variant entry applies."""
    for name, words, entry in _VARIANTS:
        if base.lower() == name and entry in catalog and re.search(words, text):
            return entry
    return base
