"""Ray actors: rollout workers, the reward pool, the curriculum sampler and the learner."""
