"""The global gradient norm where DeepSpeed keeps none: ZeRO-0 with fp32 weights.

ZeRO-1/2/3 and DeepSpeed's bf16 optimizer report the L2 norm of the step's gradients before
clipping (``engine.get_global_grad_norm()``). Under ZeRO-0 with fp32 weights (``precision``
fp32 or bf16-mixed) DeepSpeed steps the client optimizer itself, and the engine reports None:
its ``clip_grad_norm_`` computes the norm and drops it. There the learner clips instead of
DeepSpeed (``gradient_clipping`` 0), in a hook that runs just before the optimizer steps. That
is inside ``engine.step()``, after DeepSpeed has averaged the accumulated gradients over the
data-parallel ranks: every rank holds the same gradients, so each computes the same norm and
clips alike without another collective, as DeepSpeed's clipping would.
"""

from __future__ import annotations

from typing import Any

import torch

from rlcs.config import LearnerConfig


def clips_outside_deepspeed(cfg: LearnerConfig) -> bool:
    """Whether DeepSpeed steps the client optimizer unwrapped, keeping no gradient norm."""
    return cfg.zero_stage == 0 and cfg.precision != "bf16"


class GradNormClipper:
    """Clips an optimizer's gradients to ``max_norm`` (0: not at all) as it steps, and keeps
    their global norm before clipping in ``norm``."""

    def __init__(self, optimizer: torch.optim.Optimizer, max_norm: float):
        self.max_norm = max_norm
        self.norm: float | None = None
        optimizer.register_step_pre_hook(self._clip)

    def _clip(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        # returns the norm before clipping; the coefficient is DeepSpeed's clip_grad_norm_'s,
        # max_norm / (norm + 1e-6), at most 1 (an infinite max_norm leaves the gradients alone)
        max_norm = self.max_norm if self.max_norm > 0 else float("inf")
        self.norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
