"""The dashboard's plots of a run's metrics.jsonl: held-out evaluations, the training reward by
domain, and what became of each iteration's groups and rollouts. The reader is tested on a file
written as a run writes it (appended, torn, rewritten on resume); the plots in real Chromium
against the real app under uvicorn."""

from __future__ import annotations

import json

import numpy as np

from rlcs.config import CurriculumConfig
from rlcs.curriculum import curriculum_from_items
from rlcs.dashboard.metrics import MetricsLog
from rlcs.data import Item


def _eval_line(step: int, greedy: float | None, sampled: float | None = None) -> str:
    rec = {"step": step, "stage": "rl", "reward/mean": 0.5}
    if greedy is not None:
        rec |= {"eval/pass_rate/math": greedy, "eval/pass_rate/ocr": 1.0,
                "eval/pass_rate/all": (greedy + 1.0) / 2, "eval/reward/all": 0.9}  # fmt: skip
    if sampled is not None:
        rec |= {"eval/sampled_pass_rate/all": sampled, "eval/pass_at_k/all": min(1.0, 2 * sampled)}
    return json.dumps(rec) + "\n"


def _iteration_line(step: int, math: float, unscorable: int = 0, filtered: int | None = None):
    """One RL iteration's record, with the keys the driver writes (cluster/rl_iteration.py)."""
    rec = {"step": step, "stage": "rl", "loss": 0.1, "reward/math": math, "reward/ocr": 1.0,
           "reward/mean": (math + 1.0) / 2, "pass_rate/math": math, "curriculum/groups": 20.0,
           "curriculum/selected": 16.0, "curriculum/generation_rounds": 2.0,
           "errors/reward": float(unscorable), "errors/dropped_rollouts": float(unscorable),
           "errors/format": 3.0, "errors/degenerate": 1.0,
           "curriculum/tier/easy": 7.0}  # fmt: skip
    if filtered is not None:
        rec["curriculum/filtered"] = float(filtered)
    return json.dumps(rec) + "\n"


def _curriculum_run(tmp_path, dashboard, iterations: int):
    """A run directory with the sampler's state after ``iterations`` simulated iterations over
    50 math items, and no metrics.jsonl yet."""
    items = [Item(id=f"m{i}", domain="math", prompt="?") for i in range(50)]
    cur = curriculum_from_items(items, CurriculumConfig(seed=0))
    run = tmp_path / "run"
    cur.attach(run)
    dashboard.simulate(cur, iterations, np.random.default_rng(0), np.full(cur.num_items, 0.5))
    return run


def test_metrics_log_reads_what_is_appended_and_starts_over_when_rewritten(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    assert log.heldout()["steps"] == [] and log.last_step() is None  # no file yet
    path.write_text(_eval_line(1, None) + _eval_line(2, 0.5) + '{"step": 3, "eval/pass')
    got = log.heldout()  # the torn last line waits
    assert got["steps"] == [2]
    assert got["pass_rate"] == {"all": [0.75], "math": [0.5], "ocr": [1.0]}
    assert got["sampled_pass_rate"] == {} and got["pass_at_k"] == {}
    assert log.last_step() == 2
    with path.open("a") as f:  # the line is finished, and another comes
        f.write('_rate/all": 0.8}\n' + _eval_line(4, 0.6, sampled=0.3))
    got = log.heldout()
    assert got["steps"] == [2, 3, 4]
    assert got["pass_rate"]["all"] == [0.75, 0.8, 0.8]
    assert got["pass_rate"]["math"] == [0.5, None, 0.6]
    assert got["sampled_pass_rate"] == {"all": [None, None, 0.3]}
    assert got["pass_at_k"] == {"all": [None, None, 0.6]}
    # a resumed run rewrites the file: shorter, and a new file
    tmp = tmp_path / "metrics.jsonl.tmp"
    tmp.write_text(_eval_line(2, 0.25))
    tmp.replace(path)
    assert log.heldout()["pass_rate"]["math"] == [0.25]
    assert log.last_step() == 2


def test_training_figures_by_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        json.dumps({"step": 0, "stage": "rl", "eval/pass_rate/all": 0.5}) + "\n"  # before RL
        + _iteration_line(1, 0.25) + _iteration_line(2, 0.5, unscorable=4)
        + "not json at all\n" + json.dumps([1, 2]) + "\n"  # skipped, not fatal
        + json.dumps({"step": 2, "eval/pass_rate/all": 0.6}) + "\n"  # the evaluation after it
    )  # fmt: skip
    log = MetricsLog(path)
    got = log.training()
    assert got["steps"] == [1, 2]  # the steps that logged a training reward
    assert got["reward"] == {"math": [0.25, 0.5], "mean": [0.625, 0.75], "ocr": [1.0, 1.0]}
    assert got["groups"] == {"rolled out": [20.0, 20.0], "trained": [16.0, 16.0]}
    assert got["rollouts"] == {
        "could not be scored": [0.0, 4.0],
        "left out of training": [0.0, 4.0],
        "format error": [3.0, 3.0],
        "degenerate thinking": [1.0, 1.0],
    }
    assert got["generation_rounds"] == [2.0, 2.0]
    assert log.heldout()["steps"] == [0, 2]  # one step can hold both
    # a run with a group filter logs how many groups it turned away
    with path.open("a") as f:
        f.write(_iteration_line(3, 0.75, filtered=5))
    assert log.training()["groups"]["filtered out"] == [None, None, 5.0]


def test_heldout_plot_follows_the_runs_evaluations(browser, tmp_path, dashboard):
    run = _curriculum_run(tmp_path, dashboard, iterations=4)
    (run / "metrics.jsonl").write_text(_eval_line(2, 0.5, sampled=0.25))
    with dashboard.serve(run) as url:
        page = browser.new_page()
        page.goto(f"{url}/?token={dashboard.token}&refresh=1")
        page.wait_for_selector("#plot-heldout .main-svg", timeout=20_000)
        names = "document.getElementById('plot-heldout').data.map((t) => t.name)"
        assert page.evaluate(names) == [
            "math",
            "ocr",
            "all (greedy)",
            "all, sampled",
            "all, pass@k",
        ]
        # a new evaluation is drawn on the next poll, with no new curriculum iteration
        with (run / "metrics.jsonl").open("a") as f:
            f.write(_eval_line(4, 0.75, sampled=0.5))
        page.wait_for_function(
            "document.getElementById('plot-heldout').data[0].x.length === 2", timeout=10_000
        )
        assert page.evaluate("document.getElementById('plot-heldout').data[0].y") == [0.5, 0.75]
        page.close()


def test_training_plots_follow_the_runs_iterations(browser, tmp_path, dashboard):
    run = _curriculum_run(tmp_path, dashboard, iterations=10)
    with dashboard.serve(run) as url:
        page = browser.new_page()
        page.goto(f"{url}/?token={dashboard.token}&refresh=1")
        page.wait_for_function("document.body.dataset.iteration === '10'", timeout=20_000)
        # no metrics.jsonl yet (a run that has not logged, or a copied curriculum alone)
        assert page.is_hidden("#fig-reward") and page.is_hidden("#fig-accounting")
        (run / "metrics.jsonl").write_text(_iteration_line(1, 0.25) + _iteration_line(2, 0.5))
        page.wait_for_selector("#plot-reward .main-svg", timeout=20_000)
        names = "(id) => document.getElementById(id).data.map((t) => t.name)"
        assert page.evaluate(names, "plot-reward") == ["math", "ocr", "mean"]
        assert page.evaluate(names, "plot-accounting") == [
            "rolled out",
            "trained",
            "could not be scored (rollouts)",
            "left out of training (rollouts)",
            "format error (rollouts)",
            "degenerate thinking (rollouts)",
        ]
        y2 = "document.getElementById('plot-accounting').data.map((t) => t.yaxis || 'y')"
        assert page.evaluate(y2) == ["y", "y", "y2", "y2", "y2", "y2"]
        # the next iteration is drawn on the next poll, without reloading the page
        with (run / "metrics.jsonl").open("a") as f:
            f.write(_iteration_line(3, 0.75, unscorable=2, filtered=4))
        page.wait_for_function(
            "document.getElementById('plot-reward').data[0].x.length === 3", timeout=10_000
        )
        assert page.evaluate("document.getElementById('plot-reward').data[0].y") == [
            0.25,
            0.5,
            0.75,
        ]
        assert "filtered out" in page.evaluate(names, "plot-accounting")
        page.close()


def test_a_long_run_is_drawn_without_a_marker_on_every_step(browser, tmp_path, dashboard):
    """10,000 logged steps: a marker on each point of each trace, 75,000 SVG nodes, took seconds
    to draw on every poll that brought a new step; the lines alone are drawn, while the
    held-out evaluations, 200 of them, keep theirs."""
    run = _curriculum_run(tmp_path, dashboard, iterations=10)
    lines = [_iteration_line(s, (s % 100) / 100) for s in range(1, 10_001)]
    lines += [_eval_line(s, 0.5) for s in range(50, 10_001, 50)]
    (run / "metrics.jsonl").write_text("".join(lines))
    with dashboard.serve(run) as url:
        page = browser.new_page()
        page.goto(f"{url}/?token={dashboard.token}&refresh=1")
        page.wait_for_function(
            "document.getElementById('plot-reward')?.data?.[0]?.x.length === 10000",
            timeout=60_000,
        )
        modes = "(id) => document.getElementById(id).data.map((t) => t.mode)"
        assert set(page.evaluate(modes, "plot-reward")) == {"lines"}
        assert set(page.evaluate(modes, "plot-accounting")) == {"lines"}
        assert page.locator("#plot-reward .point, #plot-accounting .point").count() == 0
        assert page.locator("#plot-heldout .point").count() == 3 * 200  # math, ocr and all
        # and the next step is drawn on the next poll
        with (run / "metrics.jsonl").open("a") as f:
            f.write(_iteration_line(10_001, 0.5))
        page.wait_for_function(
            "document.getElementById('plot-reward').data[0].x.length === 10001", timeout=30_000
        )
        page.close()
