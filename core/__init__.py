"""shardplan: parallel strategy DAGs for LLM inference."""

__version__ = "0.1.0"
