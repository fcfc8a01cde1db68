"""``run.overlap_rollout``: the next iteration's rollouts are gathered while the learner trains.

The curriculum sampler is the real Ray actor; rollout, rewards and learner are stand-ins that
record, with the time, what they are asked to do (the learner's step takes 1 s, so that the
next batch's rollouts fall inside it). A whole overlapped run of the real roles is in
tests/cluster/test_train.py."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from cluster.rl_iteration import OverlappedIterations
from rlcs.config import Config
from rlcs.data import Item, Trajectory

RIGHT = "<think>t</think><answer><|begin_of_box|>4<|end_of_box|></answer>"
WRONG = "<think>t</think><answer><|begin_of_box|>5<|end_of_box|></answer>"


class Events:
    def __init__(self):
        self.rows: list[tuple[str, object]] = []
        self.lock = threading.Lock()

    def add(self, what: str, detail: object = None) -> None:
        with self.lock:
            self.rows.append((what, detail))

    def names(self) -> list[str]:
        return [w for w, _ in self.rows]


class Rollout:
    live_workers: list = []
    alive: list = []
    restarts = 0

    def __init__(self, events: Events, fail_at: int | None = None):
        self.events, self.fail_at = events, fail_at

    def generate(self, items: list[Item], step: int) -> list[Trajectory]:
        self.events.add("generate", step)
        if step == self.fail_at:
            raise RuntimeError("rollout worker lost")
        return [
            Trajectory(it.id, r, [1, 2], [-0.5, -0.5], "stop")
            for it in items
            for r in (RIGHT, WRONG)
        ]


class Learner:
    def __init__(self, events: Events):
        self.events = events
        self.batches: list[set[str]] = []

    def train_step(self, objective: str, batch: list[dict]) -> dict:
        self.events.add("learn start")
        time.sleep(1.0)
        self.batches.append({row["item_id"] for row in batch})
        self.events.add("learn end")
        return {"loss": 0.25}

    def push_weights(self, transport):
        self.events.add("push")
        return SimpleNamespace(seconds=0.0)


def score(requests, timeout_s):
    return [
        SimpleNamespace(reward=float("4" in r["response"]), format_ok=True, extracted=None,
                        error=None, detail=None)
        for r in requests
    ]  # fmt: skip


@pytest.fixture
def setup(ray_local, tmp_path):
    from actors.sampler import CurriculumSampler

    def make(fail_at: int | None = None):
        cfg = Config.model_validate(
            {
                "stage": "rl",
                "model": {"tiny": "text"},
                "rollout": {"n": 2},
                "curriculum": {"policy": "uniform"},
                "run": {"prompts_per_iteration": 2, "overlap_rollout": True},
            }
        )
        items = {
            f"q{i}": Item(id=f"q{i}", domain="math", prompt="2+2", answer="4") for i in range(8)
        }
        sampler = CurriculumSampler.remote(
            str(tmp_path), items=list(items.values()), config=cfg.curriculum
        )
        events = Events()
        roles = SimpleNamespace(
            sampler=sampler, rollout=Rollout(events, fail_at), learner=Learner(events),
            rewards=SimpleNamespace(retries=0, score=score),
            transport=SimpleNamespace(workers=[], use_workers=lambda workers, ids: None), group_filter=None,
        )  # fmt: skip
        return OverlappedIterations(cfg, roles, items), roles, events

    return make


def test_the_next_rollouts_are_gathered_while_the_learner_trains(setup):
    loop, roles, events = setup()
    first = loop.run(0, prefetch=True)
    assert loop.holds_batch
    # iteration 1's rollouts were generated while update 0 ran (its 1 s step began when the
    # driver handed it the batch, before it gathered), and the weights were pushed only once
    # both were done
    names = events.names()
    assert sorted(names[1:3]) == ["generate", "learn start"] and names[3:] == ["learn end", "push"]
    assert [d for w, d in events.rows if w == "generate"] == [0, 1]
    assert first.metrics["loss"] == 0.25 and first.metrics["time/learn"] >= 1.0
    assert "time/learn_wait" in first.metrics
    second = loop.run(1, prefetch=False)
    assert not loop.holds_batch
    # iteration 1 trained on the batch gathered during iteration 0, without generating again
    assert events.names()[5:] == ["learn start", "learn end", "push"]
    assert len(roles.learner.batches) == 2 and roles.learner.batches[0] != roles.learner.batches[1]
    assert second.metrics["curriculum/selected"] == 2.0
    loop.close()


def test_a_failed_prefetch_waits_for_the_learner_and_pushes_nothing(setup):
    loop, roles, events = setup(fail_at=1)
    with pytest.raises(RuntimeError, match="rollout worker lost"):
        loop.run(0, prefetch=True)
    # the update ran to its end before the error came out; no weights went to the engines
    names = events.names()
    assert sorted(names[1:3]) == ["generate", "learn start"] and names[3:] == ["learn end"]
    assert not loop.holds_batch
    loop.close()


def test_a_held_batch_called_for_by_another_iteration_stays_held(setup):
    loop, roles, events = setup()
    loop.run(0, prefetch=True)
    with pytest.raises(RuntimeError, match="iteration 2 called with 1's rollouts held"):
        loop.run(2, prefetch=False)
    assert loop.holds_batch  # its outcomes are in the curriculum: it is not dropped
    loop.run(1, prefetch=False)
    assert not loop.holds_batch and len(roles.learner.batches) == 2
    loop.close()


def test_overlap_and_sleeping_engines_exclude_each_other():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="sleep_between_iterations"):
        Config.model_validate(
            {
                "model": {"tiny": "text"},
                "rollout": {"sleep_between_iterations": True},
                "run": {"overlap_rollout": True},
            }
        )
