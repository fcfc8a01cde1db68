"""The DeepSpeed JSON, generated from ``LearnerConfig``: users never write it by hand.

Gradient accumulation is *unmanaged*: the learner runs as many micro-batches as a step's
packing produced, each backward only accumulates locally, and ``engine.step()`` is the one
boundary where gradients are reduced across ranks and the optimizer steps. The nominal
``gradient_accumulation_steps`` below only satisfies DeepSpeed's batch-size arithmetic.
"""

from __future__ import annotations

from typing import Any

from rlcs.config import LearnerConfig


def deepspeed_config(
    cfg: LearnerConfig, device: str = "cpu", total_steps: int | None = None
) -> dict[str, Any]:
    """DeepSpeed config for one learner rank of ``cfg.num_ranks``.

    ZeRO stage, precision, clipping and the LR schedule come from ``cfg``; the optimizer is a
    client ``torch.optim.AdamW`` passed by the learner, so no native op needs compiling on CPU.
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
    if cfg.precision == "bf16":
        out["bf16"] = {"enabled": True}
    scheduler = lr_scheduler(cfg, total_steps or cfg.steps)
    if scheduler is not None:
        out["scheduler"] = scheduler
    return out


def lr_scheduler(cfg: LearnerConfig, total_steps: int) -> dict[str, Any] | None:
    """DeepSpeed's built-in schedulers, so their state is checkpointed with the engine."""
    warmup = cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        if warmup == 0:
            return None
        params = dict(
            warmup_min_lr=0.0, warmup_max_lr=cfg.lr, warmup_num_steps=warmup, warmup_type="linear"
        )
        return {"type": "WarmupLR", "params": params}
    if cfg.lr_schedule == "linear":
        params = dict(
            total_num_steps=max(total_steps, warmup + 1),
            warmup_min_lr=0.0,
            warmup_max_lr=cfg.lr,
            warmup_num_steps=warmup,
            warmup_type="linear",
        )
        return {"type": "WarmupDecayLR", "params": params}
    params = dict(
        total_num_steps=max(total_steps, warmup + 1),
        warmup_min_ratio=0.0,
        warmup_num_steps=warmup,
        cos_min_ratio=0.0,
        warmup_type="linear",
    )
    return {"type": "WarmupCosineLR", "params": params}
