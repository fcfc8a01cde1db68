"""Entry points: the `rlcs` CLI, the training driver, placement groups and job launch."""
