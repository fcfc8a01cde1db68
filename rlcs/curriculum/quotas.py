"""How a batch is split: by fixed domain shares, then over tiers by per-item weight."""

from __future__ import annotations

import numpy as np


def split_quota(n: int, share: np.ndarray, capacity: np.ndarray, rng=None) -> np.ndarray:
    """Split ``n`` by ``share``, capped by ``capacity``, a domain's overflow passed on.

    Each domain gets the whole part of its exact share; the prompts left over go to domains
    drawn with probability equal to the fraction each is owed (systematic sampling), so every
    domain's expected quota is its exact share and no domain is favoured by its place in the
    order. Without ``rng`` (or when the split is exact) no randomness is used and leftovers go
    by largest remainder, ties to the first domains.
    """
    quotas = np.zeros(len(share), np.int64)
    share = np.where(capacity > 0, share, 0.0)
    remaining = min(n, int(capacity.sum()))
    while remaining > 0 and share.sum() > 0:
        exact = remaining * share / share.sum()
        q = np.floor(exact).astype(np.int64)
        left = remaining - int(q.sum())
        if left > 0:
            q[_leftovers(exact - q, left, rng)] += 1
        q = np.minimum(q, capacity - quotas)
        quotas += q
        remaining -= int(q.sum())
        share = np.where(quotas < capacity, share, 0.0)
    return quotas


def _leftovers(frac: np.ndarray, k: int, rng) -> np.ndarray:
    """Indices of the ``k`` domains that get one more prompt, ``frac`` their owed fractions
    (each in [0, 1), summing to ``k`` up to rounding)."""
    if rng is None:
        return np.argsort(-frac, kind="stable")[:k]
    cum = np.cumsum(frac * (k / frac.sum()))
    # k points one apart from a uniform start: domain i is hit with probability frac[i], and
    # at most once as no fraction reaches 1
    picked = np.searchsorted(cum, rng.uniform() + np.arange(k), side="right")
    picked = np.unique(np.minimum(picked, np.flatnonzero(frac > 0)[-1]))
    if len(picked) < k:  # rounding at the very end of the range: fill by largest remainder
        rest = np.setdiff1d(np.argsort(-frac, kind="stable"), picked, assume_unique=True)
        order = np.argsort(-frac[rest], kind="stable")
        picked = np.concatenate([picked, rest[order][: k - len(picked)]])
    return picked


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
