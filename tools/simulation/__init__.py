"""The engine simulator: a deployment replayed request by request, step by step, as the engine schedules it.

Per replica a vLLM-v1-style scheduler (:mod:`.engine`) over KV-cache blocks the memory model leaves
(:mod:`.capacity`); split prefill workers with one queue (:mod:`.pools`); a router across replicas
(:mod:`.router`); the event loop that feeds them (:mod:`.loop`); the run of a deployment (:mod:`.run`), its
summary (:mod:`.results`) and its steps as a Perfetto trace (:mod:`.trace`). Steps are priced by the serving
model's :class:`~shardplan.tools.serving.steps.StepPricer`, so the simulator and the analytic steady state
differ only in the dynamics.
"""
