"""An RL run across two Ray nodes: the learner on one, the rollout engine and the reward actors
on the other, so that weights, trajectories and rewards all cross between the nodes' object
stores. Two raylets on this machine stand in for two hosts (``ray.cluster_utils.Cluster``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlcs.runlog import read_metrics

ROOT = Path(__file__).resolve().parents[2]
RLCS = str(Path(sys.executable).with_name("rlcs"))
#: tests/cluster/test_train.py's short tiny-text run
FAST = [
    "data.synthetic.sizes={rl_train: 6, heldout: 2, sft: 2, pretrain: 2}",
    "rollout.n=2",
    "rollout.max_think_tokens=12",
    "rollout.max_answer_tokens=6",
    "run.prompts_per_iteration=3",
]


def rlcs_train(sets: list[str]) -> subprocess.CompletedProcess:
    args = [a for s in sets for a in ("--set", s)]
    return subprocess.run([RLCS, "train", "configs/tiny-text.yaml", *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)  # fmt: skip


@pytest.fixture(scope="module")
def two_nodes():
    """A head node for training (resource ``trainer``) and a node for rollouts (``roller``)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"trainer": 4}}
    )
    cluster.add_node(num_cpus=2, resources={"roller": 4})
    try:
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


#: each role's resource exists on one node only, so the placement has to split them
SPLIT = {"learner": {"trainer": 1}, "rollout": {"roller": 1}, "reward": {"roller": 1}}


@pytest.mark.slow
def test_an_rl_run_spans_two_ray_nodes(two_nodes, tmp_path):
    import ray

    # an entropy bonus makes the learner move the weights even where every reward is equal
    sets = [*FAST, "rollout.engine=hf", "run.iterations=2", "reward.num_actors=1",
            "learner.grpo.entropy_coef=0.01", "learner.lr=1.0e-3",
            f"cluster.address={two_nodes.address}", f"cluster.role_resources={json.dumps(SPLIT)}",
            f"run.root={tmp_path}"]  # fmt: skip
    r = rlcs_train(sets)
    assert r.returncode == 0, r.stderr[-4000:]
    # the run left the cluster as it found it: both nodes alive, every bundle given back
    ray.init(address=two_nodes.address, log_to_driver=False)
    try:
        assert sum(n["Alive"] for n in ray.nodes()) == 2
        assert ray.available_resources().get("trainer") == 4
        assert ray.available_resources().get("roller") == 4
    finally:
        ray.shutdown()
    run = tmp_path / "tiny-text"
    recs = read_metrics(run)
    assert [m["step"] for m in recs] == [1, 2]
    assert all(m["curriculum/groups"] > 0 and "reward/mean" in m for m in recs)
    assert recs[0]["grad_norm"] > 0
    assert (run / "hf" / "model.safetensors").read_bytes() != (
        run / "model" / "model.safetensors"
    ).read_bytes()
    # iteration 2 sampled with the weights the learner pushed to the other node after step 1:
    # the engine's logprobs of its own tokens are the learner's
    assert 0.0 <= recs[1]["logprob_mismatch"] < 0.05


@pytest.mark.slow
def test_same_node_weight_sync_refuses_engines_on_another_node(two_nodes, tmp_path):
    sets = [*FAST, "rollout.engine=hf", "reward.num_actors=1", "cluster.weight_sync=shm",
            f"cluster.address={two_nodes.address}", f"cluster.role_resources={json.dumps(SPLIT)}",
            f"run.root={tmp_path}"]  # fmt: skip
    r = rlcs_train(sets)
    assert r.returncode == 1, r.stderr[-4000:]
    assert "cluster.weight_sync: shm passes the weights within one node" in r.stderr
    assert "Traceback" not in r.stderr
