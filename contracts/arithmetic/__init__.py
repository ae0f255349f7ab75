"""Plain arithmetic over the contracts: a model's sizes (parameters, KV bytes, FLOPs) and whether a strategy can be
built for it (:mod:`.feasibility`), shared by the builder, the validators, the cost model and the search."""
