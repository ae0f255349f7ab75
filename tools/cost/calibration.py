"""The cost model's efficiency parameters (``tools/data/calibration.yaml``), loaded once."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict

__all__ = ["Calibration", "ProfileCal", "calibration"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GemmCal(_Section):
    max_efficiency: dict[str, float]
    m_half: float
    k_half: float = 0.0


class MemoryCal(_Section):
    efficiency: float


class AttentionCal(_Section):
    max_efficiency: float
    l_half: float
    decode_memory_efficiency: float
    # Share of a format's peak the decode attention kernel reaches with its query tiles full, per format, where
    # public kernel rows of the GPU measure it (FlashMLA on the H20); None, or a format not given: the GEMM's
    # row-fill curve at the kernel's query rows.
    decode_max_efficiency: dict[str, float] | None = None


class CollectiveCal(_Section):
    latency_factor: dict[str, float]
    bandwidth_efficiency: dict[str, float]
    # The engines' own all-reduce inside a node (one-shot / two-shot over peer memory) for messages up to
    # engine_allreduce_max_bytes: its per-step latency in microseconds; 0 prices every all-reduce as NCCL.
    engine_allreduce_us: float = 0.0
    engine_allreduce_max_bytes: float = 8388608.0


class MoECal(_Section):
    # Expert-load imbalance: the busiest of ep expert ranks carries 1 + imbalance_per_doubling * log2(ep)
    # times the mean load, and routed-expert time is multiplied by that.
    imbalance_per_doubling: float = 0.0
    # What a fused MoE kernel that sees every token of the layer (expert parallelism without a token dispatch:
    # vLLM's and SGLang's Triton path under tensor-parallel attention) costs one rank beyond its own experts' GEMMs,
    # as a factor 1 + ep_overhead_per_doubling * log2(ep) at even load: its sort, activation and sum run over every
    # token's routed copies, not the rank's share.
    ep_overhead_per_doubling: float = 0.0
    # Rows per expert at which grouped expert GEMMs reach half their peak efficiency; None: the GEMM's m_half.
    m_half: float | None = None


class LaunchCal(_Section):
    prefill_us: float
    decode_us: float
    extra_kernels: dict[str, int]


class WorkspaceCal(_Section):
    fixed_gb: float
    capacity_share: float


class HeldOutErrorCal(_Section):
    rows: int
    tpot_median_pct: float
    ttft_median_pct: float
    throughput_median_pct: float


class GridErrorCal(_Section):
    configs: int
    ttft_median_pct: float
    tpot_median_pct: float
    ttft_p90_pct: float
    tpot_p90_pct: float
    ttft_spearman: float
    tpot_spearman: float


class ProfileCal(_Section):
    """Roofline efficiencies of one GPU, fitted to its measured kernel tables, or (a GPU the tables do not cover) to
    public kernel measurements of it, ``source`` naming them and ``fitted`` the categories they set."""

    gpus: list[str]
    source: str | None = None
    fitted: list[str] | None = None
    gemm: GemmCal
    memory: MemoryCal
    attention: AttentionCal
    collectives: CollectiveCal
    moe: MoECal = MoECal()
    residuals: dict[str, float]


class Calibration(_Section):
    """Every tunable figure of the cost model, with the data it was fitted to named in the YAML."""

    gemm: GemmCal
    memory: MemoryCal
    attention: AttentionCal
    collectives: CollectiveCal
    moe: MoECal = MoECal()
    launch: LaunchCal
    workspace: WorkspaceCal
    held_out_error: dict[str, HeldOutErrorCal]
    grid_error: dict[str, GridErrorCal]
    profiles: dict[str, ProfileCal]


@lru_cache(maxsize=1)
def calibration() -> Calibration:
    """The bundled calibration."""
    import yaml

    text = (resources.files("shardplan.tools") / "data" / "calibration.yaml").read_text()
    return Calibration.model_validate(yaml.safe_load(text))
