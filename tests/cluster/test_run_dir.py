"""A run's directory claimed for a run (``cluster.run_dir``): what an earlier launch left is
refused, kept for --resume, or cleared when it stopped before its first step; and what an
interrupted run says it left to resume from."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.run_dir import prepare_run_dir, where_to_resume
from rlcs.config import load_config
from rlcs.runlog import write_resolved

ROOT = Path(__file__).resolve().parents[2]
SFT = ["stage=sft", "model.tiny=text"]


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


def test_ctrl_c_ends_the_run_in_one_line_saying_how_to_go_on(tmp_path, monkeypatch, capsys):
    """(A SIGINT to a real `rlcs train` after its third checkpoint printed the last of these
    and exited 130; `--resume` then went on from step 3.)"""
    import argparse

    import cluster.train as train_mod

    def interrupted(cfg, resume=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_mod, "train", interrupted)
    args = argparse.Namespace(config=str(ROOT / "configs" / "tiny-text.yaml"),
                              overrides=[f"run.root={tmp_path}"], resume=False)  # fmt: skip
    run = tmp_path / "tiny-text"
    assert train_mod.main(args) == 130
    assert capsys.readouterr().err == (
        f"rlcs train: interrupted; it stopped before its first step: the same command starts "
        f"it over in {run}\n"
    )
    cfg = load_config(ROOT / "configs" / "tiny-text.yaml", [f"run.root={tmp_path}"])
    write_resolved(cfg, run)
    (run / "checkpoints").mkdir()
    assert where_to_resume(cfg) == (
        f"no checkpoint was saved yet in {run}: the same command with --resume starts it over"
    )
    sft = load_config(ROOT / "configs" / "tiny-text.yaml", [*SFT, f"run.root={tmp_path}"])
    (run / "checkpoints" / "step_00000006").mkdir()
    (run / "checkpoints" / "latest").write_text("step_00000006")
    assert where_to_resume(sft) == (
        f"its checkpoint of step 6 is intact in {run}: continue with --resume"
    )
