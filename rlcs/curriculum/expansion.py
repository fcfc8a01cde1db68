"""Ratio-EMA dynamic expansion: how much to over-sample, and which groups to keep.

``expansion_ratio = 1 / (1 - not_valid_rate)``, where a group is not valid when its rollouts
were all correct or all wrong. Its EMA is the over-sampling factor of the next iteration, so
the total rollout count is fixed before rollout starts (unlike DAPO's sample-until-full).
"""

from __future__ import annotations

import math

import numpy as np


def expansion_ratio(not_valid_rate: float, cap: float) -> float:
    """``1 / (1 - not_valid_rate)``, capped; a fully invalid iteration gives the cap."""
    if not 0.0 <= not_valid_rate <= 1.0:
        raise ValueError(f"not_valid_rate must be in [0, 1], got {not_valid_rate}")
    if not_valid_rate >= 1.0:
        return float(cap)
    return float(min(1.0 / (1.0 - not_valid_rate), cap))


def update_ema(previous: float, ratio: float, weight: float, cap: float) -> float:
    """Blend the newest ratio into the EMA with ``weight``, never past the cap."""
    return float(min(weight * ratio + (1.0 - weight) * previous, cap))


def oversampled(batch: int, ratio_ema: float) -> int:
    """Prompts to roll out for a training batch of ``batch`` groups."""
    return int(math.ceil(batch * ratio_ema - 1e-9))


def valid_groups(successes: np.ndarray, group_sizes: np.ndarray) -> np.ndarray:
    """A group is valid (has a learning signal) when it is neither all correct nor all wrong."""
    return (successes > 0) & (successes < group_sizes)


def select_balanced(
    successes: np.ndarray, group_sizes: np.ndarray, batch: int, surplus: str = "drop"
) -> np.ndarray:
    """Indices of the ``batch`` most balanced groups (correct and wrong counts closest).

    Ties keep the sampling order, which is already random. A group without rollouts comes
    last. With ``surplus="keep_valid"`` the valid groups beyond the batch are kept as well.
    """
    s = np.asarray(successes, dtype=np.float64)
    k = np.asarray(group_sizes, dtype=np.float64)
    imbalance = np.where(k > 0, np.abs(2.0 * s - k) / np.maximum(k, 1.0), 2.0)
    order = np.argsort(imbalance, kind="stable")
    chosen = order[:batch]
    if surplus == "keep_valid":
        rest = order[batch:]
        rest = rest[valid_groups(s[rest], k[rest])]
        chosen = np.concatenate([chosen, rest])
    elif surplus != "drop":
        raise ValueError(f"unknown surplus policy {surplus!r} (drop, keep_valid)")
    return np.sort(chosen)
