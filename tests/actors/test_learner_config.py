"""The DeepSpeed JSON comes from LearnerConfig; nobody writes it by hand."""

from __future__ import annotations

import pytest

from actors.deepspeed_config import deepspeed_config
from rlcs.config import LearnerConfig


def test_defaults_give_zero2_fp32_unmanaged_accumulation():
    ds = deepspeed_config(LearnerConfig())
    assert ds["zero_optimization"]["stage"] == 2
    assert ds["zero_optimization"]["overlap_comm"] is False
    assert ds["managed_gradient_accumulation"] is False
    assert ds["gradient_clipping"] == 1.0
    assert "bf16" not in ds and "scheduler" not in ds
    assert (
        ds["train_batch_size"]
        == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"]
    )


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stage_precision_and_batch_arithmetic(stage):
    cfg = LearnerConfig(
        zero_stage=stage, precision="bf16", num_ranks=4, global_batch=64, micro_batch=2
    )
    ds = deepspeed_config(cfg, device="cuda")
    assert ds["zero_optimization"]["stage"] == stage
    assert ds["bf16"] == {"enabled": True}
    assert ds["gradient_accumulation_steps"] == 8
    assert ds["train_batch_size"] == 64
    assert ds["zero_optimization"].get("overlap_comm", False) is (stage == 2)


@pytest.mark.parametrize(
    ("schedule", "warmup", "kind"),
    [("constant", 10, "WarmupLR"), ("linear", 0, "WarmupDecayLR"), ("cosine", 5, "WarmupCosineLR")],
)
def test_lr_schedules(schedule, warmup, kind):
    cfg = LearnerConfig(lr=3e-4, lr_schedule=schedule, warmup_steps=warmup, steps=100)
    sched = deepspeed_config(cfg)["scheduler"]
    assert sched["type"] == kind
    assert sched["params"]["warmup_num_steps"] == warmup
    if kind != "WarmupLR":
        assert sched["params"]["total_num_steps"] == 100
