"""shardplan: parallel strategy DAGs for LLM inference."""

__version__ = "0.2.0"
