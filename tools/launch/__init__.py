"""Launch commands for a plan: the vLLM, SGLang or TensorRT-LLM command lines that serve its deployment
(:mod:`.commands`), one module per engine, the servers and their placement, the shell text."""
