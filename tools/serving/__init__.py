"""The serving model: what a deployment of replicas or prefill/decode pools delivers in steady state.

Between the cost of one DAG and the plan: engine steps priced from the DAG cost model as a function of
decode tokens, prefill tokens and context (:mod:`.steps`); the steady state of continuous or static
batching at a concurrency (:mod:`.steady`); replicas of one layout (:mod:`.aggregated`) and xPyD pools
(:mod:`.disaggregated`); how workers pack into nodes (:mod:`.placement`).
"""
