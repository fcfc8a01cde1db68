"""Ray placement groups for the learner, rollout and reward roles, from the `cluster:` config.

``plan_resources`` is pure arithmetic (what each role's bundles ask for, and whether the cluster
described by the config can hold them); ``create_placement`` reserves the bundles on a live Ray
cluster and hands each actor its scheduling options.

- Split (default): learner ranks and rollout engines get bundles of their own.
- Colocated (``cluster.colocate``): learner rank i and rollout engine i share bundle i, each
  taking half of its GPUs, as in hybrid-engine setups that put vLLM to sleep while training.
  The two take turns (generate, then learn), so each runs as many CPU threads as the whole
  bundle has cores, not half of them: on a CPU-only machine that is what makes colocating pay.
  With ``run.overlap_rollout`` they work at the same time, and each runs its own share.
- ``cluster.role_resources`` adds custom resources to a role's bundles, which pins that role to
  the nodes started with them (``ray start --resources '{"trainer": 8}'``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from rlcs.config import ClusterConfig, Config

log = logging.getLogger(__name__)

ROLES = ("learner", "rollout", "reward")


@dataclass
class ResourcePlan:
    bundles: dict[str, list[dict[str, float]]]
    gpus_needed: float
    gpus_available: float
    problems: list[str] = field(default_factory=list)

    def check(self) -> ResourcePlan:
        if self.problems:
            raise PlacementError(
                "cluster config cannot be placed:\n  " + "\n  ".join(self.problems)
            )
        return self


class PlacementError(RuntimeError):
    """The roles cannot be placed; the message says which resource is short."""


def plan_resources(cfg: Config) -> ResourcePlan:
    """Bundles per role and the GPU arithmetic for ``cfg``; problems are listed, not raised."""
    c = cfg.cluster
    ranks, workers, rewards = cfg.learner.num_ranks, cfg.rollout.num_workers, cfg.reward.num_actors
    extra = {role: dict(c.role_resources.get(role, {})) for role in ROLES}
    lg, rg = c.learner_gpus_per_rank, c.rollout_gpus_per_worker
    problems: list[str] = []

    if c.colocate:
        if workers != ranks:
            problems.append(
                f"colocate needs one rollout engine per learner rank ({workers} != {ranks})"
            )
        if rg != lg:
            problems.append(f"colocate needs equal GPUs per learner rank and engine ({lg} != {rg})")
        if c.weight_sync == "nccl" and c.device == "cuda" and lg < 2:
            problems.append(
                "colocate with one GPU per bundle puts learner rank i and engine i on the same "
                "GPU, and NCCL cannot hold two ranks on one GPU: use weight_sync: cuda_ipc"
            )
        shared = {"CPU": c.learner_cpus_per_rank + c.rollout_cpus_per_worker, **_gpu(lg)}
        learner = [{**shared, **extra["learner"], **extra["rollout"]} for _ in range(ranks)]
        rollout: list[dict[str, float]] = []
        gpus_needed = ranks * lg
    else:
        learner = [
            {"CPU": c.learner_cpus_per_rank, **_gpu(lg), **extra["learner"]} for _ in range(ranks)
        ]
        rollout = [
            {"CPU": c.rollout_cpus_per_worker, **_gpu(rg), **extra["rollout"]}
            for _ in range(workers)
        ]
        gpus_needed = ranks * lg + workers * rg
    reward = [{"CPU": c.reward_cpus_per_actor, **extra["reward"]} for _ in range(rewards)]
    gpus_available = float(c.num_nodes * c.gpus_per_node)
    for role, bundles, field_name in (
        ("learner", learner, "learner_cpus_per_rank"),
        ("rollout", rollout, "rollout_cpus_per_worker"),
        ("reward", reward, "reward_cpus_per_actor"),
    ):
        if any(not any(v > 0 for v in b.values()) for b in bundles):
            problems.append(
                f"the {role} actors would reserve no resource at all (cluster.{field_name} is 0); "
                "Ray cannot place an empty bundle, so give them a share such as 0.1"
            )

    if c.device == "cuda":
        if lg <= 0:
            problems.append("cluster.device is cuda but cluster.learner_gpus_per_rank is 0")
        if cfg.rollout.engine == "vllm" and rg <= 0:
            problems.append("cluster.device is cuda but cluster.rollout_gpus_per_worker is 0")
        if rg and cfg.rollout.tensor_parallel_size != rg:
            problems.append(
                f"rollout.tensor_parallel_size ({cfg.rollout.tensor_parallel_size}) must equal "
                f"cluster.rollout_gpus_per_worker ({rg})"
            )
        for name, per in (("learner_gpus_per_rank", lg), ("rollout_gpus_per_worker", rg)):
            if per > c.gpus_per_node:
                problems.append(
                    f"cluster.{name} ({per}) exceeds cluster.gpus_per_node ({c.gpus_per_node})"
                )
        if gpus_needed > gpus_available:
            problems.append(
                f"roles need {gpus_needed:g} GPUs but {c.num_nodes} node(s) x {c.gpus_per_node} "
                f"GPUs = {gpus_available:g}"
            )
    elif lg or rg:
        problems.append(
            "cluster.device is cpu but GPUs are requested per learner rank or rollout worker"
        )
    return ResourcePlan({"learner": learner, "rollout": rollout, "reward": reward}, gpus_needed,
                        gpus_available, problems)  # fmt: skip


def thread_env(cpus: float) -> dict[str, Any]:
    """A runtime_env that gives an actor ``cpus`` threads (rounded, at least one). Ray sizes an
    actor's thread pools (OMP_NUM_THREADS, which torch reads) by its own CPU share otherwise."""
    return {"env_vars": {"OMP_NUM_THREADS": str(max(1, int(cpus + 0.5)))}}


def _gpu(n: float) -> dict[str, float]:
    return {"GPU": n} if n else {}


@dataclass
class Placement:
    """Reserved bundles per role; ``options(role, i)`` are the Ray options for actor ``i``."""

    groups: dict[str, Any]  # role -> PlacementGroup (the learner's also holds colocated engines)
    plan: ResourcePlan
    colocate: bool
    overlap: bool = False  # run.overlap_rollout: colocated roles run at the same time

    def _group_of(self, role: str) -> str:
        """The role whose placement group holds ``role``'s bundles (colocated engines share the
        learner's)."""
        return "learner" if (self.colocate and role == "rollout") else role

    def options(self, role: str, index: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pg_role = self._group_of(role)
        bundle = self.plan.bundles[pg_role][index]
        share = 0.5 if self.colocate and role in ("learner", "rollout") else 1.0
        cfg_cpu = bundle.get("CPU", 0.0) * share
        opts: dict[str, Any] = {
            "num_cpus": cfg_cpu,
            "num_gpus": bundle.get("GPU", 0.0) * share,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.groups[pg_role],
                placement_group_bundle_index=index,
                placement_group_capture_child_tasks=True,
            ),
        }
        custom = {k: v * share for k, v in bundle.items() if k not in ("CPU", "GPU")}
        if custom:
            opts["resources"] = custom
        if share < 1.0:
            # colocated roles run in turn, so each may use every core of the bundle; with
            # run.overlap_rollout they run at once, each on its share
            cores = cfg_cpu if self.overlap else bundle.get("CPU", 0.0)
            opts["runtime_env"] = thread_env(cores)
        return opts

    def node_of(self, role: str, index: int) -> str:
        """The Ray node id that actor ``index`` of ``role`` runs on."""
        from ray.util.placement_group import placement_group_table

        return placement_group_table(self.groups[self._group_of(role)])["bundles_to_node_id"][index]

    def check_weight_sync(self, kind: str, engines: int) -> None:
        """``shm`` and ``cuda_ipc`` hand the weights over inside one machine: every rollout
        engine must be on the node of learner rank 0, which pushes them."""
        if kind not in ("shm", "cuda_ipc") or engines == 0:
            return
        home = self.node_of("learner", 0)
        away = [i for i in range(engines) if self.node_of("rollout", i) != home]
        if away:
            raise PlacementError(
                f"cluster.weight_sync: {kind} passes the weights within one node, but rollout "
                f"engine(s) {', '.join(map(str, away))} were placed on another node than "
                f"learner rank 0 ({home[:12]}); use cpu_bytes (or nccl between GPUs), or keep "
                "the roles on one node (cluster.colocate, or cluster.role_resources giving the "
                "learner and rollout roles a custom resource only that node has; "
                "cluster.placement_strategy packs each role's own actors, not two roles)"
            )

    def layout(self, counts: dict[str, int], others: dict[str, str]) -> str | None:
        """Which actors each node holds, one clause a node (``others``: actor name -> node id),
        or None when every actor is on one node."""
        import ray

        where: dict[str, list[str]] = {}
        for role, count in counts.items():
            for i in range(count):
                where.setdefault(self.node_of(role, i), []).append(f"{role} {i}")
        for name, node in others.items():
            where.setdefault(node, []).append(name)
        if len(where) < 2:
            return None
        address = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        return "; ".join(
            f"node {node[:8]} ({address.get(node, '?')}): {', '.join(actors)}"
            for node, actors in sorted(where.items(), key=lambda kv: kv[1])
        )

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self.groups.values():
            remove_placement_group(pg)


def ray_address(cfg: Config) -> str | None:
    """The Ray cluster a run joins: ``cluster.address``, else ``$RAY_ADDRESS`` (set by
    ``ray job submit``); None for a new local cluster of its own."""
    return cfg.cluster.address or os.environ.get("RAY_ADDRESS") or None


def capacity_shortfall(plan: ResourcePlan, totals: dict[str, float]) -> str | None:
    """What the plan's bundles ask for beyond a cluster's whole resources (``totals``, as
    ``ray.cluster_resources()``), one clause a resource, or None when they fit in sum."""
    short = []
    for res in sorted({k for bundles in plan.bundles.values() for b in bundles for k in b}):
        parts = {r: sum(b.get(res, 0.0) for b in bs) for r, bs in plan.bundles.items()}
        need = sum(parts.values())
        if need > totals.get(res, 0.0) + 1e-9:
            split = ", ".join(f"{r} {v:g}" for r, v in parts.items() if v)
            short.append(f"{res} {need:g} ({split}) but the cluster has {totals.get(res, 0):g}")
    return "; ".join(short) or None


def create_placement(
    cfg: Config, timeout_s: float = 120.0, fixed_cluster: bool = False
) -> Placement:
    """Reserve every role's bundles on the connected Ray cluster, or fail saying what is short.

    A cluster may grow (an autoscaler adds nodes) while the bundles wait, for up to
    ``timeout_s``; a ``fixed_cluster`` (the local one a run starts for itself) cannot, so a
    demand beyond its whole resources fails at once."""
    import ray
    from ray.util.placement_group import placement_group

    plan = plan_resources(cfg).check()
    if short := capacity_shortfall(plan, ray.cluster_resources()):
        hint = (
            "lower cluster.learner_cpus_per_rank / rollout_cpus_per_worker / "
            "reward_cpus_per_actor (shares such as 0.5 are fine), or run fewer actors"
        )
        if fixed_cluster:
            raise PlacementError(f"the roles need {short}: {hint}")
        log.warning("the roles need %s; waiting up to %.0fs for nodes", short, timeout_s)
    strategy = cfg.cluster.placement_strategy
    groups = {}
    for role, bundles in plan.bundles.items():
        if not bundles:
            continue
        role_strategy = "SPREAD" if role == "reward" else strategy
        groups[role] = placement_group(
            bundles, strategy=role_strategy, name=f"rlcs-{cfg.run.name}-{role}"
        )
    ready = {role: pg.ready() for role, pg in groups.items()}
    for role, ref in ready.items():
        try:
            ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            # what is free is read before the groups are removed: the removal hands their
            # resources back asynchronously, and the message must not depend on how soon
            short = _free(plan.bundles[role], ray.available_resources())
            for pg in groups.values():
                ray.util.remove_placement_group(pg)
            raise PlacementError(
                f"could not reserve the {role} bundles {plan.bundles[role]} within "
                f"{timeout_s:.0f}s; {short}"
            ) from None
    placement = Placement(groups, plan, cfg.cluster.colocate, cfg.run.overlap_rollout)
    try:
        placement.check_weight_sync(cfg.cluster.weight_sync, cfg.rollout.num_workers)
    except PlacementError:
        placement.remove()
        raise
    return placement


def _free(bundles: list[dict[str, float]], available: dict[str, float]) -> str:
    """What is free of the resources ``bundles`` ask for, and of the cluster's whole."""
    import ray

    totals = ray.cluster_resources()
    kinds = sorted({k for b in bundles for k in b})
    have = ", ".join(f"{k} {available.get(k, 0.0):g} of {totals.get(k, 0.0):g}" for k in kinds)
    return f"free now: {have} (the run's other roles' bundles hold their share)"


def worker_gpus(cluster: ClusterConfig) -> float:
    """The GPUs each of `rlcs eval`'s and `rlcs grade`'s rollout workers takes: the config's
    ``cluster.rollout_gpus_per_worker`` (vLLM's tensor-parallel engines need them all) when
    ``cluster.device`` is cuda, else none."""
    return cluster.rollout_gpus_per_worker if cluster.device == "cuda" else 0.0
