raise ImportError("torch is deliberately unavailable: the reward server must not need it")
