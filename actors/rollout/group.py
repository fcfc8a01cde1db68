"""``RolloutGroup``: several rollout workers behind one ``generate(items)`` call.

Items are split across workers by expected prompt cost, longest first, so one worker does not
get all the long (image-heavy) prompts. If a worker dies mid-batch, the group says which one
and how many items it held, and gives those items to the surviving workers; the batch is only
lost when no worker is left, and then the error names every item that was not generated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

from actors.rank_calls import own_error
from rlcs.data import Item, Trajectory
from rlcs.images import inline_images
from rlcs.prompts import balance, expected_cost

log = logging.getLogger(__name__)


class RolloutError(RuntimeError):
    """A batch that could not be completed; ``item_ids`` are those without trajectories."""

    def __init__(self, message: str, item_ids: list[str]):
        super().__init__(message)
        self.item_ids = item_ids


class RolloutGroup:
    """Workers started with ``max_restarts`` come back after a crash: the group waits for the
    restart, calls ``on_restart`` (the driver pushes the current weights there, since a fresh
    engine holds the base model), and gives it the dead worker's items again."""

    def __init__(
        self,
        workers: list[Any],
        on_restart: Callable[[], Any] | None = None,
        restart_timeout_s: float = 300.0,
        ship_images: bool = False,
    ):
        if not workers:
            raise ValueError("a rollout group needs at least one worker")
        self.workers = list(workers)
        self.alive = list(range(len(workers)))
        self.failures: list[str] = []
        self.restarts = 0
        self.on_restart = on_restart
        self.restart_timeout_s = restart_timeout_s
        self.ship_images = ship_images
        self._pids: dict[int, int] = {}

    @classmethod
    def create(
        cls,
        model_path: str,
        rollout: Any,
        num_workers: int | None = None,
        num_cpus: float = 1,
        num_gpus: float = 0,
        **kwargs: Any,
    ) -> RolloutGroup:
        """Start ``num_workers`` (default ``rollout.num_workers``) workers and wait until ready."""
        from actors.rollout.worker import RolloutWorker, worker_options
        from rlcs.config import RolloutConfig

        cfg = (
            rollout if isinstance(rollout, RolloutConfig) else RolloutConfig.model_validate(rollout)
        )
        n = num_workers or cfg.num_workers
        workers = [
            RolloutWorker.options(
                **worker_options(cfg, num_cpus=num_cpus, num_gpus=num_gpus)
            ).remote(model_path, cfg.model_dump(), worker_index=i, **kwargs)
            for i in range(n)
        ]
        ray.get([w.ready.remote() for w in workers])
        return cls(workers)

    def generate(self, items: list[Item | dict[str, Any]], **kwargs: Any) -> list[Trajectory]:
        """Trajectories for every item, grouped by item in input order. With ``ship_images``
        the images go to the workers inside the items (read here, on the driver's node)."""
        items = [it if isinstance(it, Item) else Item.model_validate(it) for it in items]
        if self.ship_images:
            items = [inline_images(it) for it in items]
        done: dict[int, list[Trajectory]] = {}
        todo = list(range(len(items)))
        self._check_restarts()
        while todo:
            if not self.alive:
                lost = [items[i].id for i in todo]
                raise RolloutError(
                    f"all {len(self.workers)} rollout workers died; {len(lost)} items not "
                    f"generated: {lost[:10]}; failures: {self.failures}",
                    lost,
                )
            groups = balance([expected_cost(items[i]) for i in todo], len(self.alive))
            running = {}
            for w, group in zip(self.alive, groups, strict=True):
                if group:
                    idx = [todo[g] for g in group]
                    ref = self.workers[w].generate.remote([items[i] for i in idx], **kwargs)
                    running[ref] = (w, idx)
            todo = []
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                w, idx = running.pop(ready[0])
                try:
                    trajs = ray.get(ready[0])
                except (ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError) as e:
                    if isinstance(e, RayTaskError) and not _engine_died(e):
                        raise
                    todo.extend(idx)
                    if not isinstance(e, RayTaskError) and self._restarted(w):
                        msg = (
                            f"rollout worker {w} died mid-batch holding {len(idx)} items "
                            f"({_reason(e)}); Ray restarted it and its items run again"
                        )
                        log.error(msg)
                        self.failures.append(msg)
                        continue
                    msg = (
                        f"rollout worker {w} died mid-batch holding {len(idx)} items "
                        f"({_reason(e)}); re-queued them on the surviving workers"
                    )
                    log.error(msg)
                    self.failures.append(msg)
                    self.alive.remove(w)
                    if isinstance(e, RayTaskError):  # the actor lives on without an engine
                        ray.kill(self.workers[w])
                    continue
                by_item: dict[str, list[Trajectory]] = {}
                for t in trajs:
                    by_item.setdefault(t.item_id, []).append(t)
                for i in idx:
                    done[i] = by_item.get(items[i].id, [])
        return [t for i in range(len(items)) for t in done[i]]

    def _poll_pids(self) -> tuple[list[int], list[int], list[int]]:
        """Wait out restarts in progress and record every live worker's pid; return the workers
        that restarted (new pid), that are gone, and that had no pid on record yet."""
        restarted, dead, first = [], [], []
        for w in list(self.alive):
            pid = self._pid(w)
            if pid is None:
                dead.append(w)
                continue
            prev = self._pids.get(w)
            self._pids[w] = pid
            if prev is None:
                first.append(w)
            elif prev != pid:
                restarted.append(w)
        self.restarts += len(restarted)
        return restarted, dead, first

    def _note(self, msg: str) -> None:
        log.error(msg)
        self.failures.append(msg)

    def _check_restarts(self) -> None:
        """A worker restarted between calls (a new process) gets the current weights first."""
        restarted, _, _ = self._poll_pids()
        if restarted:
            self._note(
                f"rollout workers {restarted} restarted since the last batch; pushing current weights"
            )
            if self.on_restart is not None:
                self.on_restart()

    def recover_workers(self) -> bool:
        """After a failed weight push: wait out restarts in progress and drop dead workers.

        Returns whether any worker restarted, died or could not be compared (no pid on record
        yet), i.e. whether pushing again to ``live_workers`` may succeed. Raises
        ``RolloutError`` when none is left."""
        restarted, dead, first = self._poll_pids()
        for w in restarted:
            self._note(f"rollout worker {w} restarted during a weight push; pushing again")
        for w in dead:
            self.alive.remove(w)
            self._note(f"rollout worker {w} died during a weight push; continuing without it")
        if not self.alive:
            raise RolloutError(f"all {len(self.workers)} rollout workers died", [])
        return bool(restarted or dead or first)

    def _pid(self, w: int) -> int | None:
        """Worker ``w``'s process id, waiting out a restart in progress; None if it is gone."""
        deadline = time.monotonic() + self.restart_timeout_s
        while True:
            try:
                return ray.get(self.workers[w].info.remote(), timeout=self.restart_timeout_s)["pid"]
            except ActorUnavailableError:
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.5)  # restarting: Ray answers "unavailable" until it is back
            except (ActorDiedError, RayActorError, ray.exceptions.GetTimeoutError):
                return None

    def _restarted(self, w: int) -> bool:
        """Whether worker ``w`` came back (Ray's ``max_restarts``), with fresh weights pushed."""
        pid = self._pid(w)
        if pid is None:
            return False
        self.restarts += 1
        self._pids[w] = pid
        if self.on_restart is not None:
            self.on_restart()
        return True

    def sleep(self) -> None:
        ray.get([self.workers[w].sleep.remote() for w in self.alive])

    def wake_up(self) -> None:
        ray.get([self.workers[w].wake_up.remote() for w in self.alive])

    @property
    def live_workers(self) -> list[Any]:
        return [self.workers[w] for w in self.alive]


def _engine_died(e: RayTaskError) -> bool:
    """vLLM's engine process died under a live actor: as good as a dead worker."""
    return type(own_error(e)).__name__ == "EngineDeadError" or "EngineDeadError" in str(e)


def _reason(e: Exception) -> str:
    return "its vLLM engine died" if isinstance(e, RayTaskError) else e.__class__.__name__
