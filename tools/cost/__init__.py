"""The cost model: per-operation roofline, collective latency-bandwidth, list scheduling, memory."""

from .estimate import estimate_cost, target_misses, throughput
from .memory import memory_reports
from .schedule import Schedule, schedule_dag

__all__ = ["estimate_cost", "target_misses", "throughput", "memory_reports", "Schedule", "schedule_dag"]
