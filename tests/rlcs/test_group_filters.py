"""Group filters by import path: loading them with clear errors, the built-in ones, and the
curriculum selecting among the groups a filter kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlcs.config import Config, CurriculumConfig
from rlcs.curriculum import Curriculum
from rlcs.data import Item, Trajectory
from rlcs.group_filters import filtered_out, load_group_filter, max_response_tokens, no_truncated

ITEM = Item(id="x", domain="math", prompt="p", answer="1")


def rollout(finish: str = "stop", tokens: int = 3) -> Trajectory:
    return Trajectory("x", "r", list(range(tokens)), [0.0] * tokens, finish)


def test_the_built_in_filters():
    assert no_truncated(ITEM, [rollout(), rollout()]) is True
    assert no_truncated(ITEM, [rollout(), rollout("length")]) is False
    keep = load_group_filter("rlcs.group_filters:max_response_tokens", {"limit": 4})
    assert keep(ITEM, [rollout(tokens=4)]) is True
    assert keep(ITEM, [rollout(tokens=4), rollout(tokens=5)]) is False
    assert max_response_tokens(ITEM, [], limit=0) is True


@pytest.mark.parametrize(
    ("path", "options", "message"),
    [
        ("rlcs.group_filters", {}, "give it as 'package.module:function'"),
        ("no_such_pkg.filters:keep", {}, "cannot import 'no_such_pkg.filters'"),
        ("rlcs.group_filters:nothing", {}, "'rlcs.group_filters' has no 'nothing'"),
        ("rlcs.group_filters:Item", {}, "is not a function"),
        ("rlcs.group_filters:max_response_tokens", {}, "missing a required argument: 'limit'"),
        ("rlcs.group_filters:no_truncated", {"limit": 3}, "unexpected keyword argument 'limit'"),
    ],
)
def test_a_filter_that_cannot_be_used_is_refused_with_the_reason(path, options, message):
    with pytest.raises(ValueError, match="learner.grpo.group_filter") as e:
        load_group_filter(path, options)
    assert message in str(e.value)


def test_a_filter_must_answer_true_or_false():
    items = {"x": ITEM}
    assert filtered_out(no_truncated, items, {"x": [rollout("length")]}) == ["x"]
    with pytest.raises(TypeError, match=r"returned 1 for item 'x'; it must return True"):
        filtered_out(lambda item, rollouts: 1, items, {"x": [rollout()]})


def test_the_config_checks_the_path_shape():
    with pytest.raises(ValueError, match="group_filter"):
        Config.model_validate(
            {"model": {"tiny": "text"}, "learner": {"grpo": {"group_filter": "not a path"}}}
        )


@pytest.mark.parametrize("policy", ["rlcs", "uniform", "dapo_filter"])
def test_every_policy_selects_among_the_eligible_groups_only(policy):
    cur = Curriculum(np.zeros(8, np.int64), CurriculumConfig(policy=policy), domain_names=["m"])
    succ = np.array([2, 4, 1, 0, 2, 3, 2, 4])  # of 4 rollouts each
    sizes = np.full(8, 4)
    eligible = np.array([False, True, True, True, False, True, True, False])
    picked = cur.select(succ, sizes, 3, eligible)
    assert len(picked) <= 3 and eligible[picked].all()
    if policy == "rlcs":  # the most balanced of the eligible: 2/4 at 6, then 1/4 and 3/4
        assert picked.tolist() == [2, 5, 6]
    if policy == "dapo_filter":  # valid groups only (not all right or all wrong)
        assert picked.tolist() == [2, 5, 6]
    if policy == "uniform":
        assert picked.tolist() == [1, 2, 3]
    assert cur.select(succ, sizes, 3).tolist() != picked.tolist() or policy == "dapo_filter"


def test_rlcs_train_refuses_a_bad_filter_before_anything_starts(tmp_path):
    rlcs = str(Path(sys.executable).with_name("rlcs"))
    r = subprocess.run(
        [rlcs, "train", "configs/tiny-text.yaml", "--set", "learner.grpo.group_filter=nope.x:keep",
         "--set", f"run.root={tmp_path}"],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert r.returncode == 2
    assert "rlcs train: learner.grpo.group_filter 'nope.x:keep': cannot import 'nope.x'" in r.stderr
    assert not any(tmp_path.iterdir())
