"""Requests drawn from a workload's traffic: lengths from distributions or a trace, arrival times from a process
(:mod:`.stream`), for the engine simulator to replay."""
