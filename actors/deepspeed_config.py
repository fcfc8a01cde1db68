"""The DeepSpeed JSON, generated from ``LearnerConfig``: users never write it by hand.

Gradient accumulation is *unmanaged*: the learner runs as many micro-batches as a step's
packing produced, each backward only accumulates locally, and ``engine.step()`` is the one
boundary where gradients are reduced across ranks and the optimizer steps. The nominal
``gradient_accumulation_steps`` below only satisfies DeepSpeed's batch-size arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rlcs.config import LearnerConfig


def deepspeed_config(
    cfg: LearnerConfig, device: str = "cpu", total_steps: int | None = None
) -> dict[str, Any]:
    """DeepSpeed config for one learner rank of ``cfg.num_ranks``.

    ZeRO stage, precision and clipping come from ``cfg``. The optimizer (``torch.optim.AdamW``,
    so no native op needs compiling on CPU) and the LR schedule (``lr_factor``) are client
    objects passed by the learner.
    """
    per_step = cfg.micro_batch * cfg.num_ranks
    gas = max(1, cfg.global_batch // per_step)
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    if cfg.zero_stage >= 1:
        # overlap_comm needs a side stream; CPU has none, and unmanaged accumulation refuses it
        # outside stage 2.
        zero.update(
            overlap_comm=device == "cuda" and cfg.zero_stage == 2, contiguous_gradients=True
        )
    if cfg.zero_stage == 3:
        zero.update(
            stage3_gather_16bit_weights_on_model_save=False,
            stage3_param_persistence_threshold=0,
        )
    out: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch,
        "gradient_accumulation_steps": gas,
        "train_batch_size": cfg.micro_batch * gas * cfg.num_ranks,
        "managed_gradient_accumulation": False,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
    }
    out.update(precision_config(cfg))
    return out


def precision_config(cfg: LearnerConfig) -> dict[str, Any]:
    """The config's precision section: bf16 weights (``bf16``), or fp32 weights with bf16
    matmuls under ``torch.autocast`` (``bf16-mixed``). Under autocast, gradients are reduced
    across ranks in fp32 (no module's parameters are named lower-precision safe)."""
    if cfg.precision == "bf16":
        return {"bf16": {"enabled": True}}
    if cfg.precision == "bf16-mixed":
        return {
            "torch_autocast": {
                "enabled": True,
                "dtype": "bfloat16",
                "lower_precision_safe_modules": [],
            }
        }
    return {}


def reference_config(cfg: LearnerConfig) -> dict[str, Any]:
    """DeepSpeed config of the frozen reference model (GRPO's KL term): no optimizer, the
    policy's precision, and under ZeRO-3 its parameters partitioned over the ranks like the
    policy's (gathered layer by layer in its forward pass) rather than a whole copy per rank."""
    out: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch,
        "zero_optimization": {"stage": 3 if cfg.zero_stage == 3 else 0},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if cfg.zero_stage == 3:
        out["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    out.update(precision_config(cfg))
    return out


def lr_factor(cfg: LearnerConfig, total_steps: int) -> Callable[[int], float]:
    """Multiplier of ``cfg.lr`` for optimizer step ``k`` (0-based), for ``LambdaLR``.

    Linear warmup from ``lr / (warmup + 1)`` (so no step is wasted at 0), then constant, linear
    decay to 0, or cosine decay to 0 at ``total_steps``. A client ``LambdaLR`` rather than
    DeepSpeed's schedulers: theirs start at 0 and shift the cosine by one step; DeepSpeed still
    checkpoints the client scheduler's state with the engine.
    """
    warmup = cfg.warmup_steps
    horizon = max(total_steps - warmup, 1)
    kind = cfg.lr_schedule

    def factor(k: int) -> float:
        if k < warmup:
            return (k + 1) / (warmup + 1)
        done = min(k - warmup, horizon) / horizon
        if kind == "linear":
            return 1.0 - done
        if kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * done))
        return 1.0

    return factor
