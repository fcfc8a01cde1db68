"""Turning rewards into evidence: group successes, and the merged per-item pass rate."""

from __future__ import annotations

import numpy as np


def merged_pass_rate(
    offline: np.ndarray,
    attempts: np.ndarray,
    ema: np.ndarray,
    prior_weight: float,
    fallback: np.ndarray | None = None,
) -> np.ndarray:
    """The offline pass rate counts as ``prior_weight`` pseudo-attempts beside the EMA rate.

    Attempts grow with every group, so the offline grade fades as online evidence builds up.
    Where there is no evidence of either kind: ``fallback`` (the item's subcategory rate under
    ``subcategory_prior``), else NaN.
    """
    off = np.asarray(offline, dtype=np.float64)
    n = np.asarray(attempts, dtype=np.float64)
    has_off = ~np.isnan(off)
    w0 = np.where(has_off, prior_weight, 0.0)
    total = w0 + n
    with np.errstate(invalid="ignore", divide="ignore"):
        p = (w0 * np.nan_to_num(off) + n * np.asarray(ema, dtype=np.float64)) / total
    p[total == 0] = np.nan
    only_off = (total == 0) & has_off
    p[only_off] = off[only_off]
    if fallback is not None:
        none = (total == 0) & ~has_off  # an offline grade is evidence even at prior weight 0
        p[none] = np.asarray(fallback, dtype=np.float64)[none]
    return p


def group_successes(rewards, threshold: float, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Successes (reward >= threshold) and size of each group; groups may differ in size."""
    if isinstance(rewards, np.ndarray) and rewards.ndim == 2:
        if len(rewards) != m:  # one row would otherwise broadcast over every id
            raise ValueError(f"{m} ids but {len(rewards)} reward groups")
        return (rewards >= threshold).sum(axis=1).astype(np.int64), np.full(
            len(rewards), rewards.shape[1], np.int64
        )
    groups = [_as_rewards(r) for r in rewards]
    if len(groups) != m:
        raise ValueError(f"{m} ids but {len(groups)} reward groups")
    succ = np.array([(g >= threshold).sum() for g in groups], np.int64)
    return succ, np.array([len(g) for g in groups], np.int64)


def _as_rewards(group) -> np.ndarray:
    """A group's rewards as floats; a missing reward (None) counts as a failed rollout."""
    try:
        return np.asarray(group, np.float64).reshape(-1)
    except TypeError:
        return np.array([np.nan if r is None else float(r) for r in group], np.float64)
