"""The split of a batch over domains: whole shares exactly, leftover prompts without a bias for
the first-named domains, capacities respected."""

from __future__ import annotations

import numpy as np

from rlcs.config import CurriculumConfig
from rlcs.curriculum import Curriculum
from rlcs.curriculum.quotas import split_quota


def test_a_batch_of_one_from_three_equal_domains_goes_to_each_a_third_of_the_time():
    cur = Curriculum(np.repeat([0, 1, 2], 1000), CurriculumConfig(policy="uniform", seed=3))
    counts = np.zeros(3, np.int64)
    for _ in range(3000):
        idx = cur.next_batch(1)
        counts[cur.domain[idx]] += 1
        cur.report(idx, [[1, 0]])
    # 1000 each in expectation; +-5 standard deviations of a binomial(3000, 1/3) is +-129
    assert np.all(np.abs(counts - 1000) < 130), counts


def test_each_domain_gets_its_exact_share_in_expectation():
    rng = np.random.default_rng(0)
    share, cap = np.array([0.5, 0.3, 0.2, 0.0]), np.full(4, 100)
    draws = np.array([split_quota(7, share, cap, rng) for _ in range(20000)])
    assert np.all(draws.sum(axis=1) == 7)
    # whole parts always, one more with probability the fraction owed: 3.5, 2.1, 1.4
    assert set(np.unique(draws[:, 0])) == {3, 4} and set(np.unique(draws[:, 1])) == {2, 3}
    assert set(np.unique(draws[:, 2])) == {1, 2} and np.all(draws[:, 3] == 0)
    assert np.allclose(draws.mean(axis=0), [3.5, 2.1, 1.4, 0.0], atol=0.02)


def test_an_exact_split_draws_no_random_number_and_capacity_passes_the_surplus_on():
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    assert split_quota(48, np.ones(4), np.full(4, 100), rng).tolist() == [12, 12, 12, 12]
    assert rng.bit_generator.state == state
    # the second domain holds 2 items: its surplus goes to the others, by their shares
    for _ in range(200):
        q = split_quota(10, np.array([1.0, 1.0, 2.0]), np.array([50, 2, 50]), rng)
        assert q.sum() == 10 and q[1] == 2 and q[2] in (5, 6) and q[0] in (2, 3)
    # more wanted than held: everything
    assert split_quota(99, np.ones(3), np.array([1, 0, 4]), rng).tolist() == [1, 0, 4]


def test_without_rng_the_leftovers_go_by_largest_remainder():
    share = np.array([1.0, 1.0, 1.0])
    assert split_quota(1, share, np.full(3, 9)).tolist() == [1, 0, 0]
    assert split_quota(7, np.array([0.5, 0.3, 0.2]), np.full(3, 9)).tolist() == [4, 2, 1]
