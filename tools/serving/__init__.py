"""The serving model: what a deployment of replicas or prefill/decode pools delivers in steady state.

Between the cost of one DAG and the plan: engine steps priced from the DAG cost model as a function of
decode tokens, prefill tokens and context (:mod:`.steps`); the steady state of continuous or static
batching at a concurrency (:mod:`.steady`); replicas of one layout (:mod:`.aggregated`) and xPyD pools
(:mod:`.disaggregated`); how workers pack into nodes (:mod:`.placement`).
"""

from .aggregated import aggregated_options, replica_capacity
from .disaggregated import (
    DecodeWorker,
    PrefillWorker,
    decode_worker,
    decode_workers,
    kv_transfer_s,
    pool_frontier,
    pool_options,
    prefill_worker,
)
from .options import DeploymentOption, concurrency_grid
from .placement import max_workers, occupied_cluster, packs, place_workers, pools_pack, replica_strategy, worker_cluster
from .steady import ServingPoint, continuous_point, serving_point, static_point
from .steps import StepPricer, forget_samples

__all__ = [
    "DecodeWorker",
    "DeploymentOption",
    "PrefillWorker",
    "ServingPoint",
    "StepPricer",
    "aggregated_options",
    "concurrency_grid",
    "continuous_point",
    "forget_samples",
    "decode_worker",
    "decode_workers",
    "kv_transfer_s",
    "max_workers",
    "occupied_cluster",
    "replica_strategy",
    "packs",
    "place_workers",
    "pools_pack",
    "pool_frontier",
    "pool_options",
    "prefill_worker",
    "replica_capacity",
    "serving_point",
    "static_point",
    "worker_cluster",
]
