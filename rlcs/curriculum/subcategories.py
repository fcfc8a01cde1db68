"""Subcategories of a domain, and the pass rate their items take before they are drawn.

Items may name a subcategory of their domain. The curriculum keeps each subcategory's pass rate
over recent iterations; with ``subcategory_prior``, an item with no evidence of its own (never
drawn, no offline grade) takes that rate, and so its tier. The items leaning on a subcategory
share one tier, so following its rate costs O(subcategories) an iteration, plus one scan of a
pool when the subcategory changes tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rlcs.curriculum.core import Curriculum


def assign(
    cur: Curriculum, categories: Sequence[int] | np.ndarray | None, names: Sequence[str] | None
) -> None:
    """Give ``cur`` its items' subcategory codes (each within one domain), or one subcategory
    per domain when ``categories`` is None; no subcategory has a rate yet."""
    n = cur.num_items
    if categories is None:
        cur.category = cur.domain  # one subcategory per domain, no extra bytes
        cur.category_names = list(cur.domain_names)
        cur.category_domain = np.arange(len(cur.domain_names), dtype=np.int64)
    else:
        cur.category = np.asarray(categories, np.uint16)
        if len(cur.category) != n:
            raise ValueError(f"{n} items but {len(cur.category)} subcategory codes")
        cur.category_names = list(names or [])
        used = int(cur.category.max()) + 1 if n else 0
        if len(cur.category_names) < used:
            raise ValueError(f"{used} subcategory codes but {len(cur.category_names)} names")
        pairs = np.unique(cur.category.astype(np.int64) * 256 + cur.domain)
        cats, doms = pairs // 256, pairs % 256
        split = cats[1:][cats[1:] == cats[:-1]]
        if len(split):
            name = cur.category_names[split[0]]
            raise ValueError(f"subcategory {name!r} has items in more than one domain")
        cur.category_domain = np.zeros(len(cur.category_names), np.int64)
        cur.category_domain[cats] = doms
    # each subcategory's pass rate over recent iterations (NaN until one of its items is drawn)
    cur.category_rate = np.full(len(cur.category_names), np.nan)
    count_leaning(cur)


def count_leaning(cur: Curriculum) -> None:
    """How many items of each subcategory have no evidence of their own (derived, not saved)."""
    lean = (cur.attempts == 0) & np.isnan(cur.offline)
    cur.leaning = np.bincount(cur.category[lean], minlength=len(cur.category_names))


def store_rows(cur: Curriculum) -> list[dict[str, Any]]:
    """The current iteration's rollouts and successes of each subcategory drawn in it, and
    the rate the sampler now holds for it (None without ``subcategory_prior``), for the
    dashboard's store and the run's metrics; none when items name no subcategories."""
    if cur.category is cur.domain:
        return []
    rollouts, successes = cur._acc["category_rollouts"], cur._acc["category_successes"]
    return [
        {
            "subcategory": cur.category_names[c],
            "domain": cur.domain_names[int(cur.category_domain[c])],
            "rollouts": int(rollouts[c]),
            "successes": int(successes[c]),
            "rate": None if np.isnan(cur.category_rate[c]) else float(cur.category_rate[c]),
        }
        for c in np.flatnonzero(rollouts).tolist()
    ]


def follow_rates(cur: Curriculum) -> None:
    """Blend this iteration's pass rate of every drawn subcategory into its recent rate; its
    items without evidence of their own follow it, to a new tier if it changed."""
    acc = cur._acc
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = acc["category_successes"] / acc["category_rollouts"]
    a = cur.config.tier_rate_ema
    c = np.flatnonzero(~np.isnan(rate))
    old = cur.category_rate[c]
    new = np.where(np.isnan(old), rate[c], (1 - a) * old + a * rate[c])
    cur.category_rate[c] = new
    count, dom = cur.leaning[c], cur.category_domain[c]
    t_old, t_new = cur.scheme.tier_of(old), cur.scheme.tier_of(new)
    had = ~np.isnan(old)
    # the leaning items' share of the pool sums and of the histogram
    np.add.at(cur._sum_p, (dom[had], t_old[had]), -count[had] * old[had])
    np.add.at(cur._sum_p, (dom, t_new), count * new)
    np.add.at(cur.histogram, cur._bins(old[had]), -count[had])
    np.add.at(cur.histogram, cur._bins(new), count)
    moving = (t_old != t_new) & (count > 0)
    if not moving.any():
        return
    target = np.full(len(cur.category_names), -1, np.int64)
    target[c[moving]] = cur._keys(t_new[moving], dom[moving])
    for key in np.unique(cur._keys(t_old[moving], dom[moving])).tolist():
        members = cur.pools.members(key).copy()
        to = target[cur.category[members]]
        go = (to >= 0) & (cur.attempts[members] == 0) & np.isnan(cur.offline[members])
        items, to = members[go], to[go]
        cur.pools.move(items, np.full(len(items), key), to)
        cur.tier[items] = to % cur.scheme.num_tiers
