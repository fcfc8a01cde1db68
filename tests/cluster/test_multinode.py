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


@pytest.mark.slow
def test_an_rl_run_spans_two_ray_nodes(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    # each role's resource exists on one node only, so the placement has to split them
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"trainer": 4}}
    )
    cluster.add_node(num_cpus=2, resources={"roller": 4})
    try:
        cluster.wait_for_nodes()
        roles = {"learner": {"trainer": 1}, "rollout": {"roller": 1}, "reward": {"roller": 1}}
        sets = [*FAST, "rollout.engine=hf", "run.iterations=2", "reward.num_actors=1",
                f"cluster.address={cluster.address}",
                f"cluster.role_resources={json.dumps(roles)}"]  # fmt: skip
        sets.append(f"run.root={tmp_path}")
        r = subprocess.run([RLCS, "train", "configs/tiny-text.yaml", *(a for s in sets for a in ("--set", s))],
                           capture_output=True, text=True, timeout=600, cwd=ROOT)  # fmt: skip
        assert r.returncode == 0, r.stderr[-4000:]
        # the run left the cluster as it found it: every node alive, no actor or bundle left
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            assert sum(n["Alive"] for n in ray.nodes()) == 2
            assert ray.available_resources().get("trainer") == 4
            assert ray.available_resources().get("roller") == 4
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()
    recs = read_metrics(tmp_path / "tiny-text")
    assert [m["step"] for m in recs] == [1, 2]
    assert all(m["curriculum/groups"] > 0 and "reward/mean" in m for m in recs)
    # iteration 2 sampled with the weights the learner pushed to the other node after step 1:
    # the engine's logprobs of its own tokens are the learner's
    assert 0.0 <= recs[1]["logprob_mismatch"] < 0.05
    assert (tmp_path / "tiny-text" / "hf" / "config.json").is_file()
