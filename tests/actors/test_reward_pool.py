"""The Ray reward-actor pool on a real local Ray: load balancing, and an actor killed mid-batch."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a local Ray start and an actor restart: ~30 s on 2 busy cores

GLM = "<think>t</think><answer><|begin_of_box|>{}<|end_of_box|></answer>"


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def pool(ray_local):
    from actors.reward import RewardActorPool

    p = RewardActorPool.create(2, 1, timeout_s=5.0)
    yield p
    p.shutdown()


def test_mixed_batch_is_scored_in_order_across_both_actors(pool):
    items = []
    for i in range(300):
        items.append({"domain": "ocr", "response": GLM.format(f"word{i}"), "answer": f"word{i}"})
        items.append(
            {"domain": "math", "response": GLM.format(f"\\frac{{{i}}}{{2}}"), "answer": str(i / 2)}
        )
        items.append({"domain": "vqa", "response": GLM.format("no"), "answer": "yes"})
    results = pool.score(items)
    assert [r.reward for r in results] == [1.0, 1.0, 0.0] * 300
    per_actor = [sum(c.get("items", 0) for c in counts.values()) for counts in pool.counters()]
    assert all(n > 0 for n in per_actor) and sum(per_actor) == 900


def test_an_actor_killed_mid_batch_loses_no_item(pool, ray_local):
    from actors.reward import RewardActorPool

    pid = ray_local.get(pool.actors[0].info.remote())["pid"]
    # Trigonometric identities (each a SymPy simplify) keep both actors busy for seconds.
    items = [
        {
            "domain": "math",
            "response": GLM.format(f"\\sin^{{2}}({k}x)+\\cos^{{2}}({k}x)"),
            "answer": "1",
        }
        for k in range(1, 121)
    ]
    killer = threading.Timer(1.0, lambda: os.kill(pid, signal.SIGKILL))
    killer.start()
    small = RewardActorPool(pool.actors, max_shard=8)
    # A generous per-item limit: on a loaded 2-core host a first SymPy simplify in the restarted
    # actor's fresh workers can take seconds, and this test is about the kill, not the limit.
    results = small.score(items, timeout_s=120.0)
    killer.join()
    assert len(results) == 120
    failed = [(i, r.error, r.detail) for i, r in enumerate(results) if r.reward != 1.0]
    assert not failed, failed
    assert small.retries >= 1
    # Ray restarted the actor: it scores again, in a new process.
    assert ray_local.get(pool.actors[0].info.remote())["pid"] != pid


def test_a_failed_shard_is_retried_on_another_actor():
    from actors.reward import RewardActorPool

    pool = RewardActorPool(["a0", "a1", "a2"], in_flight=2)
    assert pool._pick([1, 0, 0], avoid=1) == 2  # least loaded, but not the one that failed
    assert pool._pick([2, 0, 2], avoid=1) is None  # only the failed one has room: wait
    assert pool._pick([0, 0, 0], avoid=-1) == 0
    single = RewardActorPool(["a0"], in_flight=1)
    assert single._pick([0], avoid=0) == 0  # one actor: retry it (Ray restarts it)
    assert single._pick([1], avoid=0) is None


def test_a_waiting_retry_does_not_hold_back_the_shards_behind_it():
    from actors.reward import RewardActorPool

    pool = RewardActorPool(["a0", "a1"], in_flight=1)
    retry, fresh = (range(0, 8), 1, 0), (range(8, 16), 0, -1)
    # a1 is busy; the retry must avoid a0, the fresh shard behind it can take a0
    assert pool._place([retry, fresh], load=[0, 1]) == (1, 0)
    # once a1 is free the retry goes there first
    assert pool._place([retry, fresh], load=[0, 0]) == (0, 1)
    # no actor has room: nothing is placed
    assert pool._place([retry, fresh], load=[1, 1]) is None
    assert pool._place([], load=[0, 0]) is None


def test_rollouts_are_shaped_and_held_out_answers_are_not(ray_local):
    """A run's pool scores its rollouts with ``training_options`` (``position_shaping``); the
    held-out answers it scores with its defaults get the verifiers' own binary reward."""
    from actors.reward import RewardActorPool, training_options
    from cluster.rl_iteration import score
    from rlcs.config import load_config
    from rlcs.data import Item, Trajectory

    tiny = Path(__file__).resolve().parents[2] / "configs" / "tiny-vlm.yaml"
    cfg = load_config(tiny, ["reward.position_shaping=0.4", "reward.num_actors=1"])
    # no CPU of its own: the module's two-actor pool holds both of this Ray's CPUs
    pool = RewardActorPool.from_config(cfg.reward, actor_options={"num_cpus": 0})
    try:
        item = Item(id="g", domain="gui", prompt="Click OK.",
                    answer={"action": "click", "box": [400, 400, 600, 500]})  # fmt: skip
        miss = '{"action":"click","point":[500,550]}'  # one box height below the centre
        by_id = {"g": item}
        train = [Trajectory("g", GLM.format(miss), [], [], "stop")]
        held = [Trajectory("g", GLM.format(miss), [], [], "stop")]
        score(pool, train, by_id, 5.0, training_options(cfg.reward))
        score(pool, held, by_id, 5.0)
        assert train[0].reward == pytest.approx(0.4 * 0.6065, abs=1e-4)
        assert "shaped" in train[0].reward_detail["detail"]
        assert held[0].reward == 0.0 and held[0].reward_detail["detail"] == "wrong: target"
    finally:
        pool.shutdown()
