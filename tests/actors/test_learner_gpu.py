"""The GPU paths: NCCL process group, bf16, ZeRO-2/3 on CUDA. Skipped where no GPU is present."""

from __future__ import annotations

import pytest
import torch

from rlcs.config import Config

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _config(model, zero: int, ranks: int = 1) -> Config:
    return Config.model_validate(
        {
            "stage": "sft",
            "model": {"path": str(model)},
            "learner": {"zero_stage": zero, "precision": "bf16", "lr": 2e-3, "num_ranks": ranks},
            "cluster": {"device": "cuda"},
            "data": {"seq_len": 256},
        }
    )


def _sft_batch():
    from PIL import Image

    img = Image.new("RGB", (112, 84), "red")
    reply = "<think>red box</think><answer><|begin_of_box|>red<|end_of_box|></answer>"
    return [{"prompt": "Colour?", "response": reply, "images": [img]}] * 2


@pytest.mark.parametrize("zero", [2, 3])
def test_bf16_nccl_sft_on_vlm_lowers_loss(tiny_vlm, zero):
    from actors.learner import Learner

    learner = Learner.local(_config(tiny_vlm, zero), tiny_vlm)
    assert torch.distributed.get_backend() == "nccl"
    assert next(learner.engine.module.parameters()).dtype == torch.bfloat16
    losses = [learner.train_step("sft", _sft_batch())["loss"] for _ in range(5)]
    assert losses[-1] < 0.8 * losses[0], losses
    names = [n for n, _ in learner.named_weights()]
    assert len(names) == len(set(names)) > 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpu_ranks_over_nccl(tiny_text_model):
    ray = pytest.importorskip("ray")
    from actors.learner_group import LearnerGroup

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    try:
        group = LearnerGroup(
            _config(tiny_text_model, zero=2, ranks=2).model_copy(update={"stage": "pretrain"}),
            tiny_text_model,
        )
        batch = [{"text": f"nccl document {i}"} for i in range(4)]
        losses = [group.train_step("pretrain", batch)["loss"] for _ in range(4)]
        assert losses[-1] < losses[0]
        group.shutdown()
    finally:
        ray.shutdown()
