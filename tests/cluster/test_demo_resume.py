"""`rlcs demo --resume`: an interrupted demo keeps its finished stages and runs the rest again."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from cluster import demo, demo_ledger
from rlcs.config import load_config


def args(run_dir, resume=False, config=None, overrides=(), minutes=14.0):
    return argparse.Namespace(run_dir=str(run_dir), config=config, dashboard_port=0, resume=resume,
                              overrides=list(overrides), minutes=minutes)  # fmt: skip


def test_ctrl_c_says_the_command_that_continues_with_the_same_flags(tmp_path, monkeypatch, capsys):
    seen = {}

    def interrupted(config, root, port, resume, overrides, budget_s, started=None):
        seen["budget_s"] = budget_s
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run", interrupted)
    root = tmp_path / "d"
    assert demo.main(args(root, overrides=["run.iterations=150"], minutes=0)) == 130
    assert seen["budget_s"] is None  # --minutes 0: no limit
    err = capsys.readouterr().err
    assert f"rlcs demo --resume --run-dir {root} --set run.iterations=150 --minutes=0 " in err
    assert demo.main(args(root, resume=True, minutes=2.5)) == 130
    assert seen["budget_s"] == 150.0
    assert "--minutes=2.5" in capsys.readouterr().err


def test_a_stage_stopped_by_a_failure_says_why_and_the_command_that_continues(
    tmp_path, monkeypatch, capsys
):
    from cluster.train import RunFailed

    def failed(config, root, port, resume, overrides, budget_s, started=None):
        raise RunFailed("a Learner actor died (ActorDiedError); the run stopped. ...")

    monkeypatch.setattr(demo, "run", failed)
    root = tmp_path / "d"
    assert demo.main(args(root)) == 1
    err = capsys.readouterr().err
    assert err.startswith("rlcs demo: a Learner actor died (ActorDiedError); the run stopped.")
    assert (
        f"kept: continue with `rlcs demo --resume --run-dir {root} --minutes=14 "
        "--dashboard-port=0`" in err
    )


def test_a_used_directory_needs_resume_and_a_demo_in_it(tmp_path, capsys):
    other = tmp_path / "other"
    (other / "data").mkdir(parents=True)
    (other / "data" / "keep.txt").write_text("not a demo's")
    assert demo.main(args(other)) == 2
    assert "--resume" in capsys.readouterr().err
    # --resume on a directory no demo wrote refuses, and removes nothing
    assert demo.main(args(other, resume=True)) == 2
    assert "holds no demo" in capsys.readouterr().err
    assert (other / "data" / "keep.txt").read_text() == "not a demo's"


def test_a_bad_set_is_refused_before_anything_is_written(tmp_path, capsys):
    root = tmp_path / "demo"
    assert demo.main(args(root, overrides=["run.iterations=many"])) == 2
    assert "run.iterations" in capsys.readouterr().err
    assert demo.main(args(root, overrides=["run.no_such_key=1"])) == 2
    assert "no_such_key" in capsys.readouterr().err
    # a time limit would apply to every stage, pretraining and SFT too: --minutes is the demo's
    assert demo.main(args(root, overrides=["run.max_wall_s=300"])) == 2
    err = capsys.readouterr().err
    assert "run.max_wall_s=300 is set" in err and "--minutes" in err
    assert not root.exists()


def test_the_ledger_keeps_stages_up_to_the_first_changed_one(tmp_path):
    first = demo_ledger.StageLedger(tmp_path, resume=False)
    for i, name in enumerate(demo_ledger.STAGES):
        assert not first.keep(name, {"lr": 1})
        (tmp_path / name).mkdir()
        (tmp_path / name / "out.txt").write_text(name)
        first.finished(name, {"lr": 1}, wall_s=10.0 + i)
    again = demo_ledger.StageLedger(tmp_path, resume=True)
    assert again.keep("data", {"lr": 1}) and again.keep("pretrain", {"lr": 1})
    assert not again.keep("sft", {"lr": 2})  # changed: it runs again, from an empty directory
    assert not (tmp_path / "sft").exists()
    assert not again.keep("rl", {"lr": 1})  # unchanged, but after a stage that ran again
    assert not (tmp_path / "rl").exists()
    assert again.kept == {"data": 10.0, "pretrain": 11.0}
    # without --resume nothing is kept
    assert not demo_ledger.StageLedger(tmp_path, resume=False).keep("data", {"lr": 1})


def test_an_evaluation_is_kept_with_its_checkpoint_and_decides_nothing_after_it(tmp_path):
    asked, figures = {"max_answer_tokens": 8}, {"all": {"pass_rate": 0.25, "reward": 0.5}}

    def attempt(sft: dict, evaluation: dict) -> demo_ledger.StageLedger:
        ledger = demo_ledger.StageLedger(tmp_path, resume=(tmp_path / "rl").exists())
        for name, settings in (("data", {}), ("pretrain", {}), ("sft", sft)):
            if not ledger.keep(name, settings):
                ledger.finished(name, settings, wall_s=1.0)
        if not ledger.keep("eval after SFT", evaluation, feeds_later=False):
            ledger.finished("eval after SFT", evaluation, wall_s=2.0, result=figures)
        if not ledger.keep("rl", {"iterations": 3}):
            ledger.finished("rl", {"iterations": 3}, wall_s=3.0)
        return ledger

    assert attempt({"lr": 1}, asked).kept == {}
    # the same again: every stage kept, the evaluation with its figures
    again = attempt({"lr": 1}, asked)
    assert set(again.kept) == {"data", "pretrain", "sft", "eval after SFT", "rl"}
    assert again.results["eval after SFT"] == figures
    # the evaluation asked otherwise runs again, and RL, which it does not feed, is still kept
    again = attempt({"lr": 1}, {"max_answer_tokens": 16})
    assert "eval after SFT" not in again.kept and "rl" in again.kept
    # SFT ran again: its evaluation, asked the same, runs again too
    again = attempt({"lr": 2}, {"max_answer_tokens": 16})
    assert set(again.kept) == {"data", "pretrain"}


def test_a_greedy_evaluation_is_asked_the_same_whatever_the_sampling():
    from types import SimpleNamespace

    from rlcs.config_roles import RolloutConfig

    items = [SimpleNamespace(id="a"), SimpleNamespace(id="b")]
    base = demo_ledger.eval_settings(RolloutConfig(), items, 2.0)
    sampled = RolloutConfig(n=4, temperature=0.7, top_p=0.9, num_workers=2)
    assert demo_ledger.eval_settings(sampled, items, 2.0) == base
    assert demo_ledger.eval_settings(RolloutConfig(max_answer_tokens=8), items, 2.0) != base
    assert demo_ledger.eval_settings(RolloutConfig(), items[:1], 2.0) != base
    assert demo_ledger.eval_settings(RolloutConfig(), items, 1.0) != base
    # the verifiers' options and the weights' dtype change the figures too
    assert demo_ledger.eval_settings(RolloutConfig(), items, 2.0, {"format": "boxed"}) != base
    assert demo_ledger.eval_settings(RolloutConfig(), items, 2.0, dtype="bfloat16") != base


def test_an_rl_only_edit_keeps_pretraining_and_sft(tmp_path):
    def settings(stage, *edits):
        return demo_ledger.stage_settings(
            demo.stage_config(demo.DEFAULT_CONFIG, tmp_path, stage, [f"stage={stage}", *edits])
        )

    rl_edits = ["rollout.temperature=1.0", "curriculum.policy=uniform", "run.iterations=3",
                "learner.grpo.kl_coef=0.05", 'data.domain_weights={"gui": 1.0}']  # fmt: skip
    for stage in ("pretrain", "sft"):
        assert settings(stage) == settings(stage, *rl_edits)
        # what the stage reads does count
        assert settings(stage) != settings(stage, "learner.weight_decay=0.1")
        assert settings(stage) != settings(stage, "data.seq_len=128")
    # RL's own stage counts every setting
    assert settings("rl") != settings("rl", "rollout.temperature=1.0")
    # but not the time limit the demo's budget gives it: a stage that finished is done
    # nor how the data is checked at load, which does not change it
    for stage in ("pretrain", "sft", "rl"):
        assert settings(stage) == settings(stage, "run.max_wall_s=300")
        assert settings(stage) == settings(stage, "data.image_check=header")


@pytest.mark.slow
def test_resume_runs_an_interrupted_rl_stage_again_and_keeps_the_rest(tmp_path, monkeypatch):
    import ray

    cfg = yaml.safe_load(demo.DEFAULT_CONFIG.read_text())
    cfg["data"]["synthetic"].update(
        domains=["math", "ocr"], sizes={"rl_train": 8, "heldout": 4, "sft": 8, "pretrain": 8}
    )
    cfg["rollout"]["n"] = 2
    cfg["run"].update(iterations=2, prompts_per_iteration=4)
    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump(cfg))
    short = ["learner.steps=2", "learner.global_batch=4", "learner.micro_batch=4"]
    monkeypatch.setattr(demo, "PRETRAIN", [*demo.PRETRAIN, *short])
    monkeypatch.setattr(demo, "SFT", [*demo.SFT, *short])
    root = tmp_path / "demo"
    try:
        # a budget spent before RL starts: RL still runs one iteration, and stops there
        first = demo.run(config, root, dashboard_port=None, budget_s=1.0)
        assert first["kept_stages"] == {} and first["rl_iterations"] == 1
        assert first["rl_continue"] == (
            f"rlcs train {root / 'rl' / 'config.yaml'} --resume --set run.max_wall_s=null"
        )
        assert load_config(root / "rl" / "config.yaml").run.max_wall_s == 1.0
        assert {"sft_pass_rate", "rl_pass_rate"} <= set(
            json.loads((root / "demo.json").read_text())
        )
        weights = {
            s: (root / s / "hf" / "config.json").stat().st_mtime_ns for s in ("pretrain", "sft")
        }
        # RL died before it finished: its directory holds a partial run and no completion mark
        (root / "rl" / demo_ledger.STAGE_DONE).unlink()
        (root / "rl" / "stale.txt").write_text("from the attempt that died")
        # and the RL settings were edited: pretraining and SFT do not read them
        cfg["rollout"]["temperature"] = 1.0
        config.write_text(yaml.safe_dump(cfg))
        # and more RL iterations asked for with --set
        second = demo.run(config, root, None, resume=True, overrides=["run.iterations=3"])
    finally:
        ray.shutdown()
    from rlcs.runlog import read_metrics

    records = read_metrics(root / "rl")
    assert max(r["step"] for r in records) == 3 == second["rl_iterations"]
    # the SFT checkpoint's evaluation is RL's step 0, where the dashboard's held-out curve starts
    assert records[0]["step"] == 0 and "reward/mean" not in records[0]
    for d, figures in second["before"].items():
        assert records[0][f"eval/pass_rate/{d}"] == figures["pass_rate"]
    assert second["rl_continue"] is None  # RL ran to its end
    # SFT's held-out evaluation too: the same checkpoint, asked the same (the RL temperature
    # is not read by a greedy evaluation)
    assert set(second["kept_stages"]) == {"data", "pretrain", "sft", "eval after SFT"}
    assert second["stage_wall_s"]["rl"] > 0 and second["stage_wall_s"]["eval after SFT"] == 0
    for s, mtime in weights.items():
        assert (root / s / "hf" / "config.json").stat().st_mtime_ns == mtime, s
    assert not (root / "rl" / "stale.txt").exists()
    assert (root / "rl" / demo_ledger.STAGE_DONE).is_file() and (root / "rl" / "hf").is_dir()
    assert second["before"] == first["before"]
    assert "kept from an earlier attempt" in (root / "report.md").read_text()


def test_no_chromium_for_the_gui_pages_is_said_before_anything_is_written(
    tmp_path, monkeypatch, capsys
):
    from rlcs.tasks import gui

    monkeypatch.setenv(gui.CHROMIUM_ENV, str(tmp_path / "no-chromium-here"))
    monkeypatch.setattr(demo, "run", lambda *a, **k: pytest.fail("the demo started"))
    root = tmp_path / "demo"
    assert demo.main(args(root)) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlcs demo: $RLCS_CHROMIUM=") and "not an executable file" in err
    assert not root.exists()
    # without the GUI domain no browser is needed
    monkeypatch.setattr(demo, "run", lambda *a, **k: None)
    assert demo.main(args(root, overrides=["data.synthetic.domains=[math,ocr]"])) == 0
    # nor for a demo resumed after its data stage finished
    from rlcs.dashboard import DEMO_MARKER

    resumed = tmp_path / "resumed"
    (resumed / "data").mkdir(parents=True)
    (resumed / DEMO_MARKER).write_text("{}")
    (resumed / "data" / demo_ledger.STAGE_DONE).write_text("{}")
    assert demo.main(args(resumed, resume=True)) == 0


@pytest.mark.parametrize(
    "record",
    ['{"settings": {"lr": 1}, "wall_s"', "[1, 2]", '{"settings": {"lr": 1}}', "\udcff"],
    ids=["torn", "not-an-object", "no-wall-time", "not-utf8"],
)
def test_a_stage_record_that_cannot_be_read_is_a_clear_error(tmp_path, record):
    ledger = demo_ledger.StageLedger(tmp_path, resume=False)
    ledger.finished("data", {"lr": 1}, wall_s=1.0)
    marker = tmp_path / "data" / demo_ledger.STAGE_DONE
    marker.write_bytes(record.encode("utf-8", "surrogateescape"))
    with pytest.raises(demo_ledger.LedgerError) as e:
        demo_ledger.StageLedger(tmp_path, resume=True).keep("data", {"lr": 1})
    assert str(e.value).startswith(f"--resume: {marker} cannot be read (")
    assert "remove that file and the data stage runs again" in str(e.value)
    assert marker.is_file()  # nothing removed
    # without --resume the record is not read: the stage runs again from an empty directory
    assert not demo_ledger.StageLedger(tmp_path, resume=False).keep("data", {"lr": 1})
    assert not (tmp_path / "data").exists()


def test_an_evaluation_without_its_figures_is_not_kept(tmp_path):
    ledger = demo_ledger.StageLedger(tmp_path, resume=False)
    ledger.finished("eval after SFT", {"cpus": 2}, wall_s=9.0)  # no result recorded
    again = demo_ledger.StageLedger(tmp_path, resume=True)
    assert not again.keep("eval after SFT", {"cpus": 2}, feeds_later=False)
    assert again.keeping  # it decides nothing for the stages after it
    assert not (tmp_path / "eval-sft").exists()
