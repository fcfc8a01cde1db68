"""What of an iteration's scored groups reaches the curriculum and the learner.

A rollout whose reward could not be computed (here a verifier that hangs past its timeout) is
left out of its group: the curriculum's evidence and the GRPO update see only the scored
rollouts, and the metrics count it. A group filter (learner.grpo.group_filter) bars groups from
training while they still count as evidence. The sampler is the real Ray actor and the rewards come from
the real scorer, whose worker is killed at the timeout; rollout and learner are stand-ins that
hand over fixed responses and record what they are asked to train on."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlcs.config import Config
from rlcs.data import Item, Trajectory

ADVERSARIAL = Path(__file__).resolve().parents[1] / "rewards"
if str(ADVERSARIAL) not in sys.path:  # the scorer's workers import the hanging verifier by path
    sys.path.insert(0, str(ADVERSARIAL))

OK = "<think>t</think><answer><|begin_of_box|>ok<|end_of_box|></answer>"
HANG = "<think>t</think><answer><|begin_of_box|>hang<|end_of_box|></answer>"
NO_TAGS = "ok"  # a format failure: a wrong answer, scored 0 and kept
RESPONSES = {"a": [OK, NO_TAGS, HANG], "b": [HANG, HANG, HANG]}
CUT = {"c"}  # items whose first rollout ran into the answer budget (finish_reason "length")


@pytest.fixture(scope="module")
def scorer():
    from rewards import RewardScorer

    s = RewardScorer(1, timeout_s=0.5, custom_domains={"hang": "adversarial_verifiers:Hang"})
    yield s
    s.close()


EVENTS: list[str] = []  # what the stand-ins were asked to do, in order


class Rollout:
    live_workers: list = []
    alive: list = []
    restarts = 0

    def __init__(self, responses: dict[str, list[str]]):
        self.responses = responses

    def sleep(self) -> None:
        EVENTS.append("sleep")

    def generate(self, items: list[Item], step: int) -> list[Trajectory]:
        return [
            Trajectory(
                it.id, r, [1, 2], [-0.5, -0.5], "length" if it.id in CUT and k == 0 else "stop"
            )
            for it in items
            for k, r in enumerate(self.responses[it.id])
        ]


class Learner:
    def __init__(self):
        self.batches: list[list[dict]] = []

    def train_step(self, objective: str, batch: list[dict]) -> dict:
        EVENTS.append("learn")
        self.batches.append(batch)
        return {"loss": 0.0}

    def push_weights(self, transport):
        EVENTS.append("push")
        return SimpleNamespace(seconds=0.0)


def one_iteration(
    ray_local, scorer, tmp_path, unscorable: str, responses=RESPONSES, policy="uniform", run=None,
    rollout=None, **grpo,
):  # fmt: skip
    from actors.sampler import CurriculumSampler
    from cluster.rl_iteration import run_iteration
    from rlcs.curriculum.persistence import load_curriculum
    from rlcs.group_filters import load_group_filter

    cfg = Config.model_validate(
        {
            "stage": "rl",
            "model": {"tiny": "text"},
            "rollout": {"n": 3, **(rollout or {})},
            "reward": {"unscorable": unscorable, "timeout_s": 0.5},
            "curriculum": {"policy": policy},
            "learner": {"grpo": grpo},
            "run": {
                "prompts_per_iteration": len(responses),
                "samples_per_iteration": len(responses),
                **(run or {}),
            },
        }
    )
    items = {i: Item(id=i, domain="hang", prompt="p") for i in responses}
    sampler = CurriculumSampler.remote(
        str(tmp_path), items=list(items.values()), config=cfg.curriculum
    )
    rewards = SimpleNamespace(retries=0, score=lambda reqs, timeout_s: scorer.score_batch(
        [(r["domain"], r["response"], r["answer"], {}) for r in reqs], timeout_s=timeout_s
    ))  # fmt: skip
    learner = Learner()
    roles = SimpleNamespace(
        sampler=sampler, rollout=Rollout(responses), rewards=rewards, learner=learner,
        transport=SimpleNamespace(workers=[], use_workers=lambda workers, ids: None),
        group_filter=load_group_filter(grpo["group_filter"]) if grpo else None,
    )  # fmt: skip
    result = run_iteration(cfg, roles, items, iteration=1)
    ray_local.get(sampler.save.remote())
    cur = load_curriculum(tmp_path, attach=False)
    attempts = dict(zip(cur.id_of(range(cur.num_items)), cur.attempts.tolist(), strict=True))
    return result, learner.batches, attempts


def test_unscorable_rollouts_leave_the_update_and_the_curriculum(
    ray_local, scorer, tmp_path, caplog
):
    with caplog.at_level("WARNING", logger="cluster.rl_iteration"):
        result, batches, attempts = one_iteration(ray_local, scorer, tmp_path, "drop")
    assert (
        "iteration 2: 4 of 6 rollouts could not be scored (timeout 4); left out of "
        "training (reward.unscorable: drop)" in caplog.text
    )
    # item a keeps its two scored rollouts; item b, all timeouts, is not reported at all
    assert attempts == {"a": 2, "b": 0}
    [batch] = batches
    assert [(t["item_id"], t["response"], t["reward"]) for t in batch] == [
        ("a", OK, 1.0),
        ("a", NO_TAGS, 0.0),
    ]
    m = result.metrics
    assert m["errors/reward"] == 4 and m["errors/dropped_rollouts"] == 4
    assert m["reward/mean"] == 0.5 and m["errors/format"] == 1
    assert m["curriculum/groups"] == 1
    flags = [(s["item_id"], s["unscorable"], s["selected"]) for s in result.samples]
    assert (
        flags
        == [("a", False, True), ("a", False, True), ("a", True, False)] + [("b", True, False)] * 3
    )
    assert all(s["reward_detail"]["error"] == "timeout" for s in result.samples if s["unscorable"])


def test_degenerate_thinking_is_counted_apart_from_other_format_errors(ray_local, scorer, tmp_path):
    loop = "<think>" + "so the answer is ok. " * 20 + "</think>"
    looped = loop + "<answer><|begin_of_box|>ok<|end_of_box|></answer>"
    result, _, _ = one_iteration(ray_local, scorer, tmp_path, "drop", {"a": [OK, NO_TAGS, looped]})
    m = result.metrics
    assert (m["errors/format"], m["errors/degenerate"], m["reward/mean"]) == (2, 1, 1 / 3)
    # the saved rollouts say why
    (_, _, sample) = result.samples
    assert sample["reward_detail"]["detail"].startswith("repetitive thinking: ")


def test_unscorable_zero_scores_them_as_wrong_answers(ray_local, scorer, tmp_path):
    result, batches, attempts = one_iteration(ray_local, scorer, tmp_path, "zero")
    assert attempts == {"a": 3, "b": 3}
    [batch] = batches
    assert sorted(t["reward"] for t in batch if t["item_id"] == "a") == [0.0, 0.0, 1.0]
    assert result.metrics["errors/reward"] == 4 and result.metrics["errors/dropped_rollouts"] == 0
    assert result.metrics["reward/mean"] == pytest.approx(1 / 6)


def test_a_group_filter_bars_groups_from_training_not_from_the_curriculum(
    ray_local, scorer, tmp_path
):
    responses = {"a": [OK, NO_TAGS], "c": [OK, NO_TAGS], "d": [OK, OK]}
    result, batches, attempts = one_iteration(
        ray_local, scorer, tmp_path, "drop", responses,
        group_filter="rlcs.group_filters:no_truncated",
    )  # fmt: skip
    assert attempts == {"a": 2, "c": 2, "d": 2}  # c's cut-off group is still evidence
    [batch] = batches
    assert sorted({t["item_id"] for t in batch}) == ["a", "d"]
    assert result.metrics["curriculum/filtered"] == 1
    assert result.metrics["curriculum/selected"] == 2


# two valid groups (a right and a wrong answer) among six items
TOPUP = {"a": [OK, NO_TAGS], "b": [OK, OK], "c": [OK, NO_TAGS], "d": [NO_TAGS, NO_TAGS],
         "e": [OK, OK], "f": [NO_TAGS, NO_TAGS]}  # fmt: skip


@pytest.mark.parametrize("rounds", [3, 0])
def test_dapo_filter_tops_up_with_fresh_prompts_until_the_batch_is_full(
    ray_local, scorer, tmp_path, rounds
):
    result, batches, attempts = one_iteration(
        ray_local, scorer, tmp_path, "drop", TOPUP, policy="dapo_filter",
        run={"prompts_per_iteration": 2, "topup_rounds": rounds},
    )  # fmt: skip
    m = result.metrics
    drawn = [i for i, n in attempts.items() if n]
    first = sorted({s["item_id"] for s in result.samples[:4]})  # the first round's two items
    trained = {t["item_id"] for b in batches for t in b}
    if rounds:  # more rounds until both valid groups are in hand, no item drawn twice
        assert set(first) != {"a", "c"}  # the seeded first draw leaves a valid group to find
        assert trained == {"a", "c"} and m["curriculum/generation_rounds"] >= 2
    else:
        assert drawn == first and m["curriculum/generation_rounds"] == 1
        assert trained == {i for i in first if i in ("a", "c")}
    assert all(attempts[i] == 2 for i in drawn)  # each drawn item reported once, whole
    assert m["curriculum/groups"] == len(drawn)
    assert m["curriculum/selected"] == len(trained)


def test_engines_sleep_while_the_learner_trains_when_asked(ray_local, scorer, tmp_path):
    EVENTS.clear()
    one_iteration(ray_local, scorer, tmp_path / "a", "drop")
    assert EVENTS == ["learn", "push"]
    EVENTS.clear()
    one_iteration(ray_local, scorer, tmp_path / "b", "drop",
                  rollout={"sleep_between_iterations": True})  # fmt: skip
    assert EVENTS == ["sleep", "learn", "push"]  # the push wakes the engines


def test_the_engines_sleep_is_timed_as_a_phase_not_as_overhead(
    ray_local, scorer, tmp_path, monkeypatch
):
    """Putting the engines to sleep takes time of its own (vLLM frees its memory): it is logged
    as time/sleep, and time/overhead_share is what no phase explains."""
    monkeypatch.setattr(Rollout, "sleep", lambda self: time.sleep(0.5))
    result, _, _ = one_iteration(ray_local, scorer, tmp_path, "drop",
                                 rollout={"sleep_between_iterations": True})  # fmt: skip
    m = result.metrics
    assert m["time/sleep"] >= 0.5
    phases = sum(m[f"time/{p}"] for p in ("generate", "reward", "sampler", "learn", "sync"))
    unexplained = m["time/iteration"] - phases - m["time/sleep"]
    assert m["time/overhead_share"] == pytest.approx(unexplained / m["time/iteration"])


def test_rollouts_that_could_not_be_scored_are_not_counted_as_format_errors(
    ray_local, scorer, tmp_path, monkeypatch
):
    """A reward actor that failed three times answers with format_ok False, as do bad requests:
    those rollouts were never checked, so they count in errors/reward, not errors/format (which
    counts wrong answers)."""
    from rewards.base import ScoreResult

    real = scorer.score_batch

    def actor_failed(items, timeout_s=None):
        return [
            ScoreResult(0.0, False, None, "actor", "reward actor failed 3 times: RayActorError")
            if r.error == "timeout"
            else r
            for r in real(items, timeout_s=timeout_s)
        ]

    monkeypatch.setattr(scorer, "score_batch", actor_failed)
    result, _, _ = one_iteration(ray_local, scorer, tmp_path, "drop")
    m = result.metrics
    assert m["errors/reward"] == 4 and m["errors/dropped_rollouts"] == 4
    assert m["errors/format"] == 1  # NO_TAGS alone
    assert m["errors/degenerate"] == 0
