"""GRPO: group-normalised advantages and the clip-higher PPO objective, as pure torch functions.

The recipe (GLM-4.1V-Thinking): no KL and no entropy term by default, clip-higher as in DAPO
(eps_low 0.2, eps_high 0.28), and the loss averaged per sample rather than per token.

Gradient accumulation is made exact by turning every aggregation into *per-token weights*
computed over the whole (mini-)batch before it is split into micro-batches:
``loss = sum_t w_t * l_t``. A micro-batch then contributes ``sum`` over its own tokens, and the
sum over micro-batches and data-parallel ranks equals the full-batch loss exactly.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


def group_advantages(
    rewards: Sequence[float] | torch.Tensor,
    groups: Sequence[Hashable],
    std_normalize: bool = True,
    eps: float = 1e-6,
    negative_scale: float = 1.0,
) -> torch.Tensor:
    """Advantage of each rollout: its reward minus its group's mean, optionally over the std.

    ``groups[i]`` names the prompt rollout ``i`` belongs to (e.g. the item id). The std is the
    population std (``unbiased=False``); a group whose rewards are all equal gets advantage 0.
    ``negative_scale`` multiplies the advantages below a group's mean (1: GRPO; 0 reinforces
    only the better rollouts of each group).
    """
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if r.ndim != 1 or len(groups) != r.numel():
        raise ValueError(f"{r.numel()} rewards but {len(groups)} group labels")
    bad = torch.nonzero(~torch.isfinite(r)).view(-1).tolist()
    if bad:  # it would make its whole group's advantages, the loss and the weights NaN
        i = bad[0]
        raise ValueError(f"reward {r[i].item()} of rollout {i} (group {groups[i]!r}) is not finite")
    index: dict[Hashable, int] = {}
    gid = torch.tensor([index.setdefault(g, len(index)) for g in groups], dtype=torch.long)
    n = len(index)
    count = torch.zeros(n, dtype=torch.float64).index_add_(0, gid, torch.ones_like(r))
    mean = torch.zeros(n, dtype=torch.float64).index_add_(0, gid, r) / count
    adv = r - mean[gid]
    if std_normalize:
        var = torch.zeros(n, dtype=torch.float64).index_add_(0, gid, adv**2) / count
        adv = adv / (var.sqrt()[gid] + eps)
    # exactly 0 for a group of equal rewards, not the rounding error of its mean (eight
    # rewards of 0.1 leave 1.4e-17 each): the learner skips samples of advantage 0
    lo = torch.full((n,), torch.inf, dtype=torch.float64).scatter_reduce(0, gid, r, "amin")
    hi = torch.full((n,), -torch.inf, dtype=torch.float64).scatter_reduce(0, gid, r, "amax")
    adv = torch.where((lo == hi)[gid], 0.0, adv)
    if negative_scale != 1.0:
        adv = torch.where(adv < 0, adv * negative_scale, adv)
    return adv.to(torch.float32)


def token_weights(
    lengths: Sequence[int],
    loss_agg: str = "sample",
    num_samples: int | None = None,
    num_tokens: int | None = None,
) -> list[float]:
    """Per-sample weight of each of its loss tokens, so that ``sum_t w_t l_t`` aggregates right.

    ``sample``: mean over samples of each sample's token mean (weight ``1 / (len_i * N)``).
    ``token``: mean over all loss tokens of the batch (weight ``1 / T``).
    ``num_samples`` / ``num_tokens`` default to this list's own (``N`` counts the samples
    that have loss tokens: one with none has no mean to add); pass the whole batch's totals
    when ``lengths`` is only a shard of it (one rank, one micro-batch).
    """
    if loss_agg not in ("sample", "token"):
        raise ValueError(f"loss_agg must be 'sample' or 'token', got {loss_agg!r}")
    n = num_samples if num_samples is not None else sum(1 for length in lengths if length > 0)
    t = num_tokens if num_tokens is not None else sum(lengths)
    if loss_agg == "sample":
        return [1.0 / (max(length, 1) * max(n, 1)) for length in lengths]
    return [1.0 / max(t, 1) for _ in lengths]


#: the largest log-ratio ``exp`` sees (ratio ~4.9e8); float32 ``exp`` overflows past ~88.7
MAX_LOG_RATIO = 20.0


@dataclass
class PolicyLossTerms:
    """Per-token terms of the objective; the scalar loss is ``(weights * loss).sum()``."""

    loss: torch.Tensor
    ratio: torch.Tensor
    clipped: torch.Tensor
    kl: torch.Tensor | None = None


def ppo_clip_terms(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> PolicyLossTerms:
    """Per-token clip-higher PPO loss ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``.

    Optional terms: ``kl_coef * KL`` with the k3 estimator against ``ref_logprobs`` (always
    >= 0, unbiased), and ``-entropy_coef * entropy``. All tensors share one shape; the
    advantage is broadcast per token by the caller.

    The log-ratios are capped at ``MAX_LOG_RATIO`` before ``exp`` (as in verl): past about 88
    float32 overflows to inf, which the caller's ``weights * loss`` turns into NaN at a weight-0
    position (``0 * inf``: a prompt token, the blank-image row's KL), as does the backward pass
    of a clipped token. A capped token has no gradient, and ``clipped`` counts it.
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    unclipped = ratio * advantages
    clipped_ratio = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    surrogate = torch.minimum(unclipped, clipped_ratio * advantages)
    loss = -surrogate
    kl = None
    if kl_coef > 0.0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        log_r = (ref_logprobs - logprobs).clamp(max=MAX_LOG_RATIO)
        kl = torch.exp(log_r) - log_r - 1.0
        loss = loss + kl_coef * kl
    if entropy_coef > 0.0:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the per-token entropy")
        loss = loss - entropy_coef * entropy
    clipped = (surrogate != unclipped) | (log_ratio > MAX_LOG_RATIO)
    return PolicyLossTerms(loss=loss, ratio=ratio, clipped=clipped, kl=kl)


def aggregate(
    token_loss: torch.Tensor, mask: torch.Tensor, loss_agg: str = "sample"
) -> torch.Tensor:
    """Reference aggregation of a padded ``[samples, tokens]`` loss, for tests and small batches.

    ``sample``: the mean of per-sample token means; ``token``: the mean over all masked tokens.
    """
    mask = mask.to(token_loss.dtype)
    if loss_agg == "sample":
        per_sample = (token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_sample.mean()
    if loss_agg == "token":
        return (token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    raise ValueError(f"loss_agg must be 'sample' or 'token', got {loss_agg!r}")


def tempered_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature`` in float32, as the rollout engines sample: in bf16 the quotient
    is rounded once more, about 0.02 nats a token at T=0.7. A bf16 input is cast to a new
    float32 tensor and divided in place, so no third copy of the logits is made."""
    if temperature == 1.0:
        return logits
    if logits.dtype == torch.float32:
        return logits / temperature
    return logits.float().div_(temperature)


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of each label under ``logits`` (same leading shape; labels < 0 give 0)."""
    safe = labels.clamp(min=0)
    logp = torch.log_softmax(logits.float(), dim=-1)
    out = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return out.masked_fill(labels < 0, 0.0)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at each position."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
