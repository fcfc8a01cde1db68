raise ImportError("ray is deliberately unavailable: the reward server must not need it")
