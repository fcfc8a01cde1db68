"""Held-out evaluation: greedy answers from a rollout worker, scored by the verifiers."""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from statistics import fmean
from typing import Any

import ray

from actors.rollout.worker import RolloutWorker
from cluster.placement import thread_env
from rlcs.config import RolloutConfig
from rlcs.data import Item


def summarize(per: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per-domain pass rate (reward 1) and mean reward, and their mean over domains as "all"."""
    out = {
        d: {"pass_rate": fmean(x >= 1.0 for x in v), "reward": fmean(v)}
        for d, v in sorted(per.items())
    }
    out["all"] = {
        "pass_rate": fmean(v["pass_rate"] for v in out.values()),
        "reward": fmean(v["reward"] for v in out.values()),
    }
    return out


def evaluate_live(roles: Any, items: list[Item], timeout_s: float) -> dict[str, dict[str, float]]:
    """The same figures from a running RL loop: greedy answers from its own rollout workers
    (which hold the learner's latest weights), scored on its reward pool."""
    from cluster.rl_iteration import score

    trajs = roles.rollout.generate(items, n=1, temperature=0.0)
    by_id = {it.id: it for it in items}
    score(roles.rewards, trajs, by_id, timeout_s)
    per: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        per[by_id[t.item_id].domain].append(float(t.reward))
    return summarize(per)


@contextmanager
def rollout_worker(model_path: str | Path, rollout: RolloutConfig, num_cpus: float):
    """A rollout worker of its own for ``model_path`` that reserves ``num_cpus`` and runs that
    many threads (rounded, at least one); killed on leaving, also on failure.

    Needs a Ray connection (``cluster.train.connect_ray``): left to itself, Ray would join
    whatever cluster is running on this machine, or start one with every core.
    """
    if not ray.is_initialized():
        raise RuntimeError(
            "held-out evaluation needs a Ray connection: call cluster.train.connect_ray(cfg) "
            "(or ray.init) first, so that it runs on the cluster you chose"
        )
    worker = RolloutWorker.options(num_cpus=num_cpus, runtime_env=thread_env(num_cpus)).remote(
        str(model_path), rollout.model_dump()
    )
    try:
        yield worker
    finally:
        ray.kill(worker)


def score_trajectories(trajs: list, by_id: dict[str, Item], timeout_s: float | None = None):
    """The verifiers' ``ScoreResult`` of each trajectory against its item's answer, in order."""
    import rewards

    return rewards.score_batch(
        [{"domain": by_id[t.item_id].domain, "response": t.response, "answer": by_id[t.item_id].answer}
         for t in trajs],
        timeout_s=timeout_s,
    )  # fmt: skip


def evaluate(
    model_path: str | Path, items: list[Item], rollout: RolloutConfig, num_cpus: float = 1.0
) -> dict[str, dict[str, float]]:
    """Per-domain pass rate (reward 1) and mean reward of one greedy answer per item, from a
    worker that reserves ``num_cpus`` and runs that many threads (rounded, at least one)."""
    cfg = rollout.model_copy(update={"n": 1, "temperature": 0.0})
    with rollout_worker(model_path, cfg, num_cpus) as worker:
        trajs = ray.get(worker.generate.remote(items, n=1, step=0, temperature=0.0))
    by_id = {it.id: it for it in items}
    per: dict[str, list[float]] = defaultdict(list)
    for t, r in zip(trajs, score_trajectories(trajs, by_id), strict=True):
        per[by_id[t.item_id].domain].append(r.reward)
    return summarize(per)
