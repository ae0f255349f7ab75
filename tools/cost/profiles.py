"""Which roofline efficiency profile prices a GPU: its own, fitted to its measured tables, or the closest one's.

``benchmarks/calibration/fit_measured.py`` fits one profile per measured GPU and writes it to
``tools/data/calibration.yaml``, so the roofline needs no measured database at run time. A GPU
without a profile of its own (MI300X, a custom YAML GPU) inherits the profile of the profiled GPU
closest to it in peak BF16 FLOP/s and HBM bandwidth (on a log scale); without any profile the
public-kernel fit at the top of the YAML prices everything.
"""

from __future__ import annotations

import math
from functools import lru_cache

from shardplan.contracts.hardware import GPU
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.cost.calibration import Calibration, ProfileCal, calibration

__all__ = ["gpu_profile", "inherited_profile", "profile_for"]

PUBLIC_KERNELS = "public-kernel"


@lru_cache(maxsize=64)
def _profile_name(
    gpu_name: str, bf16_flops: float, bandwidth_gb_per_s: float, own: bool = True
) -> tuple[str, str | None]:
    profiles = calibration().profiles
    for name, profile in profiles.items():
        if own and gpu_name in profile.gpus:
            return name, None
    catalog = gpu_catalog()
    profiled = [catalog[g] for p in profiles.values() for g in p.gpus if g in catalog and g != gpu_name]
    if not profiled:
        return PUBLIC_KERNELS, None

    def distance(other: GPU) -> float:
        compute = math.log(bf16_flops / other.peak_flops("bf16"))
        return math.hypot(compute, math.log(bandwidth_gb_per_s / other.memory_bandwidth_gb_per_s))

    closest = min(profiled, key=distance)
    name = next(n for n, p in profiles.items() if closest.name in p.gpus)
    return name, f"inherited by {gpu_name}, the closest profiled GPU by peak FLOP/s and bandwidth"


def inherited_profile(gpu: GPU) -> str:
    """The profile ``gpu`` would inherit without one of its own: what a profile fitted to a few public kernel rows of
    the GPU starts from (``benchmarks/calibration/fit_public_profile.py``) and keeps where its rows say nothing."""
    return _profile_name(gpu.name, gpu.peak_flops("bf16"), gpu.memory_bandwidth_gb_per_s, own=False)[0]


def gpu_profile(gpu: GPU) -> tuple[str, str | None]:
    """The profile name that prices ``gpu`` and, when inherited, why.

    >>> from shardplan.tools.catalogs.gpus import gpu_catalog
    >>> gpu_profile(gpu_catalog()["H100"])[1] is None
    True
    """
    return _profile_name(gpu.name, gpu.peak_flops("bf16"), gpu.memory_bandwidth_gb_per_s)


# The scheduler asks once per node: remember the answer per GPU object (kept alive with it, so an id is
# never reused for another GPU while its entry exists).
_ANSWERED: dict[int, tuple[GPU, Calibration | ProfileCal]] = {}


def profile_for(gpu: GPU) -> Calibration | ProfileCal:
    """The efficiency figures (gemm, memory, attention, collectives, moe) that price ``gpu``."""
    known = _ANSWERED.get(id(gpu))
    if known is not None and known[0] is gpu:
        return known[1]
    name, _ = gpu_profile(gpu)
    profile = calibration().profiles.get(name) or calibration()
    if len(_ANSWERED) < 256:
        _ANSWERED[id(gpu)] = (gpu, profile)
    return profile
