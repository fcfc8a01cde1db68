"""The reward-actor pool: N Ray actors, each wrapping a ``rewards.RewardScorer`` (its own pool
of killable verifier processes), load-balanced shard by shard.

Every item gets exactly one result. An actor that dies is restarted by Ray (``max_restarts``);
the shards it had in flight are retried once on whichever actor is free, and an item whose
shard fails twice gets ``error="actor"`` instead of hanging the driver.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from rewards import RewardScorer, ScoreResult

_ACTOR_FAILURES = (ActorDiedError, ActorUnavailableError, RayActorError)


class RewardActorImpl:
    """One Ray actor's state: a scorer whose worker processes live as long as the actor."""

    def __init__(
        self,
        processes: int = 1,
        timeout_s: float = 5.0,
        defaults: Mapping[str, Any] | None = None,
        custom_domains: Mapping[str, str] | None = None,
    ) -> None:
        self.scorer = RewardScorer(
            processes, timeout_s=timeout_s, defaults=defaults, custom_domains=custom_domains
        )

    def score_batch(self, items: list[Any], timeout_s: float | None = None) -> list[ScoreResult]:
        return self.scorer.score_batch(items, timeout_s=timeout_s)

    def counters(self) -> dict[str, dict[str, int]]:
        return self.scorer.counters()

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "worker_pids": self.scorer.pool.worker_pids}


RewardActor = ray.remote(RewardActorImpl)


def options_from_config(cfg: Any) -> dict[str, Any]:
    """Default verifier options from an ``rlcs.config.RewardConfig`` (duck-typed: ``actors``
    may import ``rlcs``, but this keeps the pool usable with a plain object too): the
    verifiers' own rules, which held-out evaluation and grading score by."""
    return {
        "format": cfg.format,
        "rel_tol": cfg.math_rel_tol,
        "iou_threshold": cfg.iou_threshold,
        "partial_credit": cfg.gui_partial_credit,
        "max_repetition": cfg.max_repetition,
        "max_language_mix": cfg.max_language_mix,
    }


def training_options(cfg: Any) -> dict[str, Any]:
    """The per-item options a run's rollouts are scored with over the pool's defaults
    (``options_from_config``): the training-only ``position_shaping`` when it is on."""
    shaping = getattr(cfg, "position_shaping", 0.0)
    return {"position_shaping": shaping} if shaping else {}


class RewardActorPool:
    """Scores batches on several reward actors at once."""

    def __init__(
        self,
        actors: Sequence[Any],
        *,
        max_shard: int = 512,
        in_flight: int = 2,
        max_attempts: int = 3,
    ) -> None:
        if not actors:
            raise ValueError("a reward pool needs at least one actor")
        self.actors = list(actors)
        self.max_shard = max_shard
        self.in_flight = in_flight
        self.max_attempts = max(1, max_attempts)
        self.retries = 0

    @classmethod
    def create(
        cls,
        num_actors: int = 2,
        processes_per_actor: int = 1,
        *,
        timeout_s: float = 5.0,
        defaults: Mapping[str, Any] | None = None,
        custom_domains: Mapping[str, str] | None = None,
        max_restarts: int = 3,
        actor_options: Mapping[str, Any] | None = None,
    ) -> RewardActorPool:
        opts = {"num_cpus": 1, "max_restarts": max_restarts, "max_task_retries": 0}
        opts.update(actor_options or {})
        actors = [
            RewardActor.options(**opts).remote(
                processes_per_actor, timeout_s, dict(defaults or {}), dict(custom_domains or {})
            )
            for _ in range(num_actors)
        ]
        return cls(actors)

    @classmethod
    def from_config(cls, cfg: Any, **kwargs: Any) -> RewardActorPool:
        """Build from ``rlcs.config.RewardConfig``."""
        return cls.create(
            cfg.num_actors,
            cfg.processes_per_actor,
            timeout_s=cfg.timeout_s,
            defaults=options_from_config(cfg),
            custom_domains=cfg.custom_domains,
            **kwargs,
        )

    def score(self, items: Sequence[Any], timeout_s: float | None = None) -> list[ScoreResult]:
        """Score ``items`` (dicts or tuples, as ``rewards.score_batch``); results in order.

        A shard whose actor dies is retried, on another actor where there is one (a restarting
        actor can fail a call sent to it before Ray notices the death); a shard that fails
        ``max_attempts`` times gets ``error="actor"`` results rather than being lost."""
        n = len(items)
        results: list[ScoreResult | None] = [None] * n
        size = max(1, min(self.max_shard, math.ceil(n / (len(self.actors) * 4))))
        # (shard, attempts so far, the actor it last failed on or -1)
        queue: deque[tuple[range, int, int]] = deque(
            (range(i, min(n, i + size)), 0, -1) for i in range(0, n, size)
        )
        running: dict[Any, tuple[int, range, int]] = {}
        load = [0] * len(self.actors)
        while queue or running:
            while (placed := self._place(queue, load)) is not None:
                k, actor = placed
                shard, attempt, _ = queue[k]
                del queue[k]
                ref = self.actors[actor].score_batch.remote([items[i] for i in shard], timeout_s)
                running[ref] = (actor, shard, attempt)
                load[actor] += 1
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                actor, shard, attempt = running.pop(ref)
                load[actor] -= 1
                try:
                    for i, res in zip(shard, ray.get(ref), strict=True):
                        results[i] = res
                except _ACTOR_FAILURES as e:
                    if attempt + 1 < self.max_attempts:
                        self.retries += 1
                        queue.append((shard, attempt + 1, actor))
                    else:
                        reason = f"reward actor failed {attempt + 1} times: {type(e).__name__}"
                        for i in shard:
                            results[i] = ScoreResult(0.0, False, None, "actor", reason)
        return results  # type: ignore[return-value]

    def _place(
        self, queue: Sequence[tuple[range, int, int]], load: list[int]
    ) -> tuple[int, int] | None:
        """``(position in queue, actor)`` of the first waiting shard some actor can take now.

        A retry that must avoid the only actor with room waits without holding back the shards
        queued behind it."""
        if min(load) >= self.in_flight:
            return None
        for k, (_, _, avoid) in enumerate(queue):
            actor = self._pick(load, avoid)
            if actor is not None:
                return k, actor
        return None

    def _pick(self, load: list[int], avoid: int) -> int | None:
        """The least-loaded actor with room, other than ``avoid`` unless it is the only one."""
        room = [a for a in range(len(load)) if load[a] < self.in_flight]
        others = [a for a in room if a != avoid] if len(load) > 1 else room
        return min(others, key=load.__getitem__) if others else None

    def counters(self) -> list[dict[str, dict[str, int]]]:
        return ray.get([a.counters.remote() for a in self.actors])

    def shutdown(self) -> None:
        for a in self.actors:
            ray.kill(a, no_restart=True)
        self.actors = []
