"""`rlcs demo` from end to end with its stages' training and evaluation replaced by stand-ins:
the real data stage (two cheap domains, a few items), ledger, budget, table, report and
RESULT line, in a second."""

from __future__ import annotations

import argparse
import json
import re
import socket
import time
from pathlib import Path

import pytest
import yaml

import cluster.evaluate
import cluster.train
import rlcs.report
from cluster import demo, demo_ledger
from cluster.train import eval_metrics
from rlcs.runlog import RunLog

#: the stand-ins' held-out pass rates: the SFT checkpoint's and RL's, per domain
SFT_RATES = {"math": 0.5, "ocr": 0.75}
RL_RATES = {"math": 0.75, "ocr": 0.75}


class Stages:
    """Stand-ins for ``cluster.train.train`` and ``cluster.evaluate.evaluate``: what they were
    asked, and RL's iterations (``rl_iterations`` of them, each domain's reward rising)."""

    def __init__(self):
        self.trained: list = []
        self.evaluated: list[Path] = []
        self.bars: list[tuple[bool, str]] = []
        self.rl_iterations = 3
        self.fail_eval: BaseException | None = None
        self.eval_s = 0.0  # how long an evaluation takes

    def train(self, cfg, resume=False, baseline=None):
        self.trained.append(cfg)
        run_dir = cfg.run_dir
        (run_dir / "hf").mkdir(parents=True, exist_ok=True)
        (run_dir / "hf" / "config.json").write_text('{"vision_config": {}}')  # a VLM's
        if cfg.stage == "rl":
            with RunLog(run_dir, tensorboard=False) as log:
                if baseline is not None:
                    log.log(0, eval_metrics(baseline))
                last = min(self.rl_iterations, cfg.run.iterations)
                for it in range(1, last + 1):
                    metrics = {"reward/mean": 0.5, "reward/math": 0.1 * it, "pass_rate/math": 0.0,
                               "reward/ocr": 0.9, "pass_rate/ocr": 0.9}  # fmt: skip
                    if it == last and cfg.run.eval_every:  # as the trainer evaluates its last
                        metrics.update(eval_metrics(self.figures(RL_RATES)))
                    log.log(it, metrics)
        (run_dir / "report.md").write_text(f"# {cfg.stage}")
        return run_dir

    def evaluate(self, model, items, rollout, num_cpus=1.0, reward_options=None, dtype="float32",
                 progress=False, desc="eval"):  # fmt: skip
        self.evaluated.append(Path(model))
        self.bars.append((progress, desc))
        time.sleep(self.eval_s)
        if self.fail_eval is not None:
            raise self.fail_eval
        return self.figures(SFT_RATES if Path(model).parent.name == "sft" else RL_RATES)

    @staticmethod
    def figures(rates: dict[str, float]) -> dict[str, dict[str, float]]:
        out = {d: {"pass_rate": r, "reward": r} for d, r in rates.items()}
        out["all"] = {"pass_rate": sum(rates.values()) / len(rates), "reward": 0.0}
        return out


@pytest.fixture
def stages(monkeypatch) -> Stages:
    s = Stages()
    monkeypatch.setattr(cluster.train, "train", s.train)
    monkeypatch.setattr(cluster.train, "connect_ray", lambda cfg: None)
    monkeypatch.setattr(cluster.evaluate, "evaluate", s.evaluate)
    monkeypatch.setattr(rlcs.report, "line_plot", lambda path, *a, **k: path.write_bytes(b"png"))
    monkeypatch.setenv("COLUMNS", "80")  # as in a CI log
    return s


@pytest.fixture
def config(tmp_path) -> Path:
    cfg = yaml.safe_load(demo.DEFAULT_CONFIG.read_text())
    cfg["data"]["synthetic"].update(
        domains=["math", "ocr"], sizes={"rl_train": 4, "heldout": 2, "sft": 2, "pretrain": 2}
    )
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def args(run_dir, config, resume=False, overrides=(), minutes=14.0, port=0):
    return argparse.Namespace(run_dir=str(run_dir), config=str(config), dashboard_port=port,
                              resume=resume, overrides=list(overrides), minutes=minutes)  # fmt: skip


def said(err: str) -> str:
    """What the demo said on stderr, after the data stage's progress bar."""
    return err[err.index("rlcs demo: ") :]


def test_the_result_line_and_the_table_come_from_the_same_held_out_figures(
    stages, config, tmp_path, capsys
):
    root = tmp_path / "demo"
    summary = demo.run(config, root, None)
    out = capsys.readouterr().out
    last = out.rstrip("\n").splitlines()[-1]
    # the mean over the domains after SFT (0.625) and after RL (0.75); the smallest domain's
    # mean training reward (math: 0.1, 0.2, 0.3)
    assert re.fullmatch(
        r"RESULT sft_pass_rate=0\.6250 rl_pass_rate=0\.7500 gain_points=12\.50 "
        r"min_domain_rl_reward=0\.2000 wall_s=\d+\.\d",
        last,
    ), last
    assert re.search(r"math\s+│\s+50\.0%\s+│\s+75\.0%\s+│\s+\+25\.0\s+│\s+0\.200", out)
    assert re.search(r"all\s+│\s+62\.5%\s+│\s+75\.0%\s+│\s+\+12\.5\s+│", out)
    assert summary["rl_reward"] == pytest.approx({"math": 0.2, "ocr": 0.9})
    assert json.loads((root / "demo.json").read_text())["gain_points"] == 12.5
    report = (root / "report.md").read_text()
    assert last in report and "| all | 62.5% | 75.0% | +12.5 |  |" in report
    for png in re.findall(r"\]\((report/[^)]+\.png)\)", report):  # every plot it shows exists
        assert (root / png).is_file()
    # RL's evaluation at its last iteration is the figure after RL: its model is not evaluated
    # a second time; the SFT checkpoint's evaluation shows a progress bar
    assert [p.parent.name for p in stages.evaluated] == ["sft"]
    assert stages.bars == [(True, "eval after SFT")]
    assert list(summary["stage_wall_s"]) == ["data", "pretrain", "sft", "eval after SFT", "rl"]


def test_an_rl_stage_that_did_not_evaluate_its_last_iteration_has_its_model_evaluated(
    stages, config, tmp_path, capsys
):
    stages.eval_s = 1.5
    summary = demo.run(config, tmp_path / "a", None, overrides=["run.eval_every=0"], budget_s=840)
    assert [p.parent.name for p in stages.evaluated] == ["sft", "rl"]
    assert stages.bars == [(True, "eval after SFT"), (True, "eval after RL")]
    assert summary["rl_pass_rate"] == 0.75 and summary["gain_points"] == 12.5
    assert "eval after RL" in summary["stage_wall_s"]
    # the budget kept back from RL as long again as the SFT checkpoint's evaluation took
    demo.run(config, tmp_path / "b", None, budget_s=840)
    kept = re.findall(r"stopping after the one that leaves (\d+)s of", capsys.readouterr().out)
    assert int(kept[0]) >= demo.AFTER_RL_S + 1.5 and int(kept[1]) == demo.AFTER_RL_S


def test_the_figures_after_rl_are_those_of_rls_last_record_with_every_domain():
    like = {"math": {}, "all": {}}
    ev = eval_metrics(
        {"math": {"pass_rate": 0.5, "reward": 0.6}, "all": {"pass_rate": 0.5, "reward": 0.6}}
    )
    assert demo.rl_final_figures([{"step": 0, **ev}, {"step": 1}], like) is None
    assert demo.rl_final_figures([{"step": 0, **ev}], like) is None  # no iteration ran
    records = [{"step": 1}, {"step": 2, "reward/mean": 0.1, **ev}]
    assert demo.rl_final_figures(records, like) == {
        "math": {"pass_rate": 0.5, "reward": 0.6},
        "all": {"pass_rate": 0.5, "reward": 0.6},
    }
    assert demo.rl_final_figures(records, {**like, "ocr": {}}) is None  # a domain left out


def test_the_wall_time_counts_from_the_commands_start_to_the_drawn_report(
    stages, config, tmp_path, monkeypatch
):
    drawn = []

    def slow_plot(path, *a, **k):
        time.sleep(0.2)
        path.write_bytes(b"png")
        drawn.append(time.perf_counter())

    monkeypatch.setattr(rlcs.report, "line_plot", slow_plot)
    started = time.perf_counter() - 5.0  # the command started 5 s before its first stage
    summary = demo.run(config, tmp_path / "demo", None, started=started)
    assert summary["wall_s"] >= max(drawn) - started >= 5.4


def test_long_lines_are_not_wrapped_nor_read_as_markup(stages, config, tmp_path, capsys):
    stages.rl_iterations = 2  # the budget stopped RL: the demo prints the command that goes on
    root = tmp_path / "a [b]" / ("long-" * 12 + "demo")
    summary = demo.run(config, root, None)
    out = capsys.readouterr().out
    assert summary["rl_continue"] and f"without a limit: {summary['rl_continue']} " in out
    assert f"report: {root / 'report.md'}\n" in out
    assert f"rlcs eval {root / 'rl'} --samples 4\n" in out


def test_resume_keeps_the_finished_stages_and_writes_the_report_again(stages, config, tmp_path):
    root = tmp_path / "demo"
    first = demo.run(config, root, None)
    (root / "rl" / demo_ledger.STAGE_DONE).unlink()  # RL was killed
    second = demo.run(config, root, None, resume=True)
    assert set(second["kept_stages"]) == {"data", "pretrain", "sft", "eval after SFT"}
    assert [c.stage for c in stages.trained] == ["pretrain", "sft", "rl", "rl"]
    assert second["before"] == first["before"] and second["rl_pass_rate"] == 0.75
    report = (root / "report.md").read_text()
    assert report.count("# rlcs demo") == 1 and report.count("| total |") == 1
    assert "| sft | kept from an earlier attempt" in report
    assert not list(root.glob("*.tmp"))


def test_an_evaluation_whose_worker_dies_says_so_and_how_to_continue(
    stages, config, tmp_path, capsys
):
    import ray.exceptions

    stages.fail_eval = ray.exceptions.ActorDiedError()
    root = tmp_path / "demo"
    assert demo.main(args(root, config)) == 1
    err = said(capsys.readouterr().err)
    assert err.startswith("rlcs demo: the held-out evaluation (eval after SFT) of ")
    assert "its rollout worker died (ActorDiedError)" in err
    assert "the stages that finished are kept: continue with `rlcs demo --resume" in err
    # a failure raised in the worker: its first line
    stages.fail_eval = ray.exceptions.RayTaskError(
        "generate", "traceback", RuntimeError("out of memory\nmore")
    ).as_instanceof_cause()
    assert demo.main(args(root, config, resume=True)) == 1
    assert "stopped: RuntimeError: out of memory\n" in capsys.readouterr().err


def test_an_empty_split_is_refused_before_anything_is_written(stages, config, tmp_path, capsys):
    root = tmp_path / "demo"
    sizes = '{"rl_train": 4, "heldout": 0, "sft": 2, "pretrain": 2}'
    assert demo.main(args(root, config, overrides=[f"data.synthetic.sizes={sizes}"])) == 2
    err = capsys.readouterr().err
    assert "data.synthetic.sizes gives no heldout items" in err
    assert not root.exists() and not stages.trained


def test_rl_data_that_rl_refuses_stops_the_demo_before_pretraining(
    stages, config, tmp_path, capsys
):
    root = tmp_path / "demo"
    weights = 'data.domain_weights={"gui": 1.0}'  # the data has math and ocr only
    assert demo.main(args(root, config, overrides=[weights])) == 2
    err = said(capsys.readouterr().err)
    assert err.startswith("rlcs demo: the RL stage's data: data.domain_weights names 'gui'")
    assert not stages.trained  # not after pretraining and SFT
    assert (root / "data" / demo_ledger.STAGE_DONE).is_file()  # kept for --resume


def test_a_corrupted_stage_record_is_a_clear_error(stages, config, tmp_path, capsys):
    root = tmp_path / "demo"
    demo.run(config, root, None)
    capsys.readouterr()
    (root / "sft" / demo_ledger.STAGE_DONE).write_text('{"settings": {"stage": "sf')
    assert demo.main(args(root, config, resume=True)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlcs demo: --resume: {root / 'sft' / demo_ledger.STAGE_DONE} cannot")
    assert "remove that file and the sft stage runs again" in err
    assert (root / "sft" / "hf").is_dir()  # nothing removed


def test_a_port_taken_since_the_start_leaves_rl_without_the_dashboard(
    stages, config, tmp_path, capsys, monkeypatch
):
    started = []
    monkeypatch.setattr(demo, "start_dashboard", lambda *a: started.append(a))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        summary = demo.run(config, tmp_path / "demo", port)
    assert not started and summary["rl_iterations"] == 3
    out = capsys.readouterr().out
    assert f"curriculum dashboard: not served (cannot listen on 127.0.0.1:{port}" in out
    assert "http://" not in out


def test_a_budget_spent_before_rl_is_said_so():
    line = demo.rl_budget_line(60.0, spent_s=300.0, limit_s=1.0, iterations=100)
    assert "budget (--minutes) is spent" in line and "took 300s" in line
    assert "RL runs one iteration" in line
    line = demo.rl_budget_line(840.0, spent_s=300.0, limit_s=495.0, iterations=100)
    assert line.startswith("RL: up to 100 iterations") and "run.max_wall_s=495" in line


def test_the_resume_command_keeps_a_dashboard_port_other_than_the_default(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(demo, "run", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    root = tmp_path / "d"
    assert demo.main(args(root, demo.DEFAULT_CONFIG)) == 130
    assert "--minutes=14 --dashboard-port=0`" in capsys.readouterr().err
    monkeypatch.setattr(demo, "DASHBOARD_PORT", 0)  # the default: not repeated
    assert demo.main(args(root, demo.DEFAULT_CONFIG, resume=True)) == 130
    assert "--minutes=14`" in capsys.readouterr().err


def test_a_kept_stage_whose_model_was_removed_runs_again(stages, config, tmp_path):
    from rlcs.tasks import SPLITS

    assert set(demo.STAGE_OUTPUTS["data"]) == {f"{s}.jsonl" for s in SPLITS}
    root = tmp_path / "demo"
    demo.run(config, root, None)
    import shutil

    shutil.rmtree(root / "sft" / "hf")  # to save room, say
    again = demo.run(config, root, None, resume=True)
    assert set(again["kept_stages"]) == {"data", "pretrain"}
    assert [c.stage for c in stages.trained] == ["pretrain", "sft", "rl", "sft", "rl"]
    assert (root / "sft" / "hf" / "config.json").is_file()
