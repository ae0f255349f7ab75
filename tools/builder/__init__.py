"""Strategy to DAG."""

from .build import build_dag, decode_context
from .ranks import RankLayout

__all__ = ["build_dag", "decode_context", "RankLayout"]
