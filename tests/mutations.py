"""Mutation operators for the validators: each breaks one knowledge rule in a builder DAG.

The registry and the shared building blocks are in :mod:`mutation_registry`; the operators live in four modules
by topic, imported here in a fixed order so :data:`MUTATIONS` lists them in the same order on every run. The
builder cases they run on and the kill table are in :mod:`mutation_cases`.
"""

from __future__ import annotations

# The order of these imports is the order of MUTATIONS.
# isort: off
import mutations_phases  # noqa: F401  (structure, phases and decode)
import mutations_parallel  # noqa: F401  (TP, PP, EP, SP, microbatches, hierarchy)
import mutations_structural  # noqa: F401  (layer-to-layer flow, labels the graph contradicts)
import mutations_kv_links  # noqa: F401  (KV ownership, MoE under SP, links, one long prompt)
# isort: on
from mutation_registry import MUTATIONS, Mutation, mutation

__all__ = ["Mutation", "MUTATIONS", "mutation"]
