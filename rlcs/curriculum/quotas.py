"""How a batch is split: by fixed domain shares, then over tiers by per-item weight."""

from __future__ import annotations

import numpy as np


def split_quota(n: int, share: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Largest-remainder split of ``n`` by ``share``, capped by ``capacity``, overflow passed on."""
    quotas = np.zeros(len(share), np.int64)
    share = np.where(capacity > 0, share, 0.0)
    remaining = min(n, int(capacity.sum()))
    while remaining > 0 and share.sum() > 0:
        exact = remaining * share / share.sum()
        q = np.floor(exact).astype(np.int64)
        order = np.argsort(-(exact - q), kind="stable")
        q[order[: remaining - q.sum()]] += 1
        q = np.minimum(q, capacity - quotas)
        quotas += q
        remaining -= int(q.sum())
        share = np.where(quotas < capacity, share, 0.0)
    return quotas


def spread_over_tiers(n: int, weight: np.ndarray, capacity: np.ndarray, rng) -> np.ndarray:
    """Draw per-tier counts for ``n`` items (multinomial by ``weight``) within ``capacity``.

    Tiers of weight 0 give items only once every tier of positive weight is used up, then in
    proportion to what they hold, so that a batch is never short while items are left.
    """
    counts = np.zeros(len(weight), np.int64)
    w = np.where(capacity > 0, weight.astype(np.float64), 0.0)
    for last_resort in (False, True):
        if last_resort:
            w = (capacity - counts).astype(np.float64)
        while n > 0 and w.sum() > 0:
            draw = np.minimum(rng.multinomial(n, w / w.sum()), capacity - counts)
            counts += draw
            n -= int(draw.sum())
            w = np.where(counts < capacity, w, 0.0)
    return counts
