"""The knowledge base: documents on inference parallelism, their rules with stable IDs, and retrieval.

Rules are parsed from ``docs/*.md`` (``load_rules``, ``get_rule``); ``search`` and
``sections_for_strategy`` return ``## `` sections of those documents. Importing this package does not
import the BM25 library; the index is built on the first search.
"""

from shardplan.knowledge.retriever import Section, search, sections_for_strategy
from shardplan.knowledge.rules import KnowledgeRule, get_rule, load_rules

__all__ = ["KnowledgeRule", "Section", "get_rule", "load_rules", "search", "sections_for_strategy"]
