"""--resume keeps the curriculum settings saved with the sampler's state, and says so when the
config asks for others."""

import logging
from pathlib import Path

from actors.sampler import LocalCurriculumSampler
from cluster.resume_check import warn_curriculum_changes
from rlcs.config import load_config
from rlcs.data import Item

ROOT = Path(__file__).resolve().parents[2]


def saved_run(tmp_path: Path, sets: list[str]):
    cfg = load_config(ROOT / "configs" / "tiny-text.yaml", sets)
    items = [Item(id=f"m-{i}", domain="math", prompt="?", difficulty=0.5) for i in range(8)]
    LocalCurriculumSampler(tmp_path, items=items, config=cfg.curriculum).save()
    return cfg


def test_same_settings_resume_quietly(tmp_path, caplog):
    cfg = saved_run(tmp_path, ["curriculum.weight_power=2.0"])
    with caplog.at_level(logging.WARNING):
        assert warn_curriculum_changes(cfg, tmp_path) == []
    assert not caplog.records


def test_changed_settings_are_named_in_a_warning(tmp_path, caplog):
    saved_run(tmp_path, ["curriculum.weight_power=2.0", "curriculum.policy=rlcs"])
    asked = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        ["curriculum.weight_power=1.0", "curriculum.policy=uniform"],
    )
    with caplog.at_level(logging.WARNING):
        changes = warn_curriculum_changes(asked, tmp_path)
    assert changes == ["policy: 'rlcs' -> 'uniform'", "weight_power: 2.0 -> 1.0"]
    (record,) = caplog.records
    message = record.getMessage()
    assert "not applied" in message and "weight_power: 2.0 -> 1.0" in message
