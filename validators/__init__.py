"""Validators: every rule of the knowledge base that a machine can check, run over a parallel strategy DAG.

``validate(dag)`` runs the registry (:data:`RULES`, one check per knowledge rule ID) and returns a
:class:`~shardplan.tools.contracts.ValidationReport`; ``validate_json(text_or_obj)`` first checks
outside JSON against the DAG JSON Schema. Rules with nothing to check in a graph are listed in
:data:`INFORMATIONAL` with the reason.
"""

from . import (  # noqa: F401  (importing a rule module registers its checks)
    rules_decode,
    rules_ep,
    rules_flow,
    rules_hierarchy,
    rules_kv,
    rules_microbatch,
    rules_overlap,
    rules_phases,
    rules_pp,
    rules_sp,
    rules_structure,
    rules_tp,
)
from .index import DagIndex
from .registry import INFORMATIONAL, RULES, Finding, Rule, validate
from .schema_check import validate_json

__all__ = ["validate", "validate_json", "RULES", "INFORMATIONAL", "Rule", "Finding", "DagIndex"]
