"""The curriculum benchmark reuses a finished run only when it was made with the same settings."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its `rounds` import, as when it runs
    spec = importlib.util.spec_from_file_location(
        "curriculum_vs_uniform", ROOT / "benchmarks" / "curriculum_vs_uniform.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(ROOT / "benchmarks"))


SETTINGS = {"config": "/c.yaml", "overrides": ["model.path=/a/sft/hf", "run.iterations=12"]}


def test_a_new_run_records_its_settings(bench, tmp_path):
    run = tmp_path / "rlcs-seed0"
    assert bench.cached_curve(run, SETTINGS) is None
    assert json.loads((run / "benchmark.json").read_text()) == SETTINGS


def test_a_finished_run_with_the_same_settings_is_reused(bench, tmp_path):
    run = tmp_path / "rlcs-seed0"
    bench.cached_curve(run, SETTINGS)
    (run / "curve.json").write_text(json.dumps({"2": 0.5, "4": 0.625}))
    assert bench.cached_curve(run, SETTINGS) == {2: 0.5, 4: 0.625}


def test_an_unfinished_run_is_run_again(bench, tmp_path):
    run = tmp_path / "rlcs-seed0"
    bench.cached_curve(run, SETTINGS)
    (run / "metrics.jsonl").write_text("{}\n")
    (run / "config.yaml").write_text("stage: rl\n")
    (run / "checkpoints" / "step-4").mkdir(parents=True)
    assert bench.cached_curve(run, SETTINGS) is None
    # what the interrupted run left is cleared, so that `rlcs train` can start it again
    assert [p.name for p in run.iterdir()] == ["benchmark.json"]


def test_a_run_with_other_settings_stops_the_benchmark_and_is_kept(bench, tmp_path):
    run = tmp_path / "rlcs-seed0"
    bench.cached_curve(run, SETTINGS)
    (run / "curve.json").write_text(json.dumps({"2": 0.1}))
    other = {**SETTINGS, "overrides": ["model.path=/b/sft/hf", "run.iterations=12"]}
    with pytest.raises(SystemExit) as e:
        bench.cached_curve(run, other)
    msg = str(e.value)
    assert "was model.path=/a/sft/hf" in msg and "now model.path=/b/sft/hf" in msg
    assert "--root" in msg
    assert json.loads((run / "curve.json").read_text()) == {"2": 0.1}


def test_a_run_directory_without_recorded_settings_is_not_reused(bench, tmp_path):
    run = tmp_path / "rlcs-seed0"
    run.mkdir()
    (run / "curve.json").write_text(json.dumps({"2": 0.1}))
    with pytest.raises(SystemExit, match="did not record the settings"):
        bench.cached_curve(run, SETTINGS)
    assert (run / "curve.json").exists()


def test_prompts_rolled_out_are_counted_from_the_runs_metrics(bench, tmp_path):
    rows = [
        {"step": 2, "curriculum/groups": 72.0, "loss": 0.1},
        {"step": 1, "curriculum/groups": 48.0},
        {"step": 2, "eval/pass_rate/all": 0.6},  # the evaluation after step 2
        {"step": 3, "curriculum/groups": 90.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spent = bench.prompts_rolled_out(tmp_path)
    assert spent == {1: 48, 2: 120, 3: 210}
    other = {1: 48, 2: 96, 3: 144}
    assert bench.cost_at([spent, other], 2) == 108.0
    assert bench.cost_at([spent, other], float("inf")) == float("inf")
    assert bench.cost_at([spent, {}], 2) != bench.cost_at([spent, {}], 2)  # nan: not logged
    assert bench.prompts_rolled_out(tmp_path / "missing") == {}


def test_the_pass_rate_within_a_budget_of_prompts(bench):
    curve = {0: 0.5, 2: 0.6, 4: 0.7, 6: 0.8}
    cost = {1: 90, 2: 180, 3: 270, 4: 360, 5: 450, 6: 540}
    assert bench.within_budget(curve, cost, 576) == 0.8
    assert bench.within_budget(curve, cost, 400) == 0.7  # iteration 4 is the last inside
    assert bench.within_budget(curve, cost, 100) == 0.5  # only the checkpoint itself
    assert bench.within_budget(curve, {}, 576) != bench.within_budget(curve, {}, 576)  # nan


def test_draws_per_item_come_from_the_runs_last_curriculum_snapshot(bench, tmp_path):
    from collections import Counter

    import numpy as np
    import yaml

    from rlcs.config import CurriculumConfig
    from rlcs.curriculum.items import curriculum_from_items
    from rlcs.data import Item

    items = [Item(id=f"q{i}", domain="math", prompt="p") for i in range(10)]
    cur = curriculum_from_items(items, CurriculumConfig(policy="uniform"))
    cur.attach(tmp_path)
    drawn = Counter()
    for _ in range(6):  # 3 of 10 items an iteration, each a group of 4 rollouts
        idx = cur.next_batch(3)
        drawn.update(idx.tolist())
        cur.report(cur.id_of(idx), np.ones((len(idx), 4)))
    cur.save(tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"rollout": {"n": 4}}))
    assert bench.draws_per_item(tmp_path) == (1.8, max(drawn.values()))
    assert bench.draws_per_item(tmp_path / "no-run") is None
