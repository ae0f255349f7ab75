"""The cost model: per-node pricing (measured kernel tables where they exist, a per-GPU calibrated roofline
otherwise), list scheduling on per-GPU streams, memory."""

from .estimate import estimate_cost, target_misses, throughput
from .memory import memory_reports
from .schedule import Schedule, schedule_dag

__all__ = ["estimate_cost", "target_misses", "throughput", "memory_reports", "Schedule", "schedule_dag"]
