"""The learner's GRPO update against the objective written out by hand.

The other learner tests compare the learner with itself (packed against unpacked, split against
whole); this one computes the loss independently, on plain forward passes of each rollout
alone, and compares the gradients each optimizer step receives.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from actors.learner import Learner
from tests.actors.learner_helpers import _config, rl_batch


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def test_rl_gradients_equal_a_hand_written_grpo_loss(tiny_vlm):
    """The learner's two PPO epochs (tempered logprobs, clip-higher, k3 KL to the starting
    model, entropy bonus, a forced token, per-sample mean) against the objective written out
    here on plain forward passes of each rollout alone (eager attention, no packing)."""
    from actors.learner_model import load_hf_model

    grpo = dict(kl_coef=0.05, entropy_coef=0.01, epochs=2)
    cfg = _config(tiny_vlm, zero_stage=0, grad_clip=0.0, grpo=grpo)
    cfg.stage, cfg.rollout.temperature = "rl", 0.7
    learner = Learner.local(cfg, tiny_vlm)
    trajs = rl_batch(learner)
    for t, r in zip(trajs, [1.0, 0.0, 0.5, 0.25, 0.3, 0.9, 0.1, 0.0], strict=True):
        t["reward"] = r
    trajs[1]["forced_answer"], trajs[1]["forced_positions"] = True, [3, 4]
    seen = []  # (weights, gradients) as each optimizer step finds them
    opt = getattr(learner.engine.optimizer, "optimizer", learner.engine.optimizer)
    opt.register_step_pre_hook(
        lambda *_: seen.append(
            {
                n: (p.detach().clone(), p.grad.clone())
                for n, p in learner.engine.module.named_parameters()
            }
        )
    )
    stats = learner.train_step("rl", trajs)
    assert len(seen) == 2

    model = load_hf_model(tiny_vlm, attn_implementation="eager")
    proc = learner.processor

    def forward(t):
        ids = torch.tensor([t["prompt_token_ids"] + t["token_ids"]])
        kw = dict(input_ids=ids)
        if t["images"]:
            vis = proc.image_processor(images=t["images"], return_tensors="pt")
            kw.update(pixel_values=vis["pixel_values"], image_grid_thw=vis["image_grid_thw"])
            kw["mm_token_type_ids"] = (ids == proc.image_token_id).int()
        p = len(t["prompt_token_ids"])
        logp = torch.log_softmax(model(**kw).logits[0, p - 1 : -1].float() / 0.7, -1)
        lp = logp.gather(-1, torch.tensor(t["token_ids"])[:, None])[:, 0]
        return lp, -(logp.exp() * logp).sum(-1)

    adv, masks = [], []
    for t in trajs:
        group = [u["reward"] for u in trajs if u["item_id"] == t["item_id"]]
        adv.append((t["reward"] - statistics.mean(group)) / (statistics.pstdev(group) + 1e-6))
        m = torch.ones(len(t["token_ids"]))
        m[t.get("forced_positions", [])] = 0.0
        masks.append(m)
    model.load_state_dict({n: w for n, (w, _) in seen[0].items()})
    with torch.no_grad():
        start = [forward(t)[0] for t in trajs]  # old logprobs and the KL reference's
    losses, clipped = [], 0
    for state in seen:
        model.load_state_dict({n: w for n, (w, _) in state.items()})
        model.zero_grad()
        loss = 0.0
        for t, a, m, old in zip(trajs, adv, masks, start, strict=True):
            lp, ent = forward(t)
            ratio = torch.exp(lp - old)
            surrogate = torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a)
            log_r = old - lp
            token = -surrogate + 0.05 * (torch.exp(log_r) - log_r - 1) - 0.01 * ent
            loss = loss + (token * m).sum() / m.sum() / len(trajs)
            clipped += int((((a > 0) & (ratio > 1.28)) | ((a < 0) & (ratio < 0.8)))[m > 0].sum())
        loss.backward()
        losses.append(loss.item())
        mine = torch.cat([g.view(-1) for _, g in state.values()])
        ref = torch.cat([p.grad.view(-1) for p in model.parameters()])
        assert ref.norm() > 0 and _rel(mine, ref) < 1e-5
    assert stats["loss"] == pytest.approx(sum(losses), abs=1e-5)
    assert stats["clipped"] == clipped > 0
    assert stats["tokens"] == 2 * sum(m.sum() for m in masks)
