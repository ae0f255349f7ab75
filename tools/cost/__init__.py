"""The cost model: per-node pricing (measured kernel tables where they exist, a per-GPU calibrated roofline
otherwise), list scheduling on per-GPU streams, memory, the cost report of a DAG (:mod:`.estimate`)."""
