raise ImportError("vllm is deliberately unavailable: the reward server must not need it")
