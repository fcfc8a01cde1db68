"""Several HF rollout workers behind one ``generate`` call; a worker dying mid-batch."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

pytestmark = pytest.mark.slow


def _items(k: int) -> list[dict]:
    # Prompts of very different lengths, so balancing by cost matters.
    return [{"id": f"i{i}", "domain": "math", "prompt": "x" * (5 + 40 * (i % 3))} for i in range(k)]


def _group(tiny_text_model, max_think=24, **cfg):
    from actors.rollout import RolloutGroup

    cfg = dict(engine="hf", n=2, max_think_tokens=max_think, max_answer_tokens=8, **cfg)
    return RolloutGroup.create(str(tiny_text_model), cfg, num_workers=2)


def test_group_returns_every_item_in_order(ray_local, tiny_text_model):
    group = _group(tiny_text_model, max_think=6)
    trajs = group.generate(_items(5), step=0)
    assert [t.item_id for t in trajs] == [f"i{i}" for i in range(5) for _ in range(2)]
    assert group.failures == []
    # Seeds depend on (step, item, sample), not on which worker ran the item.
    from actors.rollout import RolloutWorkerImpl

    solo = RolloutWorkerImpl(
        str(tiny_text_model), dict(engine="hf", n=2, max_think_tokens=6, max_answer_tokens=8)
    )
    assert [t.token_ids for t in solo.generate(_items(5), step=0)] == [t.token_ids for t in trajs]
    for w in group.workers:
        ray_local.kill(w)


def test_worker_death_mid_batch_is_reported_and_items_survive(ray_local, tiny_text_model):
    from actors.rollout import RolloutError

    # One sequence at a time and a long batch (several seconds), so that the one-second timer
    # surely lands mid-batch: batched, the tiny model would finish 8 items in under a second.
    group = _group(tiny_text_model, max_think=160, hf_batch_size=1)
    pid = ray_local.get(group.workers[1].info.remote())["pid"]
    killer = threading.Timer(1.0, lambda: os.kill(pid, signal.SIGKILL))
    killer.start()
    t0 = time.time()
    trajs = group.generate(_items(12), step=1)
    killer.join()
    assert time.time() - t0 > 1.0, "the batch must still have been running when the worker died"
    assert sorted({t.item_id for t in trajs}) == sorted(f"i{i}" for i in range(12))
    assert len(trajs) == 24
    assert len(group.failures) == 1 and "rollout worker 1 died mid-batch" in group.failures[0]

    # With no worker left, the error names the items that were not generated.
    ray_local.kill(group.workers[0])
    time.sleep(1)
    with pytest.raises(RolloutError, match="all 2 rollout workers died") as err:
        group.generate(_items(3), step=2)
    assert err.value.item_ids == ["i0", "i1", "i2"]


class EngineDeadError(RuntimeError):
    """Stands in for vLLM's exception of the same name (the group matches it by name)."""


def test_worker_whose_engine_died_is_dropped_and_its_items_rerun(ray_local):
    """Unit test of the group's bookkeeping, with stand-in workers instead of engines."""
    import ray

    from actors.rollout import RolloutGroup
    from rlcs.data import Trajectory

    @ray.remote(num_cpus=0)
    class StandIn:
        def __init__(self, broken: bool):
            self.broken = broken

        def info(self):
            return {"pid": os.getpid()}

        def generate(self, items, **kw):
            if self.broken:
                raise EngineDeadError("EngineCore encountered an issue")
            return [Trajectory(it.id, "ok", [1], [-0.1], "stop") for it in items]

    group = RolloutGroup([StandIn.remote(True), StandIn.remote(False)])
    trajs = group.generate(_items(6))
    assert [t.item_id for t in trajs] == [f"i{i}" for i in range(6)]
    assert group.alive == [1] and "its vLLM engine died" in group.failures[0]

    class Boom(ValueError):
        pass

    @ray.remote(num_cpus=0)
    class BadItems:
        def info(self):
            return {"pid": os.getpid()}

        def generate(self, items, **kw):
            raise Boom("bad image in item i0")

    with pytest.raises(Boom, match="bad image"):
        RolloutGroup([BadItems.remote()]).generate(_items(1))


def test_shipped_images_reach_the_workers_inside_the_items(
    ray_local, tiny_vlm, shapes_image, tmp_path
):
    """``cluster.ship_images``: the group reads each image on the driver and sends its bytes;
    the real workers answer exactly as when they open the files themselves."""
    import ray

    from actors.rollout import RolloutGroup
    from rlcs.data import Trajectory

    shapes_image.save(tmp_path / "shapes.png")
    items = [{"id": f"g{i}", "domain": "grounding", "prompt": "Where is the blue circle?",
              "images": [str(tmp_path / "shapes.png")]} for i in range(3)]  # fmt: skip
    cfg = dict(engine="hf", n=2, max_think_tokens=6, max_answer_tokens=6)
    group = RolloutGroup.create(str(tiny_vlm), cfg, num_workers=1)
    by_path = group.generate(items, step=0)
    group.ship_images = True
    shipped = group.generate(items, step=0)
    assert [t.token_ids for t in shipped] == [t.token_ids for t in by_path]
    ray.kill(group.workers[0])

    @ray.remote(num_cpus=0)
    class Recorder:
        """Stands in for a worker on a node without the file: records what it was sent."""

        def info(self):
            return {"pid": os.getpid()}

        def generate(self, items, **kw):
            self.items = items
            return [Trajectory(it.id, "ok", [1], [-0.1], "stop") for it in items]

        def sent(self):
            return self.items

    recorder = Recorder.remote()
    RolloutGroup([recorder], ship_images=True).generate(items)
    sent = ray.get(recorder.sent.remote())
    raw = (tmp_path / "shapes.png").read_bytes()
    import base64

    assert [it.images for it in sent] == [
        ["data:image/png;base64," + base64.b64encode(raw).decode()]
    ] * 3
    # the driver keeps its own items as they were: paths, for the learner and the samples
    assert items[0]["images"] == [str(tmp_path / "shapes.png")]
