"""The rule checks, one module per family (decode, tensor, pipeline, expert, sequence parallelism, KV cache, data flow,
phases, pools of two GPU types, hierarchy, microbatches, overlap, structure, speculative decoding); importing a module
registers its checks."""
