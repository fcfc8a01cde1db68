"""The DeepSpeed JSON comes from LearnerConfig; nobody writes it by hand."""

from __future__ import annotations

import math

import pytest

from actors.deepspeed_config import deepspeed_config, lr_factor
from rlcs.config import LearnerConfig


def test_defaults_give_zero2_fp32_unmanaged_accumulation():
    ds = deepspeed_config(LearnerConfig())
    assert ds["zero_optimization"]["stage"] == 2
    assert ds["zero_optimization"]["overlap_comm"] is False
    assert ds["managed_gradient_accumulation"] is False
    assert ds["gradient_clipping"] == 1.0
    assert "bf16" not in ds and "scheduler" not in ds and "optimizer" not in ds
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


def test_bf16_mixed_is_torch_autocast_over_fp32_weights():
    from actors.deepspeed_config import reference_config

    cfg = LearnerConfig(precision="bf16-mixed", zero_stage=3)
    for ds in (deepspeed_config(cfg), reference_config(cfg)):
        assert "bf16" not in ds  # the weights stay fp32
        assert ds["torch_autocast"] == {
            "enabled": True,
            "dtype": "bfloat16",
            "lower_precision_safe_modules": [],  # gradients reduced in fp32
        }
    assert "torch_autocast" not in deepspeed_config(LearnerConfig(precision="bf16"))


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("constant", [1 / 3, 2 / 3, 1, 1, 1, 1]),
        ("linear", [1 / 3, 2 / 3, 1, 0.75, 0.5, 0.25]),
        (
            "cosine",
            [
                1 / 3,
                2 / 3,
                1,
                (1 + math.cos(math.pi / 4)) / 2,
                0.5,
                (1 - math.cos(math.pi / 4)) / 2,
            ],
        ),
    ],
)
def test_lr_schedules_warm_up_from_a_nonzero_rate(schedule, expected):
    cfg = LearnerConfig(lr=3e-4, lr_schedule=schedule, warmup_steps=2, steps=6)
    f = lr_factor(cfg, cfg.steps)
    assert [f(k) for k in range(6)] == pytest.approx(expected)
    assert f(100) == pytest.approx(expected[-1] if schedule == "constant" else 0.0, abs=1e-12)


def test_images_for_a_model_without_a_vision_tower_stop_with_a_clear_message(shapes_image):
    from actors.learner_batches import encode_images

    assert encode_images(None, [1, 2], []) is None  # text documents need no processor
    with pytest.raises(ValueError, match="has images but the model takes none"):
        encode_images(None, [1, 2], [shapes_image])


def test_a_resumed_schedule_takes_the_configs_rates_and_weight_decay_at_its_step():
    """A checkpoint restores the optimizer's groups and the schedule's base rates; a resumed
    run applies its own config's rates over them, at the step it resumes from."""
    import torch

    from actors.learner_checkpoint import apply_optimizer_settings

    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))]
    opt = torch.optim.AdamW([{"params": params[:1]}, {"params": params[1:]}], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1))
    for _ in range(3):
        opt.step()
        sched.step()
    apply_optimizer_settings(sched, [2e-5, 2e-6], weight_decay=0.1)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([2e-5 / 4, 2e-6 / 4])
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.1]
    assert sched.get_last_lr() == pytest.approx([2e-5 / 4, 2e-6 / 4])
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([2e-5 / 5, 2e-6 / 5])
    with pytest.raises(RuntimeError, match="2 parameter groups and this config 1"):
        apply_optimizer_settings(sched, [2e-5], weight_decay=0.1)
