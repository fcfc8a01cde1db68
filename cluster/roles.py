"""Start the run's Ray actors on their placement groups, and stop them again.

One call away from the driver: ``start_roles`` reserves the bundles (``cluster.placement``),
then starts the learner ranks, the rollout workers, the reward-actor pool and the curriculum
sampler, and binds the weight transport between learner and rollout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.learner_group import LearnerGroup
from actors.reward import RewardActor, RewardActorPool, options_from_config
from actors.rollout.group import RolloutGroup
from actors.rollout.worker import RolloutWorker, worker_options
from actors.sampler import CurriculumSampler
from actors.weights import make_transport
from cluster.placement import Placement, create_placement, ray_address
from cluster.rl_iteration import push_weights
from rlcs.config import Config
from rlcs.data import Item


@dataclass
class Roles:
    placement: Placement
    learner: LearnerGroup
    rollout: RolloutGroup | None = None
    rewards: RewardActorPool | None = None
    sampler: Any = None
    transport: Any = None
    group_filter: Any = None  # learner.grpo.group_filter, loaded (rlcs.group_filters)

    def shutdown(self) -> None:
        for part in (self.learner, self.rewards):
            if part is not None:
                part.shutdown()
        if self.rollout is not None:
            for w in self.rollout.workers:
                ray.kill(w, no_restart=True)
        if self.sampler is not None:
            ray.kill(self.sampler)
        self.placement.remove()


def start_roles(
    cfg: Config, model_path: Path, run_dir: Path, items: list[Item] | None, resume: bool
) -> Roles:
    """Everything a stage needs: only the learner for pretrain/SFT, all four roles for RL."""
    # a run that joins no cluster started a local one, which no autoscaler grows
    fixed = (ray_address(cfg) or "local") == "local"
    placement = create_placement(
        cfg if cfg.stage == "rl" else _learner_only(cfg), fixed_cluster=fixed
    )
    learner_opts = placement.options("learner", 0)
    learner = LearnerGroup(
        cfg,
        model_path,
        num_cpus_per_rank=learner_opts["num_cpus"],
        num_gpus_per_rank=learner_opts["num_gpus"],
        placement_group=placement.groups["learner"],
        runtime_env=learner_opts.get("runtime_env"),
        wait=not start_together(cfg),
    )
    roles = Roles(placement, learner)
    if cfg.stage != "rl":
        return roles
    workers = [
        RolloutWorker.options(
            **worker_options(cfg.rollout, **placement.options("rollout", i)), max_restarts=1
        ).remote(str(model_path), cfg.rollout.model_dump(), dtype=cfg.model.dtype, worker_index=i)
        for i in range(cfg.rollout.num_workers)
    ]
    roles.rewards = RewardActorPool(
        [
            RewardActor.options(
                **placement.options("reward", i), max_restarts=3, max_task_retries=0
            ).remote(
                cfg.reward.processes_per_actor,
                cfg.reward.timeout_s,
                options_from_config(cfg.reward),
                dict(cfg.reward.custom_domains),
            )
            for i in range(cfg.reward.num_actors)
        ]
    )
    # the sampler keeps its state under the run directory, which the driver made: on the
    # driver's node that directory exists even where nodes share no filesystem
    driver_node = ray.get_runtime_context().get_node_id()
    roles.sampler = CurriculumSampler.options(
        max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(driver_node, soft=False),
    ).remote(
        str(run_dir),
        items=None if resume else items,
        config=cfg.curriculum,
        domain_weights=cfg.data.domain_weights,
        resume=resume,
    )
    learner.wait_ready()
    ray.get([w.ready.remote() for w in workers])
    counts = {
        "learner": cfg.learner.num_ranks,
        "rollout": len(workers),
        "reward": cfg.reward.num_actors,
    }
    layout = placement.layout(counts, {"sampler": driver_node})
    if layout:
        print(f"roles across Ray nodes: {layout}", flush=True)
    # an engine over several GPUs joins the NCCL group with one rank for each
    ranks = ({"engine_ranks_per_worker": cfg.rollout.tensor_parallel_size}
             if cfg.cluster.weight_sync == "nccl" else {})  # fmt: skip
    roles.transport = make_transport(
        cfg.cluster.weight_sync, workers, bucket_mb=cfg.cluster.weight_sync_bucket_mb, **ranks
    )
    # a restarted engine holds the base weights: bring it to the learner's before it generates
    roles.rollout = RolloutGroup(
        workers, on_restart=lambda: push_weights(roles), ship_images=cfg.cluster.ship_images
    )
    return roles


def start_together(cfg: Config) -> bool:
    """Whether an RL run starts its rollout workers, reward actors and sampler while the
    learner ranks start (process, imports, DeepSpeed's set-up), rather than after them: a
    one-iteration tiny-text RL run on two cores then took 28-36 s instead of 39-48 s. Not where
    an engine shares a GPU with a rank: vLLM sizes its KV cache by the GPU memory it finds free
    while it starts, so it starts once the learner has taken its share."""
    return cfg.stage == "rl" and not (cfg.cluster.colocate and cfg.cluster.device == "cuda")


def _learner_only(cfg: Config) -> Config:
    """Pretrain and SFT reserve no rollout or reward bundles, and so colocate nothing."""
    return cfg.model_copy(
        update={
            "rollout": cfg.rollout.model_copy(update={"num_workers": 0}),
            "reward": cfg.reward.model_copy(update={"num_actors": 0}),
            "cluster": cfg.cluster.model_copy(update={"colocate": False}),
        }
    )
