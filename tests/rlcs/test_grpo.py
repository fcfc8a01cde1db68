"""GRPO advantages and the clip-higher objective, against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlcs.grpo import (
    aggregate,
    group_advantages,
    ppo_clip_terms,
    token_entropy,
    token_logprobs,
    token_weights,
)


def test_group_advantages_mean_and_std_per_group():
    # group a: rewards 1, 0 -> mean 0.5, population std 0.5 -> +1, -1
    # group b: rewards 1, 1, 1 -> all equal -> 0 (no signal)
    # group c: rewards 0, 0.5, 1 -> mean 0.5, std sqrt(1/6) -> -/+ 1.2247
    adv = group_advantages([1, 0, 1, 1, 1, 0, 0.5, 1], list("aabbbccc"), eps=0.0 + 1e-12)
    s = math.sqrt(1 / 6)
    expected = [1, -1, 0, 0, 0, -0.5 / s, 0, 0.5 / s]
    assert adv.tolist() == pytest.approx(expected, abs=1e-6)


def test_group_advantages_without_std_is_centred_reward():
    adv = group_advantages([1, 0, 0, 0.5], ["x", "x", "y", "y"], std_normalize=False)
    assert adv.tolist() == pytest.approx([0.5, -0.5, -0.25, 0.25])


def test_negative_scale_shrinks_only_the_below_mean_advantages():
    rewards, groups = [1, 0, 0, 0, 1, 1], list("aaabbb")
    full = group_advantages(rewards, groups)
    for scale in (0.0, 0.5):
        adv = group_advantages(rewards, groups, negative_scale=scale)
        expected = [a * scale if a < 0 else a for a in full.tolist()]
        assert adv.tolist() == pytest.approx(expected)
    assert group_advantages([1, 1], ["a", "a"], negative_scale=0.0).eq(0).all()


def test_a_group_of_equal_rewards_gets_exactly_zero():
    """Not the rounding error of the group mean: the learner skips samples of advantage 0."""
    for std_normalize in (True, False):
        adv = group_advantages([0.1] * 8 + [0.7] * 16 + [1, 0], ["a"] * 8 + ["b"] * 16 + ["c"] * 2,
                               std_normalize=std_normalize)  # fmt: skip
        assert adv[:24].eq(0).all() and adv[24] > 0 > adv[25]


def test_group_advantages_rejects_mismatched_labels():
    with pytest.raises(ValueError, match="3 rewards but 2 group labels"):
        group_advantages([1, 0, 1], ["a", "b"])


def test_group_advantages_refuse_a_reward_that_is_not_finite():
    """A NaN reward made its whole group's advantages NaN, hence the loss and the update."""
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match=r"rollout 2 \(group 'b'\) is not finite"):
            group_advantages([1, 0, bad, 1], list("aabb"))


def test_clip_higher_is_asymmetric():
    # ratio e^0.5 = 1.6487 with A=+1 clips at 1 + 0.28; with A=-1 min(-1.6487, -1.28) = -1.6487
    # ratio e^-0.5 = 0.6065 with A=+1: min(0.6065, 0.8) = 0.6065; with A=-1: min(-0.6065, -0.8)=-0.8
    lp = torch.tensor([0.5, 0.5, -0.5, -0.5])
    old = torch.zeros(4)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    t = ppo_clip_terms(lp, old, adv, eps_low=0.2, eps_high=0.28)
    r_hi, r_lo = math.exp(0.5), math.exp(-0.5)
    assert t.loss.tolist() == pytest.approx([-1.28, r_hi, -r_lo, 0.8], abs=1e-6)
    assert t.clipped.tolist() == [True, False, False, True]


def test_clipped_tokens_have_no_gradient():
    lp = torch.tensor([0.5, 0.1], requires_grad=True)
    t = ppo_clip_terms(lp, torch.zeros(2), torch.ones(2))
    t.loss.sum().backward()
    # first token is clipped (ratio 1.65 > 1.28): zero gradient; second: d(-e^lp)/dlp = -e^0.1
    assert lp.grad.tolist() == pytest.approx([0.0, -math.exp(0.1)], abs=1e-6)


def test_a_huge_log_ratio_gives_no_inf_or_nan():
    """exp(100) is inf in float32: a weight-0 position (a prompt token, advantage 0) made the
    weighted loss NaN, a clipped token (A > 0) a NaN gradient, and A < 0 an inf loss."""
    lp = torch.tensor([0.0, 0.0, 0.0, -1.0], requires_grad=True)
    old = torch.tensor([-100.0, -100.0, -100.0, -1.0])
    adv = torch.tensor([0.0, 1.0, -1.0, 1.0])
    weights = torch.tensor([0.0, 0.5, 0.5, 1.0])
    t = ppo_clip_terms(lp, old, adv)
    loss = (weights * t.loss).sum()
    loss.backward()
    cap = math.exp(20.0)
    assert loss.item() == pytest.approx(0.5 * -1.28 + 0.5 * cap - 1.0, rel=1e-6)
    assert lp.grad.tolist() == [0.0, 0.0, 0.0, -1.0]  # only the in-range token moves
    assert t.clipped.tolist() == [True, True, True, False]
    # the k3 term at a policy logprob far below the reference's
    lp = torch.tensor([-100.0, -1.0], requires_grad=True)
    t = ppo_clip_terms(
        lp, lp.detach(), torch.zeros(2), ref_logprobs=torch.tensor([0.0, -1.0]), kl_coef=0.1
    )
    loss = (torch.tensor([0.0, 1.0]) * t.loss).sum()
    loss.backward()
    assert t.kl[0].item() == pytest.approx(cap - 21.0, rel=1e-6)
    assert loss.item() == 0.0 and lp.grad.tolist() == [0.0, 0.0]


def test_kl_k3_and_entropy_terms():
    lp = torch.tensor([math.log(0.5)])
    ref = torch.tensor([math.log(0.25)])
    t = ppo_clip_terms(lp, lp.clone(), torch.zeros(1), ref_logprobs=ref, kl_coef=0.1)
    # k3 = e^(ref-lp) - (ref-lp) - 1 = 0.5 + ln 2 - 1
    k3 = 0.5 + math.log(2) - 1
    assert t.kl.item() == pytest.approx(k3, abs=1e-6)
    assert t.loss.item() == pytest.approx(0.1 * k3, abs=1e-6)
    ent = torch.tensor([0.7])
    t2 = ppo_clip_terms(lp, lp.clone(), torch.zeros(1), entropy=ent, entropy_coef=0.01)
    assert t2.loss.item() == pytest.approx(-0.007, abs=1e-7)
    with pytest.raises(ValueError, match="ref_logprobs"):
        ppo_clip_terms(lp, lp, torch.zeros(1), kl_coef=0.1)


def test_kl_and_entropy_off_by_default_match_plain_ppo():
    lp, old, adv = torch.tensor([0.1, -0.3]), torch.zeros(2), torch.tensor([1.0, -2.0])
    plain = ppo_clip_terms(lp, old, adv)
    assert plain.kl is None
    assert plain.loss.tolist() == ppo_clip_terms(lp, old, adv, ref_logprobs=lp).loss.tolist()


def test_per_sample_vs_per_token_aggregation():
    # sample 0: 1 token with loss 4; sample 1: 3 tokens with loss 1 each
    loss = torch.tensor([[4.0, 0, 0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    assert aggregate(loss, mask, "sample").item() == pytest.approx((4 + 1) / 2)
    assert aggregate(loss, mask, "token").item() == pytest.approx(7 / 4)


def test_token_weights_reproduce_aggregation_in_any_split():
    lengths = [1, 3]
    losses = [[4.0], [1.0, 2.0, 3.0]]
    for agg, expected in (("sample", (4 + 2) / 2), ("token", 10 / 4)):
        w = token_weights(lengths, agg)
        total = sum(wi * x for wi, seq in zip(w, losses, strict=True) for x in seq)
        assert total == pytest.approx(expected)
        # a shard of the batch, normalised by the whole batch's totals, adds up the same
        shard = token_weights([3], agg, num_samples=2, num_tokens=4)
        part = token_weights([1], agg, num_samples=2, num_tokens=4)
        assert part[0] * 4 + shard[0] * 6 == pytest.approx(expected)


def test_a_sample_without_loss_tokens_is_not_counted_in_the_sample_mean():
    """A rollout whose every token is masked (only forced tokens, say) adds no mean, so the
    others' mean is over the samples that have one."""
    w = token_weights([2, 0, 1], "sample")
    assert w[0] * 2 + w[2] * 1 == pytest.approx(1.0)  # (mean_0 + mean_2) / 2 at losses of 1
    assert token_weights([0, 0], "sample") == [1.0, 1.0]  # nothing to weigh, and no 1/0


def test_token_logprobs_and_entropy():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]))
    lp = token_logprobs(logits, torch.tensor([1, -100]))
    assert lp.tolist() == pytest.approx([math.log(0.25), 0.0])
    ent = token_entropy(logits)
    assert ent.tolist() == pytest.approx([1.5 * math.log(2), math.log(3)], abs=1e-6)


def test_tempered_logits_are_divided_in_float32():
    """The learner divides by the sampling temperature in float32, as the engines do; bf16
    logits are cast first (a bf16 quotient is rounded once more)."""
    from rlcs.grpo import tempered_logits

    torch.manual_seed(0)
    full = torch.randn(64, 50) * 3
    half = full.to(torch.bfloat16)
    out = tempered_logits(half, 0.7)
    assert out.dtype == torch.float32 and half.dtype == torch.bfloat16
    torch.testing.assert_close(out, half.float() / 0.7, rtol=0, atol=0)
    assert not torch.equal((half / 0.7).float(), out)  # what dividing in bf16 gave
    assert tempered_logits(full, 1.0) is full
    x = full.clone().requires_grad_()
    tempered_logits(x, 0.5).sum().backward()  # differentiable, and x itself left as it was
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    torch.testing.assert_close(x.detach(), full)
