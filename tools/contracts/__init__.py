"""Pydantic contracts of shardplan: light to import, no I/O."""

from .common import DTYPE_BYTES, DType, Objective, Phase
from .constraints import Constraints, DegreeBound, parse_constraint, parse_constraints
from .dag import (
    COMM_KINDS,
    COMPUTE_KINDS,
    DAG,
    STATE_KINDS,
    CommNode,
    ComputeNode,
    DAGMeta,
    Edge,
    Node,
    StateNode,
)
from .hardware import GPU, Cluster
from .model import MLASpec, ModelSpec, MoESpec
from .plan import Alternative, Deployment, FitHint, FrontierPoint, NearTie, Plan, PlanRequest, WorkerPool
from .reports import CostReport, MemoryReport, PathStep, PhaseCost, PricingReport, ValidationReport, Violation
from .strategy import PhaseStrategy, Strategy, parse_strategy
from .workload import Workload

__all__ = [
    "DTYPE_BYTES",
    "DType",
    "Objective",
    "Phase",
    "Constraints",
    "DegreeBound",
    "parse_constraint",
    "parse_constraints",
    "COMM_KINDS",
    "COMPUTE_KINDS",
    "STATE_KINDS",
    "DAG",
    "DAGMeta",
    "CommNode",
    "ComputeNode",
    "Edge",
    "Node",
    "StateNode",
    "GPU",
    "Cluster",
    "MLASpec",
    "ModelSpec",
    "MoESpec",
    "Alternative",
    "Deployment",
    "FitHint",
    "FrontierPoint",
    "NearTie",
    "WorkerPool",
    "Plan",
    "PlanRequest",
    "CostReport",
    "PricingReport",
    "MemoryReport",
    "PathStep",
    "PhaseCost",
    "ValidationReport",
    "Violation",
    "PhaseStrategy",
    "Strategy",
    "parse_strategy",
    "Workload",
]
