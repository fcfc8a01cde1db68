"""The logged ``grad_norm`` under ZeRO-0, where DeepSpeed reports none, against the norm
DeepSpeed's ZeRO-2 reports for the same steps: one rank in-process, and two ranks over gloo;
and ZeRO-0's first update with bf16 weights against ZeRO-2's and a hand AdamW step."""

from __future__ import annotations

import random

import pytest
import torch

from actors.learner import Learner
from rlcs.config import Config


def _config(model, **learner) -> Config:
    """Short rows, one document or two each, so that a step accumulates several micro-batches."""
    lc = {"lr": 2e-3, "micro_batch": 1, "grad_clip": 1.0, **learner}
    return Config.model_validate(
        {"stage": "pretrain", "model": {"path": str(model)}, "learner": lc, "data": {"seq_len": 24}}
    )


def text_batch(step: int) -> list[dict]:
    rng = random.Random(step)
    words = ["the", "a", "red", "blue", "box", "circle", "left", "above", "of", "is"]
    return [
        {"text": " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))} for _ in range(6)
    ]


def _steps(learner: Learner) -> list[tuple[float, float, float]]:
    """Two steps' logged norm, the norm of the gradient the optimizer applied (after
    clipping; summed in float64, as a float32 sum over the flat gradient is off by 2e-5),
    and loss."""
    out = []
    for k in range(2):
        learner.record_optimizer_grads()
        stats = learner.train_step("pretrain", text_batch(k))
        out.append(
            (stats["grad_norm"], float(learner.recorded_grads().double().norm()), stats["loss"])
        )
    return out


@pytest.mark.parametrize(
    ("precision", "grad_clip"), [("fp32", 1.0), ("fp32", 0.0), ("bf16-mixed", 1.0)]
)
def test_zero0_logs_the_norm_zero2_reports_and_clips_alike(tiny_text_model, precision, grad_clip):
    """Two steps of several micro-batches each (accumulated), the norms about 5: ZeRO-0 logs
    the norm before clipping that ZeRO-2 reports, and applies the same clipped gradient."""
    runs = {}
    for zero in (0, 2):
        cfg = _config(tiny_text_model, zero_stage=zero, precision=precision, grad_clip=grad_clip)
        runs[zero] = _steps(Learner.local(cfg, tiny_text_model))
    for (norm0, applied0, loss0), (norm2, applied2, loss2) in zip(runs[0], runs[2], strict=True):
        assert norm2 > 1.0
        assert norm0 == pytest.approx(norm2, rel=1e-5)
        assert applied2 == pytest.approx(min(norm2, grad_clip or norm2), rel=1e-5)
        assert applied0 == pytest.approx(applied2, rel=1e-5)
        assert loss0 == pytest.approx(loss2, rel=1e-5)


def _masters(learner: Learner) -> torch.Tensor:
    """The fp32 weights the optimizer steps, flat in parameter order (one rank: ZeRO-2's one
    partition is the whole flat model, padded at its end)."""
    opt = getattr(learner.engine.optimizer, "optimizer", learner.engine.optimizer)
    return torch.cat([p.detach().float().view(-1) for g in opt.param_groups for p in g["params"]])


def test_zero0_bf16_takes_zero2s_first_update(tiny_text_model):
    """With bf16 weights ZeRO-0 steps through DeepSpeed's FP16_UnfusedOptimizer, which steps
    AdamW once on zero gradients as it is built. Left alone, that made the first real update
    Adam's second (bias corrections for step 2: 0.74 of the first update's size) and, with
    weight decay, decayed the fp32 master weights once before training. After one step both
    stages' masters must be a hand AdamW first step from the initial weights with the gradient
    the optimizer applied, and the second step's loss the same."""
    lr, wd = 2e-3, 0.1
    runs = {}
    for zero in (0, 2):
        cfg = _config(tiny_text_model, zero_stage=zero, precision="bf16", weight_decay=wd)
        learner = Learner.local(cfg, tiny_text_model)
        w0 = torch.cat([p.detach().float().view(-1) for p in learner.engine.module.parameters()])
        learner.record_optimizer_grads()
        first = learner.train_step("pretrain", text_batch(0))
        grad, masters = learner.recorded_grads()[: w0.numel()], _masters(learner)[: w0.numel()]
        second = learner.train_step("pretrain", text_batch(1))
        # AdamW's first step: m/(1-b1) = g, v/(1-b2) = g^2 (betas 0.9, 0.999; eps 1e-8)
        hand = w0 * (1 - lr * wd) - lr * grad / (grad.abs() + 1e-8)
        runs[zero] = (masters, hand, first["loss"], second["loss"])
    for masters, hand, _, _ in runs.values():
        assert torch.allclose(masters, hand, rtol=0, atol=1e-6)  # lr 2e-3: Adam step 2 is 5e-4 off
    assert runs[0][2] == pytest.approx(runs[2][2], rel=1e-6)
    # the second step runs on the masters rounded to bf16: masters 1e-6 apart can round a few
    # weights a bf16 step (up to 8e-3 of their size) apart, which moved the loss by 1.4e-5 of
    # itself on one 2-core VM (an Adam second step, off by 5e-4 a weight, fails the masters
    # above)
    assert runs[0][3] == pytest.approx(runs[2][3], rel=1e-4)


@pytest.mark.slow
def test_two_zero0_ranks_log_the_one_rank_zero2_norm_and_step_alike(tiny_text_model):
    """Each rank's gradients are partial until DeepSpeed averages them inside ``step()``: the
    norm must be of the averaged ones, the same on both ranks, or their clipped updates (and
    so their weight copies) would part."""
    ray = pytest.importorskip("ray")
    from actors.learner_group import LearnerGroup

    one = Learner.local(_config(tiny_text_model, zero_stage=2, micro_batch=2), tiny_text_model)
    expected = [(norm, loss) for norm, _, loss in _steps(one)]
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        cfg = _config(tiny_text_model, zero_stage=0, num_ranks=2)
        group = LearnerGroup(cfg, tiny_text_model)
        try:
            got = [group.train_step("pretrain", text_batch(k)) for k in range(2)]
            rank0, rank1 = group.call("named_weights_list")
        finally:
            group.shutdown()
    finally:
        ray.shutdown()
    for stats, (norm, loss) in zip(got, expected, strict=True):
        assert stats["rank_tokens"][1] > 0  # the second rank had its own share of the batch
        assert stats["grad_norm"] == pytest.approx(norm, rel=1e-5)
        assert stats["loss"] == pytest.approx(loss, rel=1e-5)
    for (name, w0), (_, w1) in zip(rank0, rank1, strict=True):
        assert torch.equal(w0, w1), name
