"""One ``Learner`` Ray actor per data-parallel rank, forming one torch.distributed group.

The group does the driver's share of a step (tokenising, advantages, token balancing across
ranks, packing; see ``actors.learner_batches``) and fans each rank its ``RankStep``. Rank 0's
node address and a free port on it are the rendezvous point: 127.0.0.1 on one machine, the
rank-0 node's IP on a cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

from actors.learner import Learner
from actors.learner_batches import prepare_step
from actors.learner_model import load_processors
from actors.rank_calls import RanksStuck, gather_ranks
from rlcs.config import Config


class LearnerGroup:
    """Creates the ranks and calls them together; every method is collective."""

    def __init__(
        self,
        config: Config,
        model_path: str | Path,
        num_cpus_per_rank: float = 1,
        num_gpus_per_rank: float | None = None,
        placement_group: Any = None,
        schedule_timeout_s: float = 120.0,
        runtime_env: dict[str, Any] | None = None,
        wait: bool = True,
        failure_grace_s: float = 60.0,
    ):
        """Starts the ranks. With ``wait`` (the default) it returns once they have joined their
        process group; ``wait=False`` returns at once, so that the caller can start other actors
        while the ranks start, and must call ``wait_ready`` before using the group.

        When a rank fails a call, the others get ``failure_grace_s`` to finish it too; ranks
        still busy then are waiting for the failed one in a collective, which can never
        complete, so the group is shut down and the call raises (``gather_ranks``)."""
        self.config = config
        self.schedule_timeout_s = schedule_timeout_s
        self.failure_grace_s = failure_grace_s
        self.shut_down_because: str | None = None
        self.model_path = str(model_path)
        n = config.learner.num_ranks
        # the placement's share of a bundle (half of it when colocated with a rollout engine);
        # one GPU a rank on CUDA when no placement says
        gpus = num_gpus_per_rank
        if gpus is None:
            gpus = 1 if config.cluster.device == "cuda" else 0
        actor_cls = ray.remote(Learner)
        self.actors = []
        for rank in range(n):
            opts: dict[str, Any] = dict(num_cpus=num_cpus_per_rank, num_gpus=gpus)
            if runtime_env:
                opts["runtime_env"] = runtime_env
            if placement_group is not None:
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group, placement_group_bundle_index=rank
                )
            self.actors.append(actor_cls.options(**opts).remote(config, self.model_path, rank, n))
        self._resources = f"{num_cpus_per_rank} CPU, {gpus} GPU each"
        self.ready = False
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait until every rank is scheduled (``schedule_timeout_s``) and has joined the
        process group; then the group is ready for steps. Idempotent."""
        if self.ready:
            return
        self._refuse_if_shut_down()
        n = len(self.actors)
        try:
            ray.get([a.ping.remote() for a in self.actors], timeout=self.schedule_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.shutdown()
            raise RuntimeError(
                f"{n} learner ranks ({self._resources}) could not all be scheduled within "
                f"{self.schedule_timeout_s:.0f}s; is the cluster big enough?"
            ) from None
        addr, port = ray.get(self.actors[0].address.remote())
        self._gather([a.init.remote(addr, port) for a in self.actors], "joining the process group")
        self.tokenizer, self.processor = load_processors(self.model_path)
        self.ready = True

    def _refuse_if_shut_down(self) -> None:
        if self.shut_down_because:
            raise RuntimeError(f"the learner group was shut down: {self.shut_down_because}")

    def _check_ready(self) -> None:
        self._refuse_if_shut_down()
        if not self.ready:
            raise RuntimeError("LearnerGroup(wait=False): call wait_ready() before using it")

    def _gather(self, refs: list[Any], what: str) -> list[Any]:
        try:
            return gather_ranks(refs, what, self.failure_grace_s)
        except RanksStuck as e:
            self.shutdown(reason=str(e))
            raise

    def _all(self, method: str, *args: Any) -> list[Any]:
        self._check_ready()
        return self._gather([getattr(a, method).remote(*args) for a in self.actors], method)

    def train_step(
        self, stage: str | None, batch: list[Any], micro_batch: int | None = None
    ) -> dict[str, float]:
        """One call of ``stage`` (default: the config's) on ``batch``; metrics summed over ranks
        where they are sums (loss, tokens, clipped), else rank 0's."""
        self._check_ready()
        return self.run_prepared(self.prepare(stage, batch, micro_batch), stage)

    def prepare(
        self, stage: str | None, batch: list[Any], micro_batch: int | None = None
    ) -> list[Any]:
        """The driver's share of a ``train_step``: ``batch`` as each rank's work. It calls no
        rank, so it can run while the ranks train on the step before (``run_supervised``)."""
        return prepare_step(
            stage or self.config.stage,
            batch,
            self.config,
            self.tokenizer,
            self.processor,
            micro_batch,
        )

    def run_prepared(self, steps: list[Any], stage: str | None = None) -> dict[str, float]:
        """The ranks' share of a ``train_step``: each runs its work of ``prepare``."""
        self._check_ready()
        refs = [a.run_step.remote(s) for a, s in zip(self.actors, steps, strict=True)]
        results = self._gather(refs, f"the {stage or self.config.stage} step")
        out = dict(results[0])
        for key in ("loss", "tokens", "clipped", "logprob_mismatch_sum", "logprob_mismatch_tokens"):
            if key in out:
                out[key] = sum(r[key] for r in results)
        out["step_s"] = max(r["step_s"] for r in results)
        out["rank_tokens"] = [r["tokens"] for r in results]
        return out

    def save_checkpoint(self, root: str | Path, tag: str, data_state: Any = None) -> str:
        return self._all("save_checkpoint", str(root), tag, data_state)[0]

    def load_checkpoint(self, root: str | Path, tag: str | None = None) -> Any:
        return self._all("load_checkpoint", str(root), tag)[0]

    def export_hf(self, out_dir: str | Path) -> str:
        return self._all("export_hf", str(out_dir))[0]

    def push_weights(self, transport: Any) -> Any:
        """Rank 0 pushes through ``transport`` (which must survive pickling into the actor);
        the other ranks take part in ZeRO-3 gathers. Returns rank 0's report."""
        return self._all("push_weights", transport)[0]

    def call(self, method: str, *args: Any) -> list[Any]:
        """Any ``Learner`` method on every rank, e.g. ``weights_checksum``."""
        return self._all(method, *args)

    def shutdown(self, reason: str = "shutdown() was called") -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        self.ready = False
        self.shut_down_because = self.shut_down_because or reason
