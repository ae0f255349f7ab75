"""The DAGs the benchmarks time: one declaration, shared by the build and validation benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

from shardplan.contracts.dag import DAG
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model

__all__ = ["Case", "LLAMA_8B", "LLAMA_405B", "DEEPSEEK_64", "LLAMA_405B_64", "build"]


@dataclass(frozen=True)
class Case:
    """One model, GPU count, strategy and workload, on H100s."""

    label: str
    model: str
    gpus: int
    strategy: str
    workload: Workload

    def parts(self) -> tuple:  # type: ignore[type-arg]
        """Model, cluster and strategy, loaded once so that only the timed step is timed."""
        return load_model(self.model), make_cluster("H100", self.gpus), parse_strategy(self.strategy)


def build(case: Case) -> DAG:
    """The case's DAG."""
    model, cluster, strategy = case.parts()
    return build_dag(model, cluster, strategy, case.workload)


LLAMA_8B = Case("Llama-3.1-8B TP2 PP2", "meta-llama/Llama-3.1-8B", 4, "tp=2,pp=2", Workload(isl=2048, osl=256, batch=8))
LLAMA_405B = Case(
    "Llama-3.1-405B TP8 PP2", "meta-llama/Llama-3.1-405B", 16, "tp=8,pp=2", Workload(isl=2048, osl=256, batch=8)
)
DEEPSEEK_64 = Case(
    "DeepSeek-V3 SP8 TP8 EP64 mb2 / ADP8 TP8 EP64",
    "deepseek-ai/DeepSeek-V3",
    64,
    "prefill:sp=8,tp=8,ep=64,mb=2;decode:adp=8,tp=8,ep=64",
    Workload(isl=4096, osl=512, batch=64),
)
LLAMA_405B_64 = Case(
    "Llama-3.1-405B SP4 TP8 PP2 mb8 / ADP4 TP8 PP2 mb8",
    "meta-llama/Llama-3.1-405B",
    64,
    "prefill:sp=4,tp=8,pp=2,mb=8;decode:adp=4,tp=8,pp=2,mb=8",
    Workload(isl=4096, osl=256, batch=256),
)
