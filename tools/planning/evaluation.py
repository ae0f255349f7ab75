"""One strategy's full evaluation (DAG, cost, validation), memoised.

Planning looks at the winning strategy three times: the search re-scores it with the full schedule,
the agent's propose tool checks it, and the final plan carries it. Building and scheduling a DAG of
tens of thousands of nodes takes a large share of a second, so it is done once per
(model, cluster, strategy, workload). Callers treat the returned objects as read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from shardplan.contracts.dag import DAG
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.reports import CostReport, ValidationReport
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.workload import Workload
from shardplan.text import counted
from shardplan.tools.builder.build import build_dag
from shardplan.tools.cost.estimate import estimate_cost
from shardplan.tools.serving.placement import occupied_cluster
from shardplan.validators.validate import validate

__all__ = ["Evaluation", "evaluate", "price_on_budget"]


@dataclass
class Evaluation:
    """A strategy's DAG and cost report; the validation report is computed on first use."""

    dag: DAG
    cost: CostReport
    _validation: ValidationReport | None = field(default=None, repr=False)

    @property
    def validation(self) -> ValidationReport:
        if self._validation is None:
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


def price_on_budget(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> CostReport:
    """The cost report of one batch of ``strategy`` on the GPUs of ``cluster`` it uses: a GPU count is a budget,
    so ``tp=8`` on 16 GPUs is priced on the 8 it occupies, as ``plan`` does, and the report says so.

    Raises:
        StrategyError: the strategy cannot be built (more GPUs than the cluster, degrees that do not divide).
    """

    used = occupied_cluster(cluster, strategy)
    report = estimate_cost(build_dag(model, used, strategy, workload), used)
    if used.world_size >= cluster.world_size:
        return report
    idle = (
        f"priced on the {used.world_size} of {counted(cluster.world_size, 'GPU')} {strategy.to_spec()} uses; the "
        f"others stay "
        "idle (a GPU count is a budget)"
    )
    return report.model_copy(update={"notes": [*report.notes, idle]})
