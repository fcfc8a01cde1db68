"""A weight push that fails because a rollout worker restarted or died mid-push is retried on
the workers that are left; any other failure is raised. The roles are stand-ins: the real path
(a rollout worker killed mid-run) is tests/cluster/test_train.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from actors.weights import WeightSyncError
from cluster.rl_iteration import push_weights


class FlakyLearner:
    def __init__(self, failures: int):
        self.failures = failures
        self.pushed_to: list[list[str]] = []
        self.ids: list[list[int]] = []

    def push_weights(self, transport):
        self.pushed_to.append(list(transport.workers))
        self.ids.append(list(transport.worker_ids))
        if self.failures:
            self.failures -= 1
            raise WeightSyncError("rollout worker 1 failed to receive a bucket: restarting")
        return "report"


class Group:
    """Live workers before and after ``recover_workers`` (which drops or restarts some)."""

    def __init__(self, recovers: bool, live: list[str], after: list[str] | None = None):
        self.recovers = recovers
        self.live_workers = live
        self.after = after if after is not None else live
        self.calls = 0

    @property
    def alive(self) -> list[int]:  # the group's places of the live workers
        return [int(w[1:]) for w in self.live_workers]

    def recover_workers(self) -> bool:
        self.calls += 1
        self.live_workers = self.after
        return self.recovers


class Transport:
    def __init__(self, workers: list[str]):
        self.workers, self.worker_ids = workers, list(range(len(workers)))

    def use_workers(self, workers, ids):
        self.workers, self.worker_ids = list(workers), list(ids)


def test_push_is_retried_on_the_live_workers_after_a_worker_restart_or_death():
    learner = FlakyLearner(failures=1)
    roles = SimpleNamespace(
        learner=learner,
        rollout=Group(True, ["w0", "w1"], after=["w0"]),
        transport=Transport(["w0", "w1"]),
    )
    assert push_weights(roles) == "report"
    assert learner.pushed_to == [["w0", "w1"], ["w0"]]


def test_workers_the_group_dropped_are_not_pushed_to():
    learner = FlakyLearner(failures=0)
    roles = SimpleNamespace(
        learner=learner,
        rollout=Group(False, ["w1"]),
        transport=Transport(["w0", "w1"]),
    )
    assert push_weights(roles) == "report"
    assert learner.pushed_to == [["w1"]]
    assert learner.ids == [[1]]  # errors name it as the group does


def test_a_failure_no_worker_explains_is_raised():
    roles = SimpleNamespace(
        learner=FlakyLearner(failures=1), rollout=Group(False, ["w0", "w1"]),
        transport=Transport(["w0", "w1"]),
    )  # fmt: skip
    with pytest.raises(WeightSyncError, match="failed to receive a bucket"):
        push_weights(roles)
    assert roles.rollout.calls == 1


def test_retries_are_bounded():
    roles = SimpleNamespace(
        learner=FlakyLearner(failures=5), rollout=Group(True, ["w0"]),
        transport=Transport(["w0"]),
    )  # fmt: skip
    with pytest.raises(WeightSyncError):
        push_weights(roles, attempts=3)
    assert len(roles.learner.pushed_to) == 3
