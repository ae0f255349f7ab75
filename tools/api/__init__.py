"""The capability layer: what the agent, LangChain tools and the MCP server can do, as plain functions.

Each capability takes keyword arguments checked by a pydantic argument model (``extra="forbid"``, size
and range constraints, a description per field) before its body runs, and returns a compact pydantic
result an LLM can read: headline figures and the first violations, never a whole DAG unless asked.
Malformed input raises :class:`~shardplan.errors.InputError` naming the field and the fix; an
infeasible request is a result (``feasible=False``), not an exception. :data:`CAPABILITIES` lists
them all for the wrappers (``langchain_tools``, the MCP server).

>>> check = propose_strategy(model="llama-3.1-8b", gpu="H100", gpus=2, isl=512, osl=64, batch=2, strategy="tp=2")
>>> check.valid, check.meets_targets
(True, True)
"""

from __future__ import annotations

from .arguments import RequestArgs
from .capabilities import (
    build_dag,
    describe_model,
    estimate_cost,
    get_rule,
    list_gpus,
    list_models,
    plan,
    propose_strategy,
    search_knowledge,
    search_strategies,
    submit_dag,
    validate_dag,
)
from .compact import PlanSummary, ValidationBrief, cost_summary, plan_summary
from .guards import MAX_DAG_CHARS, MAX_DAG_NODES
from .registry import CAPABILITIES, Capability, dump, error_dict, field_error, parse_args
from .results import BuildSummary, CostSummary, DagCheck, SearchDetail, SearchSummary, StrategyCheck
from .shared import alternatives_for, evaluate_strategy, search_request

__all__ = [
    "CAPABILITIES",
    "Capability",
    "MAX_DAG_CHARS",
    "MAX_DAG_NODES",
    "RequestArgs",
    "StrategyCheck",
    "SearchSummary",
    "SearchDetail",
    "PlanSummary",
    "ValidationBrief",
    "plan_summary",
    "cost_summary",
    "DagCheck",
    "CostSummary",
    "BuildSummary",
    "search_knowledge",
    "get_rule",
    "list_models",
    "list_gpus",
    "describe_model",
    "search_strategies",
    "propose_strategy",
    "submit_dag",
    "estimate_cost",
    "validate_dag",
    "build_dag",
    "plan",
    "evaluate_strategy",
    "search_request",
    "alternatives_for",
    "parse_args",
    "error_dict",
    "field_error",
    "dump",
]
