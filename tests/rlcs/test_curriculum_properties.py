"""Property: a batch never repeats an item, never leaves 0..N-1, and keeps the domain mix."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rlcs.config import CurriculumConfig
from rlcs.curriculum import Curriculum


@settings(max_examples=60, deadline=None)
@example(
    n=163,
    num_domains=2,
    shares=[0.625, 0.515625, 1.0, 1.0, 1.0],
    batch=161,
    policy="rlcs",
    seed=3730,
    warmup=0,
    subcategories=0,
)
@given(
    n=st.integers(1, 3000),
    num_domains=st.integers(1, 5),
    shares=st.lists(st.floats(0.05, 1.0), min_size=5, max_size=5),
    batch=st.integers(1, 400),
    policy=st.sampled_from(["rlcs", "uniform", "dapo_filter"]),
    seed=st.integers(0, 2**31 - 1),
    warmup=st.integers(0, 3),
    subcategories=st.integers(0, 4),
)
def test_batches_are_distinct_in_range_and_keep_domain_proportions(
    n, num_domains, shares, batch, policy, seed, warmup, subcategories
):
    rng = np.random.default_rng(seed)
    domains = rng.integers(0, num_domains, n)
    names = [f"d{i}" for i in range(num_domains)]
    weights = {d: shares[i] for i, d in enumerate(names)}
    offline = np.where(rng.random(n) < 0.5, rng.random(n), np.nan)
    # with subcategories, items never drawn move to their subcategory's tier between batches
    config = CurriculumConfig(policy=policy, seed=seed, subcategory_prior=subcategories > 0)
    cats = {}
    if subcategories:
        codes = domains * subcategories + rng.integers(0, subcategories, n)
        cats = {"categories": codes,
                "category_names": [f"c{i}" for i in range(num_domains * subcategories)]}  # fmt: skip
    cur = Curriculum(
        domains, config, domain_names=names, offline=offline, domain_weights=weights, **cats
    )
    truth = rng.random(n)
    for _ in range(warmup):
        idx = cur.next_batch(batch)
        cur.report(idx, rng.random((len(idx), 4)) < truth[idx, None])
    idx = cur.next_batch(batch)
    assert len(idx) == len(np.unique(idx))
    assert idx.min() >= 0 and idx.max() < n
    counts = np.bincount(domains[idx], minlength=num_domains)
    available = np.bincount(domains, minlength=num_domains)
    present = available > 0
    share = np.array([weights[d] for d in names]) * present
    expected = len(idx) * share / share.sum()
    # A domain gets less than its share only when it has no items left to give; the others
    # then share its surplus. With no domain exhausted, each is within rounding of its share.
    below = counts < np.floor(expected + 1e-9)
    assert np.all(counts[below] == available[below])
    if not np.any(present & (counts == available)):
        assert np.all(np.abs(counts - expected) <= 1.0 + 1e-9)
