"""Held-out evaluation (cluster.evaluate): the figures the demo and the benchmarks report."""

from collections import defaultdict

import pytest

from cluster.evaluate import evaluate, summarize
from rlcs.config import RolloutConfig
from rlcs.data import Item


def test_summarize_counts_only_full_rewards_as_passes_and_averages_domains():
    out = summarize({"math": [1.0, 0.0, 1.0, 1.0], "grounding": [0.5, 1.0]})
    assert out["math"] == {"pass_rate": 0.75, "reward": 0.75}
    # a partial reward adds to the mean reward, not to the pass rate
    assert out["grounding"] == {"pass_rate": 0.5, "reward": 0.75}
    # "all" weighs every domain alike, whatever its number of items
    assert out["all"] == {"pass_rate": pytest.approx(0.625), "reward": pytest.approx(0.75)}
    assert list(out) == ["grounding", "math", "all"]


def test_evaluate_without_a_ray_connection_says_so_instead_of_joining_any_cluster(
    monkeypatch, tmp_path
):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match="needs a Ray connection.*connect_ray"):
        evaluate(tmp_path / "no-model", [], RolloutConfig(engine="hf"))


@pytest.fixture(scope="module")
def ray_two_cpus():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _items(tmp_path) -> list[Item]:
    """Three held-out items each of math and grounding, with absolute image paths."""
    from cluster.stage_data import absolute_images
    from rlcs.data import load_items
    from rlcs.tasks import build_task_data

    sizes = {"rl_train": 1, "heldout": 3, "sft": 1, "pretrain": 1}
    files = build_task_data(tmp_path / "data", sizes=sizes, domains=("math", "grounding"),
                            difficulty=(0.0, 0.3), progress=False)  # fmt: skip
    return [absolute_images(it, files["heldout"].parent) for it in load_items(files["heldout"])]


def _cpus_back(ray, total: float = 2.0, timeout_s: float = 30.0) -> bool:
    """Whether the evaluation's actor gave its CPUs back (a kill takes effect asynchronously)."""
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if ray.available_resources().get("CPU", 0.0) >= total:
            return True
        time.sleep(0.2)
    return False


def test_evaluate_scores_the_greedy_answers_of_an_actor_and_frees_it(
    ray_two_cpus, tiny_vlm, tmp_path
):
    import rewards
    from actors.rollout.worker import RolloutWorkerImpl

    items = _items(tmp_path)
    rollout = RolloutConfig(engine="hf", max_think_tokens=8, max_answer_tokens=8, temperature=0.9)
    got = evaluate(tiny_vlm, items, rollout, num_cpus=2)

    # the same model answering greedily in this process, scored by the same verifiers
    cfg = rollout.model_copy(update={"n": 1, "temperature": 0.0})
    trajs = RolloutWorkerImpl(str(tiny_vlm), cfg.model_dump()).generate(
        items, n=1, step=0, temperature=0.0
    )
    scored = rewards.score_batch(
        [{"domain": it.domain, "response": t.response, "answer": it.answer}
         for it, t in zip(items, trajs, strict=True)]
    )  # fmt: skip
    per = defaultdict(list)
    for it, r in zip(items, scored, strict=True):
        per[it.domain].append(r.reward)
    assert got == summarize(per)
    assert set(got) == {"math", "grounding", "all"}
    assert _cpus_back(ray_two_cpus)


def test_a_failed_evaluation_raises_and_still_frees_its_actor(ray_two_cpus, tiny_vlm, tmp_path):
    items = _items(tmp_path)
    broken = items[0].model_copy(update={"images": [str(tmp_path / "no-such-image.png")]})
    rollout = RolloutConfig(engine="hf", max_think_tokens=8, max_answer_tokens=8)
    with pytest.raises(Exception, match="no-such-image"):
        evaluate(tiny_vlm, [broken, *items[1:]], rollout, num_cpus=1)
    assert _cpus_back(ray_two_cpus)
