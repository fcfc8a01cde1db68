"""Edge cases of the curriculum: tier boundaries, offline grades at prior weight 0, weights of 0,
empty groups, degenerate sizes, and damaged snapshots on resume."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlcs.config import CurriculumConfig
from rlcs.curriculum import (
    CorruptSnapshotError,
    Curriculum,
    SnapshotError,
    TierScheme,
    curriculum_from_items,
    read_store,
    select_balanced,
)
from rlcs.curriculum.snapshot import LATEST, latest_snapshot
from rlcs.data import Item


def consistent(cur: Curriculum) -> None:
    """The incremental pool sums and histogram equal a rebuild from the per-item arrays."""
    sums, hist, pop = cur._sum_p.copy(), cur.histogram.copy(), cur.population().copy()
    tier = cur.tier.copy()
    cur._rebuild()
    assert np.allclose(sums, cur._sum_p)
    assert np.array_equal(hist, cur.histogram)
    assert np.array_equal(pop, cur.population())
    assert np.array_equal(tier, cur.tier)


def test_a_pass_rate_on_a_boundary_is_in_the_tier_above_also_as_stored_in_float16():
    scheme = TierScheme([0.1, 0.3, 0.7, 0.9])
    stored = np.array([0.1, 0.3, 0.7, 0.9, 0.0999, 0.6999], np.float16)  # 0.9 is 0.89990
    names = [scheme.names[t] for t in scheme.tier_of(stored)]
    assert names == ["hard", "medium", "easy", "very_easy", "very_hard", "medium"]
    custom = TierScheme([0.25, 0.5, 0.75], ["hardest", "hard", "easy", "easiest"])
    assert [custom.names[t] for t in custom.tier_of(np.array([0.25, 0.2499, 0.5, 1.0]))] == [
        "hard",
        "hardest",
        "easy",
        "easiest",
    ]
    # 1 of 10 and 9 of 10 rollouts right, or graded so offline
    cur = Curriculum(np.zeros(4, np.uint8), CurriculumConfig(), offline=[0.1, 0.9, np.nan, np.nan])
    assert [cur.scheme.names[t] for t in cur.tier[:2]] == ["hard", "very_easy"]
    idx = cur.next_batch(4)
    fresh = np.sort(idx[np.isnan(cur.offline[idx])])
    cur.report(fresh, [[1] + [0] * 9, [1] * 9 + [0]])
    assert [cur.scheme.names[t] for t in cur.tier[fresh]] == ["hard", "very_easy"]
    consistent(cur)


def test_an_offline_grade_counts_with_a_prior_weight_of_zero_under_subcategory_prior():
    config = CurriculumConfig(offline_prior_weight=0.0, subcategory_prior=True, seed=1)
    offline = np.where(np.arange(200) < 100, 0.5, np.nan)
    cur = Curriculum(np.zeros(200, np.uint8), config, offline=offline)
    names = np.array(cur.scheme.names)
    assert set(names[cur.tier[:100]]) == {"medium"} and set(names[cur.tier[100:]]) == {"unseen"}
    idx = cur.next_batch(20)
    cur.report(idx, np.ones((len(idx), 4)))
    cur.end_iteration()  # the domain's rate is now 1.0: the items without a grade follow it
    never = np.setdiff1d(np.arange(200), idx)
    assert np.all(cur.pass_rate(never[never < 100]) == 0.5)  # the grade stays the item's own
    assert set(names[cur.tier[never[never >= 100]]]) == {"very_easy"}
    consistent(cur)


def test_tiers_of_weight_zero_give_items_only_when_nothing_else_is_left():
    config = CurriculumConfig(weight_floor=0.0, seed=2)  # p = 1 weighs (4 p (1 - p))^2 = 0
    offline = np.r_[np.full(10, 0.5), np.full(100, 1.0)]
    cur = Curriculum(np.zeros(110, np.uint8), config, offline=offline)
    idx = cur.next_batch(50)
    assert len(idx) == 50  # was 10: the batch came up short although 100 items were left
    assert set(range(10)) <= set(idx.tolist())
    # every tier at weight 0: each item as likely as any other, not each tier
    flat = Curriculum(
        np.zeros(110, np.uint8), config, offline=np.r_[np.full(10, 0.0), np.full(100, 1.0)]
    )
    hard = sum(int((flat.next_batch(11) < 10).sum()) for _ in range(200))
    assert 140 < hard < 260  # 200 expected; drawing the two tiers alike gave about 1,100


def test_an_empty_group_is_no_evidence_and_breaks_nothing():
    cur = Curriculum(np.zeros(3, np.uint8), CurriculumConfig(seed=3))
    idx = np.arange(3)
    assert np.array_equal(np.sort(cur.next_batch(3)), idx)
    cur.report(idx[:1], [[1.0, 1.0, 1.0, 0.0]])
    ema, tier = cur.ema[0], cur.tier[0]
    assert np.array_equal(np.sort(cur.next_batch(3)), idx)
    succ, sizes = cur.report(idx, [[], [], [1.0, 0.0]])
    assert succ.tolist() == [0, 0, 1] and sizes.tolist() == [0, 0, 2]
    assert cur.ema[0] == ema and cur.tier[0] == tier  # not pulled towards 0
    assert cur.attempts[1] == 0 and cur.tier[1] == cur.scheme.unseen
    assert np.all(np.isfinite(cur._sum_p))
    consistent(cur)
    # the most balanced groups first, a group without rollouts last
    assert select_balanced(np.array([0, 4, 2]), np.array([0, 4, 4]), 2).tolist() == [1, 2]
    assert select_balanced(np.array([0, 4]), np.array([0, 4]), 1).tolist() == [1]


def test_a_reward_array_must_have_one_row_per_id():
    cur = Curriculum(np.zeros(10, np.uint8), CurriculumConfig())
    idx = cur.next_batch(3)
    with pytest.raises(ValueError, match="3 ids but 1 reward groups"):
        cur.report(idx, np.ones((1, 4)))  # used to be applied to all three
    assert cur.attempts.sum() == 0
    assert cur.report(idx, np.ones((3, 4)))[0].tolist() == [4, 4, 4]


def test_fractional_rewards_count_as_successes_from_the_threshold_on():
    cur = Curriculum(np.zeros(10, np.uint8), CurriculumConfig(success_threshold=0.8))
    idx = cur.next_batch(2)
    # OCR edit-distance scores, grounding ratios: partial credit below the threshold fails
    succ, sizes = cur.report(idx, [[0.79, 0.8, 0.95, 1.0], [0.5, 0.0, None, 0.2]])
    assert succ.tolist() == [3, 0] and sizes.tolist() == [4, 4]
    assert cur.pass_rate(idx).tolist() == [0.75, 0.0]


def test_degenerate_sizes_no_items_one_item_and_one_rollout_per_prompt():
    empty = Curriculum(np.zeros(0, np.uint8), CurriculumConfig())
    assert len(empty.next_batch(8)) == 0
    assert empty.end_iteration()["valid_fraction"] is None and empty.expansion_ema == 1.0
    one = Curriculum(np.zeros(1, np.uint8), CurriculumConfig(expansion_cap=3.0))
    for _ in range(5):  # a single rollout is always all right or all wrong: not valid
        idx = one.next_batch(4)
        assert idx.tolist() == [0]  # never more than there are items
        one.report(idx, [[1.0]])
        assert one.end_iteration()["valid_fraction"] == 0.0
    assert one.expansion_ratio == 3.0 and one.expansion_ema == pytest.approx(2.9375)


def _saved(tmp_path, saves: int = 3, keep: int = 2) -> Curriculum:
    cur = Curriculum(np.arange(300) % 3, CurriculumConfig(seed=5, keep_snapshots=keep))
    for _ in range(saves):
        idx = cur.next_batch(30)
        cur.report(idx, np.random.default_rng(cur.iteration).random((len(idx), 4)) < 0.5)
        cur.end_iteration()
        cur.save(tmp_path)
    return cur


def test_only_the_newest_snapshots_are_kept(tmp_path):
    _saved(tmp_path, saves=4, keep=2)
    folder = tmp_path / "curriculum"
    snaps = sorted(p.name for p in folder.glob("state-*"))
    assert len(snaps) == 2 and [s.split("-")[1] for s in snaps] == ["00000003", "00000004"]
    assert (folder / LATEST).read_text() == snaps[-1]


def _truncate(snap):
    data = (snap / "tier.npy").read_bytes()
    (snap / "tier.npy").write_bytes(data[: len(data) // 2])


def _drop_array(snap):
    (snap / "pool_flat.npy").unlink()


def _garble_meta(snap):
    (snap / "meta.json").write_text('{"iteration": 3, "conf')


def _short_array(snap):
    np.save(snap / "attempts.npy", np.zeros(10, np.uint32))


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (_truncate, "tier.npy"),
        (_drop_array, "missing pool_flat.npy"),
        (_garble_meta, "meta.json"),
        (_short_array, "attempts.npy do not match its 300 items"),
    ],
)
def test_a_damaged_snapshot_is_refused_clearly_and_nothing_is_lost(tmp_path, damage, problem):
    cur = _saved(tmp_path)
    folder = tmp_path / "curriculum"
    snap = latest_snapshot(folder)
    damage(snap)
    before = sorted(str(p) for p in folder.rglob("*"))
    with pytest.raises(CorruptSnapshotError) as e:
        Curriculum.restore(tmp_path, attach=False)
    message = str(e.value)
    assert snap.name in message and problem in message and "state-00000002" in message
    # not a SnapshotError: the driver takes that for "nothing saved" and would start afresh
    assert not isinstance(e.value, SnapshotError)
    assert sorted(str(p) for p in folder.rglob("*")) == before
    # the way out the message gives: LATEST pointed at the older snapshot
    older = next(p for p in folder.glob("state-*") if p != snap)
    (folder / LATEST).write_text(older.name)
    restored = Curriculum.restore(tmp_path, attach=False)
    assert restored.iteration == 2 and json.loads((older / "meta.json").read_text())
    assert cur.iteration == 3


def test_closing_an_iteration_twice_keeps_its_stored_aggregates(tmp_path):
    cur = Curriculum(np.zeros(50, np.uint8), CurriculumConfig(seed=6))
    cur.attach(tmp_path)
    idx = cur.next_batch(8)
    cur.report(idx, np.tile([1.0, 0.0], (len(idx), 2)))
    cur.end_iteration()
    cur.end_iteration()  # the driver's close after next_batch's own, or a retried call
    stored = read_store(tmp_path / "curriculum" / "aggregates.sqlite")
    assert [(r["iteration"], r["groups"], r["sampled"]) for r in stored["iterations"]] == [
        (1, 8, 8)
    ]
    assert sum(t["groups"] for t in stored["tiers"]) == 8


def test_histogram_bins_rates_on_their_edges_as_the_tiers_do_and_a_restore_recounts_them(tmp_path):
    # one item per rate k/20 (k of 20 rollouts right): every bin edge, each stored in float16
    items = [Item(id=f"i{k}", domain="math", prompt="?") for k in range(21)]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0, offline_prior_weight=0.0))
    ids = cur.id_of(cur.next_batch(21))
    assert sorted(ids) == sorted(f"i{k}" for k in range(21))
    right = np.array([int(i[1:]) for i in ids])
    cur.report(ids, (np.arange(20)[None, :] < right[:, None]).astype(float))
    expected = np.bincount(np.minimum(np.arange(21), 19), minlength=20)  # k/20 in bin k
    assert cur.histogram.tolist() == expected.tolist()
    # the tiers agree: every very_easy item (0.9 and up) in a bin from 0.9 up
    very_easy = cur.tier == cur.scheme.names.index("very_easy")
    assert sorted(cur.id_of(np.flatnonzero(very_easy))) == sorted(f"i{k}" for k in range(18, 21))
    # a snapshot from before these bins restores with its histogram counted again
    cur.histogram = np.bincount(np.minimum((cur.pass_rate(np.arange(21)) * 20).astype(int), 19),
                                minlength=20)  # fmt: skip
    assert cur.histogram.tolist() != expected.tolist()  # the old bins put 0.05 in bin 0, ...
    cur.save(tmp_path)
    assert Curriculum.restore(tmp_path, attach=False).histogram.tolist() == expected.tolist()
