"""The DAPO top-up (``curriculum.policy: dapo_filter``) sizes each extra round by the share of
useful groups so far: valid groups that the group filter let through. No Ray: the sampler is a
stand-in with dapo_filter's selection (every valid, eligible group, up to the batch), and the
driver's ``ray.get`` hands back what it is given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster import rl_iteration
from rewards.base import ScoreResult
from rlcs.config import Config
from rlcs.data import Item, Trajectory


class _Call:
    def __init__(self, fn):
        self.remote = fn


class DapoSampler:
    """Hands out item ids in order and selects like dapo_filter; records ``extra``'s sizes."""

    def __init__(self, ids: list[str]):
        self.ids, self.drawn, self.extra_sizes = list(ids), 0, []
        self.next_batch = _Call(self._take)
        self.extra = _Call(self._extra)
        self.report = _Call(self._report)
        self.end_iteration = _Call(lambda: {})
        self.stats = _Call(lambda: {"expansion_ratio": 1.0, "expansion_ema": 1.0, "tiers": {}})
        self.batch = 0

    def _take(self, n: int) -> list[str]:
        self.batch = n
        out = self.ids[self.drawn : self.drawn + n]
        self.drawn += len(out)
        return out

    def _extra(self, n: int) -> list[str]:
        self.extra_sizes.append(n)
        return self._take(n) if n else []

    def _report(self, outcomes, untrainable, batch=None):
        barred = set(untrainable)
        valid = [i for i, rs in outcomes.items() if 0 < sum(r >= 1.0 for r in rs) < len(rs)]
        return {
            "selected": [i for i in valid if i not in barred][: batch or self.batch],
            "groups": len(outcomes),
            "valid_groups": len(valid),
        }


def _roles(sampler, rewards_of, barred_ids):
    """Rollouts whose response is their reward, scored as such; a filter that bars
    ``barred_ids``."""

    def generate(items, step):
        return [
            Trajectory(it.id, str(r), [1, 2], [-0.5, -0.5], "stop")
            for it in items
            for r in rewards_of(it.id)
        ]

    def score(requests, timeout_s):
        return [ScoreResult(float(r["response"]), True, "x") for r in requests]

    return SimpleNamespace(
        sampler=sampler,
        rollout=SimpleNamespace(generate=generate, restarts=0),
        rewards=SimpleNamespace(retries=0, score=score),
        group_filter=lambda item, rollouts: item.id not in barred_ids,
    )


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setattr(rl_iteration, "ray", SimpleNamespace(get=lambda x: x))


def test_groups_the_filter_bars_that_were_not_valid_anyway_do_not_shrink_the_useful_share(
    no_ray,
):
    """16 prompts: 12 valid groups pass, 4 all-wrong groups are barred by the filter. 4 groups
    are missing and 12 of 16 (3/4) were useful, so the top-up asks for ceil(4 / (3/4)) = 6
    prompts, not for 8 as if the barred groups had been valid ones taken away."""
    ids = [f"i{k:02d}" for k in range(40)]
    barred = {"i12", "i13", "i14", "i15"}

    def rewards_of(item_id: str) -> list[float]:
        return [0.0, 0.0] if item_id in barred else [1.0, 0.0]

    cfg = Config.model_validate(
        {
            "stage": "rl",
            "model": {"tiny": "text"},
            "rollout": {"n": 2},
            "curriculum": {"policy": "dapo_filter"},
            "run": {"prompts_per_iteration": 16, "topup_rounds": 1},
        }
    )
    items = {i: Item(id=i, domain="math", prompt="p", answer="1") for i in ids}
    sampler = DapoSampler(ids)
    g = rl_iteration.gather(cfg, _roles(sampler, rewards_of, barred), items, 0)
    assert sampler.extra_sizes == [6]
    assert len(g.rounds.selected) == 16 and g.rounds.count == 2
    assert g.rounds.filtered == 4 and g.rounds.valid == 12 + 6
