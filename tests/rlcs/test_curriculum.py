"""Tiers, weights, expansion arithmetic, report validation, reproducibility and restore."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlcs.config import CurriculumConfig
from rlcs.curriculum import (
    Curriculum,
    ReportError,
    TierScheme,
    curriculum_from_items,
    expansion_ratio,
    oversampled,
    read_store,
    select_balanced,
    tier_weights,
    update_ema,
)
from rlcs.data import Item


def make(n=600, policy="rlcs", seed=0, offline=None, **cfg) -> Curriculum:
    rng = np.random.default_rng(123)
    domains = rng.integers(0, 3, n)
    config = CurriculumConfig(policy=policy, seed=seed, **cfg)
    return Curriculum(domains, config, domain_names=["math", "ocr", "chart"], offline=offline)


def run(cur: Curriculum, iterations: int, batch=32, group=8, seed=7) -> None:
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(99).random(cur.num_items)
    for _ in range(iterations):
        idx = cur.next_batch(batch)
        cur.report(idx, rng.random((len(idx), group)) < truth[idx, None])


def test_tier_of_uses_boundaries_from_very_hard_to_very_easy():
    scheme = TierScheme([0.1, 0.3, 0.7, 0.9])
    tiers = scheme.tier_of(np.array([0.0, 0.0999, 0.1, 0.5, 0.89, 0.9, 1.0, np.nan]))
    names = [scheme.names[t] for t in tiers]
    assert names == [
        "very_hard",
        "very_hard",
        "hard",
        "medium",
        "easy",
        "very_easy",
        "very_easy",
        "unseen",
    ]
    assert scheme.offline_pass_rate("medium") == 0.5
    assert scheme.offline_pass_rate("very_easy") == pytest.approx(0.95)
    assert math.isnan(scheme.offline_pass_rate(None))
    with pytest.raises(ValueError, match="unknown difficulty tier 'trivial'"):
        scheme.offline_pass_rate("trivial")


def test_offline_prior_merges_with_online_evidence_and_moves_tiers():
    cur = make(n=3, offline=np.array([0.95, np.nan, 0.5]), pass_rate_ema=0.5)
    names = cur.scheme.names
    assert [names[t] for t in cur.tier] == ["very_easy", "unseen", "medium"]
    assert cur.population().sum(axis=0)[cur.scheme.unseen] == 1
    for expected in (["medium", "very_hard"], ["hard", "very_hard"]):
        idx = cur.next_batch(3)
        assert sorted(idx.tolist()) == [0, 1, 2]
        cur.report([0, 1], np.zeros((2, 8)))  # all wrong
        assert [names[cur.tier[0]], names[cur.tier[1]]] == expected
    # (4 * 0.95 + 16 * ema 0) / 20 after two all-wrong groups of 8
    assert cur.pass_rate(np.array([0]))[0] == pytest.approx(0.19, abs=1e-3)  # float16 storage
    assert cur.attempts[0] == 16 and cur.successes[0] == 0
    assert cur.population().sum() == 3


def test_tier_weights_boost_the_middle_floor_the_ends_and_zero_empty_pools():
    cfg = CurriculumConfig(weight_power=1.0, weight_floor=0.05, unseen_weight=0.7)
    mean = np.array([[0.5, 0.05, 0.999, 0.2, np.nan]])
    pop = np.array([[10, 10, 10, 0, 10]])
    w = tier_weights(mean, pop, cfg, unseen=4)
    assert w[0].tolist() == pytest.approx([1.0, 0.19, 0.05, 0.0, 0.7])
    sharp = tier_weights(mean, pop, cfg.model_copy(update={"weight_power": 2.0}), unseen=4)
    assert sharp[0, 1] == pytest.approx(0.0361 if 0.0361 > 0.05 else 0.05)
    flat = tier_weights(mean, pop, cfg.model_copy(update={"policy": "uniform"}), unseen=4)
    assert flat[0].tolist() == [1.0, 1.0, 1.0, 0.0, 1.0]


def test_expansion_ratio_arithmetic_by_hand():
    assert expansion_ratio(0.0, 4.0) == 1.0
    assert expansion_ratio(0.25, 4.0) == pytest.approx(4 / 3)
    assert expansion_ratio(0.5, 4.0) == 2.0
    assert expansion_ratio(0.9, 4.0) == 4.0  # 10, capped
    assert expansion_ratio(1.0, 3.0) == 3.0
    assert update_ema(1.0, 2.0, 0.5, 4.0) == 1.5
    assert update_ema(3.9, 4.0, 0.9, 3.0) == 3.0
    assert oversampled(64, 1.5) == 96
    assert oversampled(100, 1.234) == 124
    assert oversampled(6, 7 / 6) == 7


def test_select_keeps_the_most_balanced_groups():
    succ, k = np.array([0, 4, 8, 3, 5, 1]), np.full(6, 8)
    assert select_balanced(succ, k, 3).tolist() == [1, 3, 4]
    assert select_balanced(succ, k, 2, surplus="keep_valid").tolist() == [1, 3, 4, 5]


def test_iteration_updates_the_ratio_ema_and_the_next_batch_is_oversampled(tmp_path):
    cur = make(n=100)
    cur.attach(tmp_path)
    idx = cur.next_batch(4)
    assert len(idx) == 4  # the EMA starts at 1
    rewards = np.array([[1] * 8, [1, 0] * 4, [1, 0, 0, 0] * 2, [1, 1, 1, 0] * 2])
    succ, sizes = cur.report(idx, rewards)
    assert succ.tolist() == [8, 4, 2, 6] and sizes.tolist() == [8] * 4
    row = cur.end_iteration()
    assert row["valid_fraction"] == 0.75 and row["pass_at_k"] == 1.0
    assert cur.expansion_ratio == pytest.approx(4 / 3)
    assert cur.expansion_ema == pytest.approx(0.5 * 4 / 3 + 0.5)
    assert len(cur.next_batch(6)) == 7  # ceil(6 * 7/6)
    stored = read_store(tmp_path / "curriculum" / "aggregates.sqlite")
    assert stored["iterations"][0]["expansion_ratio"] == pytest.approx(4 / 3)
    assert stored["meta"]["tiers"][-1] == "unseen"
    tiers = [t for t in stored["tiers"] if t["groups"]]
    assert sum(t["groups"] for t in tiers) == 4 and sum(t["sampled"] for t in tiers) == 4


@pytest.mark.parametrize("name", ["run#3", "exp?1", "50%41", "a b"])
def test_the_store_reads_back_in_a_folder_of_any_name(tmp_path, name):
    """The read-only reader opens the store by URI: a '#', '?' or '%' in the run's folder name
    once cut the path short (and "exp?1" opened, even created, "exp" read-write)."""
    run = tmp_path / name
    cur = make(n=10)
    cur.attach(run)
    cur.report(cur.next_batch(2), np.array([[1, 0] * 4, [1] * 8]))
    cur.end_iteration()
    assert [
        r["iteration"] for r in read_store(run / "curriculum" / "aggregates.sqlite")["iterations"]
    ] == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_bad_reports_are_rejected_counted_and_leave_state_untouched():
    items = [Item(id=f"q{i}é", domain="math", prompt="p", difficulty=0.5) for i in range(10)]
    cur = curriculum_from_items(items)
    ids = cur.id_of(cur.next_batch(4))
    before = (cur.attempts.copy(), cur.ema.copy(), cur.tier.copy())
    with pytest.raises(ReportError, match=r"unknown: \['nope'\]"):
        cur.report([ids[0], "nope"], [[1, 0], [1, 1]])
    cur.report([ids[0]], [[1, 0]])
    mid = (cur.attempts.copy(), cur.ema.copy(), cur.tier.copy())
    with pytest.raises(ReportError, match=r"duplicate: \['" + ids[0]):
        cur.report([ids[1], ids[0]], [[1, 0], [1, 1]])
    with pytest.raises(ReportError, match="duplicate"):
        cur.report([ids[2], ids[2]], [[1, 0], [1, 1]])
    unsampled = next(i for i in (f"q{j}é" for j in range(10)) if i not in ids)
    with pytest.raises(ReportError, match="not sampled"):
        cur.report([unsampled], [[1, 0]])
    for a, b in zip(mid, (cur.attempts, cur.ema, cur.tier), strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(before[0], cur.attempts)
    assert cur.rejected == {"unknown": 1, "duplicate": 2, "not_sampled": 1}
    succ, sizes = cur.report(ids[1:], [[1, 0], [1, None, 1], [0.7]])  # the good ones go through
    assert succ.tolist() == [1, 2, 1] and sizes.tolist() == [2, 3, 1]  # None: a failed rollout
    cur.next_batch(4)  # a new iteration accepts the same items again
    assert int(cur.attempts.sum()) == 8


def test_same_seed_same_batches_and_restore_continues_identically(tmp_path):
    a, b = make(seed=5), make(seed=5)
    run(a, 6)
    run(b, 6)
    assert np.array_equal(a.next_batch(40), b.next_batch(40))
    assert not np.array_equal(make(seed=6).next_batch(40), make(seed=5).next_batch(40))
    run(a, 3, seed=8)
    a.end_iteration()
    a.save(tmp_path)
    restored = Curriculum.restore(tmp_path, attach=False)
    for name in ("attempts", "successes", "ema", "tier", "last_seen"):
        assert np.array_equal(getattr(a, name), getattr(restored, name)), name
    for _ in range(3):
        x, y = a.next_batch(50), restored.next_batch(50)
        assert np.array_equal(x, y)
        rewards = np.random.default_rng(len(x)).random((len(x), 8)) < 0.5
        a.report(x, rewards)
        restored.report(y, rewards)
    assert a.expansion_ema == restored.expansion_ema


def test_batches_have_no_duplicates_and_cost_does_not_grow_with_n():
    cur = make(n=5000)
    run(cur, 5, batch=200)
    idx = cur.next_batch(4000)
    assert len(idx) == len(np.unique(idx)) == min(5000, len(idx))
    assert set(np.unique(cur.last_seen[idx])) == {cur.iteration}
    cur.report(idx, np.ones((len(idx), 4)))  # every drawn item moves to an easier tier
    more = cur.extra(2000)
    assert not np.intersect1d(idx, more).size
    assert len(more) == len(np.unique(more)) == min(5000 - len(idx), 2000)
    rest = cur.extra(5000)
    assert len(rest) == 5000 - len(idx) - len(more)  # the whole remainder, nothing twice
    assert len(np.unique(np.concatenate([idx, more, rest]))) == 5000


def test_core_and_dashboard_never_import_ray():
    import subprocess
    import sys

    code = (
        "import sys, rlcs.curriculum, rlcs.dashboard, rlcs.dashboard.app; "
        "bad = [m for m in ('ray', 'actors', 'cluster') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pool_draws_are_uniform_and_distinct():
    from rlcs.curriculum.pools import TierPools

    pools = TierPools(np.repeat([0, 1], [5000, 40]), num_keys=2)
    rng = np.random.default_rng(0)
    hits = np.zeros(5040)
    for _ in range(2000):
        idx = pools.sample_many(np.array([0, 1]), np.array([100, 30]), rng)
        assert len(idx) == len(np.unique(idx)) == 130
        hits[idx] += 1
    sparse, dense = hits[:5000], hits[5000:]
    # each of the 5,000 is drawn with p = 0.02 (mean 40, sd 6.3); each of the 40 with p = 0.75
    assert abs(sparse.mean() - 40) < 0.01 and sparse.std() < 8 and sparse.min() > 10
    assert np.all(np.abs(dense - 1500) < 6 * np.sqrt(2000 * 0.75 * 0.25))


def _two_subcategories(prior: bool, n: int = 400, offline=None) -> Curriculum:
    """One domain, items alternating between an easy and a middling subcategory."""
    config = CurriculumConfig(seed=1, subcategory_prior=prior)
    return Curriculum(
        np.zeros(n, np.uint8),
        config,
        domain_names=["math"],
        offline=offline,
        categories=np.arange(n) % 2,
        category_names=["math/addition", "math/subtraction"],
    )


def _consistent(cur: Curriculum) -> None:
    """The incremental pool sums and histogram equal a rebuild from the per-item arrays."""
    sums, hist, pop = cur._sum_p.copy(), cur.histogram.copy(), cur.population().copy()
    cur._rebuild()
    assert np.allclose(sums, cur._sum_p)
    assert np.array_equal(hist, cur.histogram)
    assert np.array_equal(pop, cur.population())


def test_subcategory_rates_move_the_items_never_drawn_to_their_siblings_tiers(tmp_path):
    cur = _two_subcategories(prior=True)
    unseen = cur.scheme.unseen
    idx = cur.next_batch(40)
    # subcategory 0 solves every rollout, subcategory 1 half of them
    rewards = np.where((idx % 2 == 0)[:, None], 1.0, np.arange(8) % 2)
    cur.report(idx, rewards)
    row = cur.end_iteration()
    assert row["subcategory_pass_rate"] == {"math/addition": 1.0, "math/subtraction": 0.5}
    assert cur.category_rate.tolist() == [1.0, 0.5]
    never = np.setdiff1d(np.arange(cur.num_items), idx)
    names = np.array(cur.scheme.names)
    assert set(names[cur.tier[never[never % 2 == 0]]]) == {"very_easy"}
    assert set(names[cur.tier[never[never % 2 == 1]]]) == {"medium"}
    assert cur.population()[0, unseen] == 0
    _consistent(cur)
    # the middling subcategory is boosted: most of the next batch comes from it
    nxt = cur.next_batch(40)
    assert (nxt % 2 == 1).mean() > 0.8
    # once drawn, an item has its own evidence; the others follow the subcategory's new rate
    cur.report(nxt, np.zeros((len(nxt), 8)))
    cur.end_iteration()
    assert cur.category_rate[1] == 0.25  # 0.5, then 0.0 blended with tier_rate_ema 0.5
    assert np.all(cur.pass_rate(np.setdiff1d(nxt, idx)) == 0.0)
    never = np.setdiff1d(never, nxt)
    assert set(names[cur.tier[never[never % 2 == 1]]]) == {"hard"}  # 0.25 in [0.1, 0.3)
    _consistent(cur)
    _consistent(cur)
    # saved and restored, the sampler keeps the rates and draws the same next batch
    cur.save(tmp_path)
    restored = Curriculum.restore(tmp_path, attach=False)
    assert np.array_equal(restored.category_rate, cur.category_rate)
    assert restored.category_names == cur.category_names
    assert np.array_equal(cur.next_batch(40), restored.next_batch(40))


def test_without_a_subcategory_weight_items_never_drawn_stay_unseen():
    cur = _two_subcategories(prior=False)
    idx = cur.next_batch(40)
    cur.report(idx, np.ones((len(idx), 8)))
    cur.end_iteration()
    never = np.setdiff1d(np.arange(cur.num_items), idx)
    assert np.all(cur.tier[never] == cur.scheme.unseen)
    # an offline grade is the item's own: a subcategory's rate does not replace it
    graded = _two_subcategories(prior=True, offline=np.full(400, 0.5))
    idx = graded.next_batch(40)
    graded.report(idx, np.ones((len(idx), 8)))
    graded.end_iteration()
    never = np.setdiff1d(np.arange(graded.num_items), idx)
    assert np.allclose(graded.pass_rate(never), 0.5)


def test_items_name_their_subcategory_in_meta():
    items = [
        Item(id="a", domain="math", prompt="p", meta={"subcategory": "addition"}),
        Item(id="b", domain="math", prompt="p", meta={"subcategory": "subtraction"}),
        Item(id="c", domain="ocr", prompt="p"),
        Item(id="d", domain="math", prompt="p", meta={"subcategory": "addition"}),
    ]
    cur = curriculum_from_items(items, CurriculumConfig(subcategory_prior=True))
    assert cur.category_names == ["math/addition", "math/subtraction", "ocr"]
    assert cur.category.tolist() == [0, 1, 2, 0]
    with pytest.raises(ValueError, match="subcategory 's' has items in more than one domain"):
        Curriculum([0, 1], categories=[0, 0], category_names=["s"], domain_names=["a", "b"])


def test_a_state_saved_before_subcategories_restores_with_one_per_domain(tmp_path):
    import json

    from rlcs.curriculum.snapshot import latest_snapshot

    a = make(seed=2)
    run(a, 3)
    a.end_iteration()
    snap = latest_snapshot(a.save(tmp_path).parent)
    for name in ("category_rate", "category_domain"):
        (snap / f"{name}.npy").unlink()
    for name in ("category_rollouts", "category_successes"):
        (snap / f"acc_{name}.npy").unlink()
    meta = json.loads((snap / "meta.json").read_text())
    del meta["category_names"]
    (snap / "meta.json").write_text(json.dumps(meta))
    restored = Curriculum.restore(tmp_path, attach=False)
    assert restored.category is restored.domain
    assert restored.category_names == ["math", "ocr", "chart"]
    assert np.array_equal(a.next_batch(40), restored.next_batch(40))
