"""The GPU paths: NCCL process group, bf16, ZeRO-2/3 on CUDA. Skipped where no GPU is present."""

from __future__ import annotations

import pytest
import torch

from rlcs.config import Config

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _config(model, zero: int, ranks: int = 1, precision: str = "bf16") -> Config:
    return Config.model_validate(
        {
            "stage": "sft",
            "model": {"path": str(model)},
            "learner": {"zero_stage": zero, "precision": precision, "lr": 2e-3, "num_ranks": ranks},
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


@pytest.mark.parametrize(
    ("precision", "max_diff", "mean_diff"), [("fp32", 2e-3, 2e-4), ("bf16", 0.15, 0.03)]
)
def test_shared_prompts_keep_each_rollouts_logprobs_on_a_gpu(
    tiny_vlm, precision, max_diff, mean_diff
):
    """``learner.grpo.share_prompts`` on CUDA: a group's prompt and image run once under an
    explicit tree mask (SDPA's CUDA kernels), and each rollout's logprobs match those of one
    document a rollout, to rounding (TF32 convolutions in fp32; bf16's 8-bit mantissa)."""
    from actors.learner import Learner
    from tests.actors.learner_helpers import rl_batch
    from tests.actors.test_share_prompts import both_ways

    cfg = _config(tiny_vlm, zero=2, precision=precision).model_copy(update={"stage": "rl"})
    learner = Learner.local(cfg, tiny_vlm)
    plain, shared, want, got = both_ways(learner, rl_batch(learner))
    assert (len(plain.docs), len(shared.docs)) == (8, 2)
    assert got.keys() == want.keys() and len(got) == 8
    diffs = torch.cat([(torch.tensor(got[k]) - torch.tensor(v)).abs() for k, v in want.items()])
    print(
        f"{precision}: {diffs.numel()} tokens, max |diff| {diffs.max():.2e}, mean {diffs.mean():.2e}"
    )
    assert diffs.max() < max_diff and diffs.mean() < mean_diff, (diffs.max(), diffs.mean())


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
