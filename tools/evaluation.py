"""One strategy's full evaluation (DAG, cost, validation), memoised.

Planning looks at the winning strategy three times: the search re-scores it with the full schedule,
the agent's propose tool checks it, and the final plan carries it. Building and scheduling a DAG of
tens of thousands of nodes takes a large share of a second, so it is done once per
(model, cluster, strategy, workload). Callers treat the returned objects as read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from .builder import build_dag
from .contracts.dag import DAG
from .contracts.hardware import Cluster
from .contracts.model import ModelSpec
from .contracts.reports import CostReport, ValidationReport
from .contracts.strategy import Strategy
from .contracts.workload import Workload
from .cost.estimate import estimate_cost

__all__ = ["Evaluation", "evaluate"]


@dataclass
class Evaluation:
    """A strategy's DAG and cost report; the validation report is computed on first use."""

    dag: DAG
    cost: CostReport
    _validation: ValidationReport | None = field(default=None, repr=False)

    @property
    def validation(self) -> ValidationReport:
        if self._validation is None:
            from ..validators import validate

            self._validation = validate(self.dag)
        return self._validation


@lru_cache(maxsize=8)
def _evaluate(model_json: str, cluster_json: str, strategy_json: str, workload_json: str) -> Evaluation:
    model = ModelSpec.model_validate_json(model_json)
    cluster = Cluster.model_validate_json(cluster_json)
    dag = build_dag(
        model, cluster, Strategy.model_validate_json(strategy_json), Workload.model_validate_json(workload_json)
    )
    return Evaluation(dag=dag, cost=estimate_cost(dag, cluster))


def evaluate(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> Evaluation:
    """Build ``strategy``'s DAG and price it (memoised on the four inputs).

    Raises:
        StrategyError: the strategy cannot be built.
    """
    return _evaluate(
        model.model_dump_json(), cluster.model_dump_json(), strategy.model_dump_json(), workload.model_dump_json()
    )
