"""``run.max_wall_s``: the time limit's arithmetic, and where the RL and supervised loops stop
under it, on a simulated clock (the loops' actors replaced by stand-ins that advance it). The
real driver stopping and resuming under a limit is in tests/cluster/test_train.py."""

import time
from types import SimpleNamespace

import pytest

import cluster.train as train
from cluster.stage_data import StageData
from cluster.wall_budget import WallBudget
from rlcs.config import load_config
from rlcs.data import Item


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(time, "perf_counter", c)
    return c


def test_the_budget_is_judged_by_the_slowest_of_the_last_few(clock):
    budget = WallBudget(100.0, window=3)
    assert budget.another_fits(then_s=1e9)  # nothing timed yet: the first always runs
    clock.now = 50.0
    budget.took(20.0)
    assert budget.another_fits() and budget.another_fits(then_s=30.0)
    assert not budget.another_fits(then_s=30.5)
    for _ in range(3):
        budget.took(5.0)  # the 20 s iteration leaves the window
    assert budget.next_s() == 5.0 and budget.another_fits(then_s=45.0)
    clock.now = 96.0
    assert not budget.another_fits()
    unlimited = WallBudget(None)
    unlimited.took(1e9)
    assert unlimited.another_fits(then_s=1e9)


class Recorder:
    """The run log and the checkpointer: what the loop logged and when it saved."""

    def __init__(self):
        self.logged: list[tuple[int, dict]] = []
        self.saves: list[tuple[int, bool]] = []

    def log(self, step, metrics, stage):
        self.logged.append((step, dict(metrics)))

    def samples(self, step, rows):
        pass

    def maybe_save(self, roles, step, final=False):
        self.saves.append((step, final))


def rl_config(iterations: int, limit: float | None):
    return load_config(
        "configs/tiny-text.yaml",
        [
            f"run.iterations={iterations}",
            "run.eval_every=4",
            f"run.max_wall_s={'null' if limit is None else limit}",
        ],
    )


def fake_rl(monkeypatch, clock: Clock, iter_s: float, eval_s: float) -> list[int]:
    evaluated: list[int] = []

    def run_iteration(cfg, roles, items, it):
        clock.now += iter_s
        metrics = {"reward/mean": 0.5, "curriculum/valid_fraction": 1.0,
                   "generate/tokens_per_s": 1.0, "time/iteration": iter_s}  # fmt: skip
        return SimpleNamespace(metrics=metrics, samples=[])

    def evaluate_live(roles, items, timeout_s, samples, temperature, step):
        clock.now += eval_s
        evaluated.append(step - train.EVAL_STEP_OFFSET)
        return {"all": {"pass_rate": 0.5, "reward": 0.5}}

    monkeypatch.setattr(train, "run_iteration", run_iteration)
    monkeypatch.setattr(train, "evaluate_live", evaluate_live)
    return evaluated


def run_rl(cfg, rec: Recorder, baseline: dict | None = None):
    data = StageData(eval_items=[Item(id="h", domain="math", prompt="1+1", answer="2")])
    train.run_rl(
        cfg, SimpleNamespace(), data, rec, rec, 0, WallBudget(cfg.run.max_wall_s), baseline
    )


def test_rl_stops_where_one_more_iteration_and_its_evaluation_would_pass_the_limit(
    monkeypatch, clock, capsys
):
    # 10 s an iteration, 5 s an evaluation (every 4 iterations), a 62 s limit: after iteration
    # 4 and its evaluation the clock reads 45, and one more with its evaluation ends at 60;
    # after iteration 5 (55 s) a sixth would end at 70, so the run ends at 5, evaluated there
    # although 5 is off the schedule, and checkpointed
    evaluated = fake_rl(monkeypatch, clock, iter_s=10.0, eval_s=5.0)
    rec = Recorder()
    run_rl(rl_config(10, 62.0), rec)
    assert [step for step, _ in rec.logged] == [1, 2, 3, 4, 5]
    assert evaluated == [4, 5] and "eval/pass_rate/all" in rec.logged[-1][1]
    assert rec.saves[-1] == (5, True) and not any(final for _, final in rec.saves[:-1])
    assert clock.now == 60.0  # within the limit
    assert "stopped after iteration 5 of 10" in capsys.readouterr().err


def test_rl_budgets_an_iteration_for_an_evaluation_not_yet_timed(monkeypatch, clock):
    # 10 s iterations and a 25 s limit: after iteration 1 a second and an evaluation as long
    # as an iteration end at 30, so the run ends at 1 with its own evaluation
    evaluated = fake_rl(monkeypatch, clock, iter_s=10.0, eval_s=3.0)
    rec = Recorder()
    run_rl(rl_config(10, 25.0), rec)
    assert [step for step, _ in rec.logged] == [1] and evaluated == [1]
    assert rec.saves == [(1, True)]


def test_a_baseline_measured_elsewhere_is_step_0_in_place_of_an_evaluation(
    monkeypatch, clock, tmp_path
):
    # the demo hands RL its SFT evaluation: logged as step 0, and no live evaluation before the
    # first iteration, even with run.eval_before_train
    evaluated = fake_rl(monkeypatch, clock, iter_s=1.0, eval_s=1.0)
    rec = Recorder()
    rec.run_dir = tmp_path  # no metrics.jsonl yet: no step 0 logged before
    cfg = load_config("configs/tiny-text.yaml", ["run.iterations=4", "run.eval_every=4",
                                                 "run.eval_before_train=true"])  # fmt: skip
    baseline = {
        "math": {"pass_rate": 0.25, "reward": 0.3},
        "all": {"pass_rate": 0.25, "reward": 0.3},
    }
    run_rl(cfg, rec, baseline)
    assert [step for step, _ in rec.logged] == [0, 1, 2, 3, 4] and evaluated == [4]
    assert rec.logged[0][1] == {
        "eval/pass_rate/math": 0.25, "eval/reward/math": 0.3,
        "eval/pass_rate/all": 0.25, "eval/reward/all": 0.3,
    }  # fmt: skip


def test_without_a_limit_rl_runs_every_iteration(monkeypatch, clock):
    evaluated = fake_rl(monkeypatch, clock, iter_s=1e6, eval_s=1e6)
    rec = Recorder()
    run_rl(rl_config(5, None), rec)
    assert [step for step, _ in rec.logged] == [1, 2, 3, 4, 5]
    assert evaluated == [4, 5] and rec.saves[-1] == (5, False)


def test_supervised_steps_stop_under_the_limit(monkeypatch, clock, capsys):
    cfg = load_config(
        "configs/tiny-text.yaml", ["stage=sft", "learner.steps=10", "run.max_wall_s=35"]
    )

    def run_prepared(work, stage):
        clock.now += 10.0
        return {"loss": 1.0, "tokens": 100, "step_s": 10.0}

    monkeypatch.setattr(train, "supervised_batch", lambda rows, step, batch, seed: rows)
    learner = SimpleNamespace(prepare=lambda stage, rows: rows, run_prepared=run_prepared)
    roles = SimpleNamespace(learner=learner)
    rec = Recorder()
    train.run_supervised(cfg, roles, StageData(rows=[{}]), rec, rec, 0, WallBudget(35.0))
    # after step 3 (30 s) a fourth would end at 40
    assert [step for step, _ in rec.logged] == [1, 2, 3]
    assert rec.saves[-1] == (3, True)
    assert "stopped after step 3 of 10" in capsys.readouterr().err


def test_the_next_supervised_step_is_prepared_while_the_ranks_train_on_this_one(monkeypatch):
    """The driver's share of a step (rows read, images decoded, documents packed) runs in a
    thread while the ranks train on the step before; a step whose preparation fails fails at
    that step, after the steps before it were trained and logged."""
    import threading

    cfg = load_config("configs/tiny-text.yaml", ["stage=sft", "learner.steps=6"])
    monkeypatch.setattr(train, "supervised_batch", lambda rows, step, batch, seed: step)
    prepared, ran = [], []
    next_ready = threading.Condition()

    def prepare(stage, step):
        assert threading.current_thread() is not threading.main_thread()
        if step == 4:
            raise ValueError("sft batch has no trainable tokens")
        with next_ready:
            prepared.append(step)
            next_ready.notify_all()
        return f"work {step}"

    def run_prepared(work, stage):
        step = int(work.split()[1])
        if step < 3:  # the next step is prepared while this one trains (else this times out)
            with next_ready:
                assert next_ready.wait_for(lambda: step + 1 in prepared, timeout=10)
        ran.append(work)
        return {"loss": 1.0, "tokens": 10, "step_s": 0.1}

    roles = SimpleNamespace(learner=SimpleNamespace(prepare=prepare, run_prepared=run_prepared))
    rec = Recorder()
    with pytest.raises(ValueError, match="no trainable tokens"):
        train.run_supervised(cfg, roles, StageData(rows=[{}]), rec, rec, 0, WallBudget(None))
    assert ran == ["work 0", "work 1", "work 2", "work 3"]
    assert [step for step, _ in rec.logged] == [1, 2, 3, 4]


def test_the_limit_must_be_positive():
    from rlcs.config import ConfigError

    with pytest.raises(ConfigError, match="max_wall_s"):
        load_config("configs/tiny-text.yaml", ["run.max_wall_s=0"])


def fake_overlapped(monkeypatch, clock: Clock, times: list[float], eval_s: float) -> list:
    """``run.overlap_rollout``'s iterations as stand-ins: iteration k takes ``times[k]`` and
    holds the next one's rollouts afterwards where it was asked to prefetch them."""
    decisions: list[tuple[int, bool]] = []

    class Overlapped:
        def __init__(self, cfg, roles, items):
            self.holds_batch = False

        def run(self, it, prefetch):
            clock.now += times[it]
            decisions.append((it, prefetch))
            self.holds_batch = prefetch
            metrics = {"reward/mean": 0.5, "curriculum/valid_fraction": 1.0,
                       "generate/tokens_per_s": 1.0, "time/iteration": times[it]}  # fmt: skip
            return SimpleNamespace(metrics=metrics, samples=[])

        def close(self):
            pass

    fake_rl(monkeypatch, clock, iter_s=0.0, eval_s=eval_s)
    monkeypatch.setattr(train, "OverlappedIterations", Overlapped)
    return decisions


def overlap_config(iterations: int, limit: float | None, *sets: str):
    return load_config(
        "configs/tiny-text.yaml",
        [f"run.iterations={iterations}", "run.overlap_rollout=true",
         f"run.max_wall_s={'null' if limit is None else limit}", *sets],
    )  # fmt: skip


def test_overlap_never_gathers_across_a_checkpoint(monkeypatch, clock):
    # checkpoints at 3, 6 and the last step, 7: the curriculum's snapshot there must hold the
    # outcomes of trained batches only, so iterations 3, 6 and 7 gather nothing ahead
    decisions = fake_overlapped(monkeypatch, clock, [1.0] * 7, eval_s=1.0)
    rec = Recorder()
    rec.due = lambda step: step % 3 == 0 or step == 7
    run_rl(overlap_config(7, None, "run.eval_every=4"), rec)
    assert [step for step, _ in rec.logged] == [1, 2, 3, 4, 5, 6, 7]
    assert decisions == [(0, True), (1, True), (2, False), (3, True), (4, True), (5, False),
                         (6, False)]  # fmt: skip


def test_overlap_trains_on_gathered_rollouts_past_the_limit(monkeypatch, clock, capsys):
    # a 45 s limit: iteration 2 is predicted to leave time for a third and gathers its
    # rollouts, then takes 30 s instead of 10; the run still trains on them (their outcomes are
    # in the curriculum) and stops after iteration 3, gathering nothing ahead there
    decisions = fake_overlapped(monkeypatch, clock, [10.0, 30.0, 10.0, 10.0], eval_s=5.0)
    rec = Recorder()
    rec.due = lambda step: False
    run_rl(overlap_config(4, 45.0, "run.eval_every=100", "run.save_every=0"), rec)
    assert decisions == [(0, True), (1, True), (2, False)]
    assert [step for step, _ in rec.logged] == [1, 2, 3]
    assert rec.saves[-1] == (3, True) and "eval/pass_rate/all" in rec.logged[-1][1]
    assert "stopped after iteration 3 of 4" in capsys.readouterr().err
