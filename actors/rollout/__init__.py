"""Rollout: ``RolloutWorker`` actors (vLLM or HF engine) and ``RolloutGroup`` over several."""

from actors.rollout.group import RolloutError, RolloutGroup
from actors.rollout.worker import RolloutWorker, RolloutWorkerImpl

__all__ = ["RolloutError", "RolloutGroup", "RolloutWorker", "RolloutWorkerImpl"]
