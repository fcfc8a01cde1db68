import json

from rlcs.report import write_report
from rlcs.runlog import RunLog, read_metrics


def test_metrics_samples_and_tensorboard(tmp_path):
    with RunLog(tmp_path) as log:
        for step in range(1, 4):
            log.log(
                step,
                {"reward/mean": 0.1 * step, "reward/math": 0.2, "loss": 1.0 / step, "note": "x"},
            )
        log.samples(3, [{"item_id": "a", "response": "<think></think>", "reward": 1.0}])
    recs = read_metrics(tmp_path)
    assert [r["step"] for r in recs] == [1, 2, 3] and recs[2]["reward/mean"] == 0.30000000000000004
    assert json.loads((tmp_path / "samples" / "step_000003.jsonl").read_text())["item_id"] == "a"
    assert any(
        p.name.startswith("events.out.tfevents") for p in (tmp_path / "tensorboard").iterdir()
    )


def test_resume_drops_steps_after_the_checkpoint(tmp_path):
    with RunLog(tmp_path, tensorboard=False) as log:
        for step in range(1, 6):
            log.log(step, {"loss": float(step)})
    with RunLog(tmp_path, resume_step=3, tensorboard=False) as log:
        log.log(4, {"loss": 40.0})
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path)] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 40.0),
    ]


def test_resume_keeps_the_checkpoints_step_in_tensorboard(tmp_path):
    """A run resumed from its checkpoint of step 3 logs again from step 4: TensorBoard drops
    what the first attempt logged past step 3 and keeps step 3 itself, as metrics.jsonl does."""
    import time

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunLog(tmp_path) as log:
        for step in range(1, 6):
            log.log(step, {"loss": float(step)})
    time.sleep(1.1)  # a new event file (they are named by the second they start)
    with RunLog(tmp_path, resume_step=3) as log:
        log.log(4, {"loss": 40.0})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("rl/loss")] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 40.0),
    ]


def test_torn_last_line_is_skipped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo')
    assert read_metrics(tmp_path) == [{"step": 1, "loss": 1.0}]


def test_report_has_plots_and_last_values(tmp_path):
    with RunLog(tmp_path, tensorboard=False) as log:
        for step in range(1, 6):
            log.log(
                step,
                {"reward/mean": step / 5, "pass_rate/tier/medium": 0.5, "loss": 1.0 / step,
                 "curriculum/groups": 40.0 + step, "curriculum/selected": 32.0},
            )  # fmt: skip
    report = write_report(tmp_path, title="tiny")
    text = report.read_text()
    assert text.startswith("# tiny") and "![Reward](report/rl-reward.png)" in text
    assert "| reward/mean | 1 |" in text
    assert (tmp_path / "report" / "rl-reward.png").stat().st_size > 2000
    # what became of each iteration's groups has a plot of its own
    assert "(report/rl-groups_a_step.png)" in text and "| curriculum/groups | 45 |" in text
    assert "Held-out" not in text  # a panel with nothing logged is left out
    assert "5 steps." in text


def test_report_counts_the_evaluation_before_training_apart_from_the_steps(tmp_path):
    with RunLog(tmp_path, tensorboard=False) as log:
        log.log(0, {"eval/pass_rate/all": 0.5, "eval/pass_rate/math": 0.25})
        for step in (1, 2):
            log.log(step, {"reward/mean": 0.5, "eval/pass_rate/all": 0.5 + step / 10})
    text = write_report(tmp_path, title="tiny").read_text()
    assert "2 steps, and the held-out evaluation before the first (step 0)." in text
    assert "![Held-out pass rate (greedy)](report/rl-held-out_pass_rate.png)" in text
