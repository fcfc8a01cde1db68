import time
from pathlib import Path

import pytest

from cluster.placement import (
    PlacementError,
    capacity_shortfall,
    create_placement,
    plan_resources,
)
from rlcs.config import Config, load_config


def cfg(**sections) -> Config:
    return Config.model_validate({"model": {"tiny": "text"}, **sections})


def test_cpu_single_node_plan():
    plan = plan_resources(
        cfg(learner={"num_ranks": 2}, rollout={"num_workers": 1}, reward={"num_actors": 3})
    )
    assert plan.problems == []
    assert plan.bundles["learner"] == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert plan.bundles["rollout"] == [{"CPU": 1.0}]
    assert len(plan.bundles["reward"]) == 3 and plan.gpus_needed == 0


def test_a_demand_beyond_the_whole_cluster_is_named_by_role():
    plan = plan_resources(
        cfg(learner={"num_ranks": 2}, rollout={"num_workers": 1}, reward={"num_actors": 1},
            cluster={"rollout_cpus_per_worker": 0.8, "reward_cpus_per_actor": 0.2})
    )  # fmt: skip
    assert capacity_shortfall(plan, {"CPU": 2.0, "memory": 1e9}) == (
        "CPU 3 (learner 2, rollout 0.8, reward 0.2) but the cluster has 2"
    )
    assert capacity_shortfall(plan, {"CPU": 3.0}) is None
    gpu = plan_resources(cfg(cluster={"device": "cuda", "learner_gpus_per_rank": 1,
                                      "rollout_gpus_per_worker": 1}))  # fmt: skip
    assert capacity_shortfall(gpu, {"CPU": 8.0}) == (
        "GPU 2 (learner 1, rollout 1) but the cluster has 0"
    )


def test_gpu_split_arithmetic():
    c = cfg(
        learner={"num_ranks": 4},
        rollout={"num_workers": 2, "tensor_parallel_size": 2},
        cluster={"device": "cuda", "num_nodes": 1, "gpus_per_node": 8,
                 "learner_gpus_per_rank": 1, "rollout_gpus_per_worker": 2},
    )  # fmt: skip
    plan = plan_resources(c)
    assert plan.problems == [] and plan.gpus_needed == 8 and plan.gpus_available == 8
    assert plan.bundles["rollout"] == [{"CPU": 1.0, "GPU": 2.0}] * 2


def test_gpu_overcommit_is_reported():
    c = cfg(
        learner={"num_ranks": 8},
        rollout={"num_workers": 2, "tensor_parallel_size": 1},
        cluster={
            "device": "cuda",
            "gpus_per_node": 8,
            "learner_gpus_per_rank": 1,
            "rollout_gpus_per_worker": 1,
        },
    )
    with pytest.raises(PlacementError, match=r"roles need 10 GPUs but 1 node\(s\) x 8 GPUs = 8"):
        plan_resources(c).check()


def test_colocated_roles_share_bundles():
    c = cfg(
        learner={"num_ranks": 8},
        rollout={"num_workers": 8},
        cluster={"device": "cuda", "gpus_per_node": 8, "colocate": True,
                 "learner_gpus_per_rank": 1, "rollout_gpus_per_worker": 1},
    )  # fmt: skip
    plan = plan_resources(c).check()
    assert plan.gpus_needed == 8 and plan.bundles["rollout"] == []
    bad = c.model_copy(update={"rollout": c.rollout.model_copy(update={"num_workers": 4})})
    assert any("one rollout engine per learner rank" in p for p in plan_resources(bad).problems)
    # a learner and its engine on one GPU cannot both be NCCL ranks
    nccl = c.model_copy(update={"cluster": c.cluster.model_copy(update={"weight_sync": "nccl"})})
    (problem,) = plan_resources(nccl).problems
    assert "same GPU" in problem and "cuda_ipc" in problem
    two = nccl.cluster.model_copy(
        update={"learner_gpus_per_rank": 2, "rollout_gpus_per_worker": 2, "gpus_per_node": 16}
    )
    rollout = nccl.rollout.model_copy(update={"tensor_parallel_size": 2})
    two_each = nccl.model_copy(update={"cluster": two, "rollout": rollout})
    assert plan_resources(two_each).problems == []


def test_a_role_with_no_resources_is_reported():
    c = cfg(cluster={"reward_cpus_per_actor": 0})
    (problem,) = plan_resources(c).problems
    assert "cluster.reward_cpus_per_actor is 0" in problem and "such as 0.1" in problem
    # a custom resource alone is something to reserve
    c = cfg(cluster={"reward_cpus_per_actor": 0, "role_resources": {"reward": {"verifier": 1}}})
    assert plan_resources(c).problems == []


def test_colocated_cpu_roles_each_run_the_whole_bundles_threads():
    """Learner and engine take turns on one bundle, so each gets all of its cores as threads
    while Ray's accounting splits the bundle between them; with ``run.overlap_rollout`` they
    work at once, and each runs on its own share."""
    import ray

    @ray.remote
    class Probe:
        def threads(self) -> int:
            import torch

            return torch.get_num_threads()

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for overlap in (False, True):
            c = cfg(
                reward={"num_actors": 1},
                cluster={"colocate": True, "learner_cpus_per_rank": 1,
                         "rollout_cpus_per_worker": 0.8, "reward_cpus_per_actor": 0.2},
                run={"overlap_rollout": overlap},
            )  # fmt: skip
            placement = create_placement(c, timeout_s=60)
            opts = {role: placement.options(role, 0) for role in ("learner", "rollout", "reward")}
            assert opts["learner"]["num_cpus"] == opts["rollout"]["num_cpus"] == pytest.approx(0.9)
            # a role that is not colocated keeps Ray's own thread sizing
            assert "runtime_env" not in opts["reward"]
            actors = {role: Probe.options(**opts[role]).remote() for role in ("learner", "rollout")}
            threads = {role: ray.get(a.threads.remote(), timeout=60) for role, a in actors.items()}
            each = 1 if overlap else 2  # 0.9 CPUs of the bundle's 1.8 each, rounded
            assert threads == {"learner": each, "rollout": each}, f"overlap_rollout={overlap}"
            for a in actors.values():
                ray.kill(a)
            placement.remove()
    finally:
        ray.shutdown()


def test_cpu_device_with_gpus_is_an_error():
    c = cfg(cluster={"learner_gpus_per_rank": 1})
    assert plan_resources(c).problems == [
        "cluster.device is cpu but GPUs are requested per learner rank or rollout worker"
    ]


@pytest.mark.slow
def test_roles_land_on_the_nodes_their_resources_name():
    """Two raylets on this machine, one labelled for training and one for rollouts."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"trainer": 4}}
    )
    cluster.add_node(num_cpus=2, resources={"roller": 4})
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        cluster.wait_for_nodes()
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        c = cfg(
            learner={"num_ranks": 2},
            rollout={"num_workers": 1},
            reward={"num_actors": 2},
            cluster={"learner_cpus_per_rank": 0.5, "rollout_cpus_per_worker": 0.5, "reward_cpus_per_actor": 0.25,
                     "role_resources": {"learner": {"trainer": 1}, "rollout": {"roller": 1}}},
        )  # fmt: skip
        placement = create_placement(c, timeout_s=60)

        @ray.remote
        class Probe:
            def node(self) -> str:
                return ray.get_runtime_context().get_node_id()

        where = {}
        for role, count in (("learner", 2), ("rollout", 1), ("reward", 2)):
            actors = [Probe.options(**placement.options(role, i)).remote() for i in range(count)]
            where[role] = set(ray.get([a.node.remote() for a in actors], timeout=60))
        assert len(where["learner"]) == 1 and len(where["rollout"]) == 1
        (learner_node,), (rollout_node,) = where["learner"], where["rollout"]
        assert learner_node != rollout_node
        assert "trainer" in nodes[learner_node] and "roller" in nodes[rollout_node]
        assert placement.node_of("learner", 1) == learner_node
        assert placement.node_of("rollout", 0) == rollout_node
        # weights handed over inside one machine cannot reach the engine on the other node
        placement.check_weight_sync("cpu_bytes", 1)
        with pytest.raises(PlacementError, match=r"shm passes the weights within one node"):
            placement.check_weight_sync("shm", 1)
        placement.remove()
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_unplaceable_roles_fail_with_what_is_short():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        c = cfg(learner={"num_ranks": 3}, cluster={"learner_cpus_per_rank": 1})
        with pytest.raises(PlacementError, match=r"could not reserve the learner bundles") as e:
            create_placement(c, timeout_s=3)
        assert str(e.value).endswith(
            "free now: CPU 0 of 1 (the run's other roles' bundles hold their share)"
        )
        # the local cluster a run starts for itself cannot grow: no wait at all
        start = time.monotonic()
        with pytest.raises(PlacementError) as e:
            create_placement(c, timeout_s=60, fixed_cluster=True)
        assert time.monotonic() - start < 10
        assert str(e.value).startswith(
            "the roles need CPU 6 (learner 3, rollout 1, reward 2) but the cluster has 1: lower"
        )
    finally:
        ray.shutdown()


CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    "name, gpus, nodes",
    [("glm4v-9b-8xh100.yaml", 8, 1), ("glm4v-9b-4node.yaml", 32, 4)],
)
def test_gpu_configs_fit_their_clusters(name, gpus, nodes):
    cfg = load_config(CONFIGS / name)
    plan = plan_resources(cfg).check()
    assert cfg.cluster.device == "cuda" and cfg.cluster.num_nodes == nodes
    assert plan.gpus_needed == plan.gpus_available == gpus
    # the recipe's RL settings
    assert (
        cfg.rollout.top_p == 1.0 and cfg.learner.precision == "bf16" and cfg.learner.zero_stage == 3
    )
    g = cfg.learner.grpo
    assert (g.eps_low, g.eps_high, g.kl_coef, g.entropy_coef, g.loss_agg) == (
        0.2,
        0.28,
        0.0,
        0.0,
        "sample",
    )
    per_node = {k: 0.0 for k in ("learner", "rollout")}
    for role in per_node:
        per_node[role] = sum(b.get("GPU", 0.0) for b in plan.bundles[role])
    if cfg.cluster.colocate:
        assert cfg.cluster.weight_sync == "cuda_ipc" and per_node["learner"] == gpus
    else:
        assert (
            cfg.cluster.weight_sync == "nccl" and per_node["learner"] + per_node["rollout"] == gpus
        )
        # each role fills whole nodes, so the learner's and rollout's nodes are distinct
        assert per_node["learner"] % cfg.cluster.gpus_per_node == 0


def test_the_roles_start_beside_the_learner_unless_an_engine_shares_its_gpu():
    from cluster.roles import start_together

    root = Path(__file__).resolve().parents[2] / "configs"
    assert start_together(load_config(root / "tiny-vlm.yaml"))  # colocated on CPU
    assert start_together(load_config(root / "tiny-text.yaml"))
    assert start_together(load_config(root / "glm4v-9b-4node.yaml"))  # split roles on GPUs
    # one 8-GPU node, colocated: each engine sizes its KV cache by what its rank left free
    assert not start_together(load_config(root / "glm4v-9b-8xh100.yaml"))
    # pretraining and SFT start the learner alone
    assert not start_together(load_config(root / "tiny-vlm.yaml", ["stage=sft"]))
