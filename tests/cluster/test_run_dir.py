"""A run's directory claimed for a run (``cluster.run_dir``): what an earlier launch left is
refused, kept for --resume, or cleared when it stopped before its first step."""

from __future__ import annotations

import pytest

from cluster.run_dir import prepare_run_dir
from rlcs.config import load_config


def test_a_run_that_stopped_before_its_first_step_starts_over(tmp_path):
    """A run that stopped at Ray's start or the roles' placement left its config, an empty
    checkpoints folder and its tiny model: the same command runs it again, without --resume,
    from the current config; the synthetic data stays. A run that logged a step is refused."""
    cfg = load_config(None, ["model.tiny=text", f"run.root={tmp_path}", "run.name=r"])
    run = cfg.run_dir
    for d in ("checkpoints", "samples", "model", "data"):
        (run / d).mkdir(parents=True)
    (run / "config.yaml").write_text("stage: rl\n")
    (run / "model" / "config.json").write_text("{}")
    (run / "data" / "rl_train.jsonl").write_text("{}\n")
    (run / "metrics.jsonl").write_text("")
    assert prepare_run_dir(cfg, resume=False) == run
    assert sorted(p.name for p in run.iterdir()) == ["data"]
    assert (run / "data" / "rl_train.jsonl").read_text() == "{}\n"

    (run / "config.yaml").write_text("stage: rl\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(
        FileExistsError, match=r"already holds a run \(config.yaml, metrics.jsonl\)"
    ):
        prepare_run_dir(cfg, resume=False)
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'
    (run / "metrics.jsonl").unlink()
    (run / "checkpoints" / "step_00000004").mkdir(parents=True)
    with pytest.raises(FileExistsError, match=r"\(config.yaml, checkpoints\)"):
        prepare_run_dir(cfg, resume=False)
    assert (run / "checkpoints" / "step_00000004").is_dir()
