"""The CurriculumSampler actor on a real local Ray: the loop, bad reports, save and restore."""

from __future__ import annotations

import pytest

from rlcs.data import Item

ray = pytest.importorskip("ray")

from actors.sampler import CurriculumSampler  # noqa: E402


@pytest.fixture(scope="module")
def ray_local():
    # A fresh local instance on loopback, never another Ray that happens to run on the machine.
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    yield
    ray.shutdown()


def items() -> list[Item]:
    return [
        Item(id=f"{d}-{i}", domain=d, prompt="?", difficulty=(i % 10) / 10 + 0.05)
        for d in ("math", "ocr")
        for i in range(40)
    ]


def test_actor_samples_reports_rejects_saves_and_restores(ray_local, tmp_path):
    sampler = CurriculumSampler.remote(
        str(tmp_path), items=items(), config={"seed": 1}, domain_weights={"math": 3, "ocr": 1}
    )
    ids = ray.get(sampler.next_batch.remote(8))
    assert len(ids) == len(set(ids)) == 8
    assert sum(i.startswith("math") for i in ids) == 6  # 3:1 domain proportions
    result = ray.get(sampler.report.remote({i: [1.0, 0.0, 1.0, 1.0] for i in ids}))
    assert result["valid_groups"] == 8 and len(result["selected"]) == 8

    with pytest.raises(ray.exceptions.RayTaskError, match=r"unknown: \['math-999'\]"):
        ray.get(sampler.report.remote([("math-999", [1.0])]))
    with pytest.raises(ray.exceptions.RayTaskError, match="duplicate"):
        ray.get(sampler.report.remote([{"item_id": ids[0], "rewards": [0.0, 1.0]}]))
    stats = ray.get(sampler.stats.remote())
    assert stats["rejected"] == {"unknown": 1, "duplicate": 1, "not_sampled": 0}
    assert stats["iteration"] == 1 and sum(stats["tiers"].values()) == 80

    ray.get(sampler.save.remote())
    expected = ray.get(sampler.next_batch.remote(8))
    assert ray.get(sampler.restore.remote()) == 1
    assert ray.get(sampler.next_batch.remote(8)) == expected
    assert (tmp_path / "curriculum" / "LATEST").is_file()
    assert (tmp_path / "curriculum" / "aggregates.sqlite").is_file()
    ray.kill(sampler)
