"""rlcs core: curriculum math, GRPO losses, data schema, configs, prompts, tiny models.

Plain Python with no Ray import, so that every piece is fast to unit-test.
"""

__version__ = "0.1.0"
