"""`rlcs train CONFIG`: the driver. Pretraining, SFT and RL run through this one entry point.

Each RL iteration: ask the sampler for prompts, generate, score on the reward pool, report the
outcomes, train on the selected (balanced) groups, push the weights, write metrics, and
checkpoint on schedule (see ``cluster.rl_iteration`` for the phases). With
``run.overlap_rollout`` an iteration's update runs while the next iteration's rollouts are
generated and scored.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ray

from actors.rank_calls import RanksStuck, own_error
from cluster.checkpointing import Checkpointer, SaveFailed
from cluster.evaluate import EVAL_STEP_OFFSET, evaluate_live
from cluster.placement import PlacementError
from cluster.ray_connect import check_ray_address, connect_ray
from cluster.resume_check import (
    as_resumed,
    check_resume_examples,
    check_resume_items,
    report_resume_changes,
)
from cluster.rl_iteration import IterationResult, OverlappedIterations, run_iteration
from cluster.roles import Roles, start_roles
from cluster.run_dir import prepare_run_dir, where_to_resume
from cluster.run_lock import RunDirBusy, new_folders, unlock_run_dir
from cluster.stage_data import (
    StageData,
    load_stage_data,
    model_dir_problem,
    resolve_model,
    rollout_row_problem,
    supervised_batch,
)
from cluster.train_data_record import record_train_data, recorded_train_data
from cluster.wall_budget import WallBudget
from rlcs.config import Config, ConfigError, load_config
from rlcs.group_filters import load_group_filter
from rlcs.progress import progress_bar
from rlcs.report import write_report
from rlcs.runlog import RunLog, read_metrics, write_resolved


def train(cfg: Config, resume: bool = False, baseline: dict | None = None) -> Path:
    """Run the stage ``cfg`` names into its run directory; ``resume`` goes on from its latest
    checkpoint. ``baseline``: for RL, the starting model's held-out figures measured elsewhere
    on the same ``data.eval`` items (as ``cluster.evaluate.evaluate`` returns them), logged as
    step 0 as ``run.eval_before_train`` would log its own evaluation, which it then replaces:
    the demo's evaluation of its SFT checkpoint starts the RL run's held-out curves."""
    clock = WallBudget(cfg.run.max_wall_s)  # the run's time limit counts from here
    if not ray.is_initialized():
        check_ray_address(cfg)  # an address where nothing answers stops the run before any write
    grpo = cfg.learner.grpo
    keep = None
    if cfg.stage == "rl" and grpo.group_filter:  # a bad path stops the run before it starts
        keep = load_group_filter(grpo.group_filter, grpo.group_filter_options)
    if cfg.model.path and (problem := model_dir_problem(Path(cfg.model.path))):
        raise FileNotFoundError(f"model.path {cfg.model.path}: {problem}")  # before any write
    made = new_folders(cfg.run_dir)  # what this launch creates, and may remove again
    run_dir = prepare_run_dir(cfg, resume, lock=True, made=made)
    try:
        done = _run(cfg, resume, run_dir, keep, clock, baseline)
    except BaseException:
        # a run that stopped (at its data's check, say) leaves no lock file, nor the folders
        # it made while they are empty; anything else in them stays
        unlock_run_dir(run_dir, remove_lock=True, made=made)
        raise
    unlock_run_dir(run_dir)
    return done


def _run(
    cfg: Config, resume: bool, run_dir: Path, keep, clock: WallBudget, baseline: dict | None
) -> Path:
    # the data and the model are checked before anything starts, and before the run directory
    # gains the config.yaml that marks it as a run
    data = load_stage_data(cfg, run_dir)
    if cfg.stage == "rl" and (problem := rollout_row_problem(cfg)):
        logging.getLogger(__name__).warning(problem)  # `log` is the run log below
    if resume:
        if cfg.stage == "rl":
            check_resume_items(run_dir, {it.id for it in data.items})
        else:
            check_resume_examples(cfg, run_dir, data.files)
        report_resume_changes(cfg, run_dir)
        cfg = as_resumed(cfg, run_dir)  # config.yaml records what the sampler keeps
    # a tiny model is built while Ray starts: on two cores each takes several seconds
    with ThreadPoolExecutor(1, thread_name_prefix="build-model") as pool:
        building = pool.submit(resolve_model, cfg, run_dir)
        connect_ray(cfg)
        model_path = building.result()
    if not resume:  # a resumed run keeps its config.yaml until it has restored its checkpoint
        write_resolved(cfg, run_dir)
    ckpt = Checkpointer(run_dir, cfg)
    start = ckpt.resume_point() if resume else 0
    if cfg.stage != "rl" and (not start or recorded_train_data(run_dir) is None):
        record_train_data(run_dir, data.files)  # what its checkpoints will describe
    roles = start_roles(cfg, model_path, run_dir, data.items, resume=resume and start > 0)
    roles.group_filter = keep
    try:
        if start:
            restore(ckpt, roles, start)
        if resume:
            write_resolved(cfg, run_dir)
        with RunLog(run_dir, resume_step=start if resume else None) as log:
            if cfg.stage == "rl":
                run_rl(cfg, roles, data, log, ckpt, start, clock, baseline)
            else:
                run_supervised(cfg, roles, data, log, ckpt, start, clock)
        roles.learner.export_hf(run_dir / "hf")
        write_report(run_dir, title=f"{cfg.run.name} ({cfg.stage})")
    except (ray.exceptions.RayActorError, RanksStuck, SaveFailed) as e:
        try:  # the step --resume takes (the newest folder may be a save the death cut short)
            at = ckpt.resume_point()
        except (OSError, ValueError):
            at = 0
        raise RunFailed(stopped_by(e, at, ckpt.root)) from e
    finally:
        roles.shutdown()
    return run_dir


def restore(ckpt: Checkpointer, roles: Roles, step: int) -> None:
    """Restore the checkpoint of ``step``, or stop the run with one line saying why it could
    not be loaded (the error a role raised; the run's files are left as they were)."""
    try:
        ckpt.restore(roles, step)
    except ray.exceptions.RayTaskError as e:
        cause = own_error(e)
        lines = str(cause).strip().splitlines()
        why = f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
        raise RunFailed(
            f"the checkpoint of step {step} in {ckpt.root} could not be restored ({why}); the "
            "run's files are as they were"
        ) from e


class RunFailed(RuntimeError):
    """The run stopped on an unrecoverable actor failure; its checkpoints are resumable."""


def stopped_by(err: Exception, at: int, root: Path) -> str:
    """What stopped a run whose actor died, whose learner ranks could not finish a call (one
    failed and the others were stuck waiting for it), or whose checkpoint could not be
    written, and how to go on."""
    then = "continue with --resume"
    if isinstance(err, SaveFailed):
        what, then = str(err), "make room there (or fix the folder's permissions) and " + then
    elif isinstance(err, RanksStuck):
        what = str(err)
    else:
        what = f"a {_role_of(err)} actor died ({type(err).__name__})"
    return f"{what}; the run stopped. Checkpoints up to step {at} are intact in {root}: {then}"


def _role_of(err: Exception) -> str:
    text = str(err)
    for role in ("Learner", "RolloutWorker", "RewardActor", "CurriculumSampler"):
        if role in text:
            return role
    return "Ray"


def run_rl(
    cfg: Config,
    roles: Roles,
    data: StageData,
    log: RunLog,
    ckpt: Checkpointer,
    start: int,
    clock: WallBudget,
    baseline: dict | None = None,
) -> None:
    if start:
        roles.learner.push_weights(roles.transport)  # engines start from the base weights
    loop = _RLLoop(cfg, roles, data, log, ckpt, clock)
    wants_baseline = baseline is not None or (loop.every and cfg.run.eval_before_train)
    if start == 0 and wants_baseline and not _baseline_logged(log):
        figures = eval_metrics(baseline) if baseline is not None else loop.evaluate(0)
        log.log(0, figures, stage="rl")
    bar = progress_bar(
        range(start, cfg.run.iterations),
        desc="rl",
        unit="iter",
        initial=start,
        total=cfg.run.iterations,
    )
    try:
        for it in bar:
            res, last = loop.iteration(it)
            m = res.metrics
            bar.set_postfix(reward=f"{m['reward/mean']:.3f}", valid=f"{m['curriculum/valid_fraction']:.2f}",
                            tok_s=f"{m['generate/tokens_per_s']:.0f}", step_s=f"{m['time/iteration']:.1f}")  # fmt: skip
            if last:
                bar.close()
                clock.stopped(it + 1, cfg.run.iterations, "iteration")
                break
    finally:
        loop.close()


class _RLLoop:
    """The RL stage's iterations with their held-out evaluations, logs, checkpoints and time
    limit; with ``run.overlap_rollout``, each iteration's learning overlaps the next one's
    rollouts."""

    def __init__(self, cfg: Config, roles: Roles, data: StageData, log: RunLog,
                 ckpt: Checkpointer, clock: WallBudget):  # fmt: skip
        self.cfg, self.roles, self.data = cfg, roles, data
        self.log, self.ckpt, self.clock = log, ckpt, clock
        self.items = data.by_id()
        self.every = cfg.run.eval_every if data.eval_items else 0
        self.eval_s: float | None = None  # how long the last held-out evaluation took
        self.overlapped = (
            OverlappedIterations(cfg, roles, self.items) if cfg.run.overlap_rollout else None
        )

    def evaluate(self, step: int) -> dict[str, float]:
        cfg, t = self.cfg, time.perf_counter()
        ev = evaluate_live(
            self.roles, self.data.eval_items, cfg.reward.timeout_s, samples=cfg.run.eval_samples,
            temperature=cfg.rollout.temperature, step=EVAL_STEP_OFFSET + step,
        )  # fmt: skip
        self.eval_s = time.perf_counter() - t
        return eval_metrics(ev)

    def eval_due(self, step: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == self.cfg.run.iterations)

    def eval_estimate(self) -> float:
        """How long an evaluation takes; the first, not yet timed, as long as an iteration."""
        if not self.every:
            return 0.0
        return self.eval_s if self.eval_s is not None else self.clock.next_s()

    def _prefetch(self, it: int) -> bool:
        """Whether to gather iteration it+1's rollouts during iteration it: only where the run
        goes on to it+1 (time for this iteration, its evaluation, the next and the evaluation
        that may end the run there) and no checkpoint falls between."""
        step = it + 1
        due_eval = self.eval_estimate() if self.eval_due(step) else 0.0
        later = due_eval + self.clock.next_s() + self.eval_estimate()
        return (
            step < self.cfg.run.iterations
            and not self.ckpt.due(step)
            and self.clock.another_fits(later)
        )

    def iteration(self, it: int) -> tuple[IterationResult, bool]:
        """Iteration ``it`` with its evaluation, log and checkpoint; whether the run's time
        limit ends the run there."""
        cfg, clock = self.cfg, self.clock
        t = time.perf_counter()
        if self.overlapped is None:
            res = run_iteration(cfg, self.roles, self.items, it)
        else:
            res = self.overlapped.run(it, self._prefetch(it))
        clock.took(time.perf_counter() - t)
        due = self.eval_due(it + 1)
        if due:
            res.metrics.update(self.evaluate(it + 1))
        # one more iteration, and the evaluation that would end the run there, must fit in what
        # is left of run.max_wall_s; rollouts gathered already are trained on in any case (the
        # curriculum holds their outcomes)
        held = self.overlapped is not None and self.overlapped.holds_batch
        out_of_time = (
            it + 1 < cfg.run.iterations and not held
            and not clock.another_fits(self.eval_estimate())
        )  # fmt: skip
        if out_of_time and self.every and not due:
            res.metrics.update(self.evaluate(it + 1))
        self.log.log(it + 1, res.metrics, stage="rl")
        self.log.samples(it + 1, res.samples)
        self.ckpt.maybe_save(self.roles, it + 1, final=out_of_time)
        return res, out_of_time

    def close(self) -> None:
        if self.overlapped is not None:
            self.overlapped.close()


def _baseline_logged(log: RunLog) -> bool:
    """Whether the run's metrics already hold the evaluation before its first iteration (a run
    resumed before its first checkpoint keeps the records up to step 0)."""
    return any(r.get("step") == 0 and "eval/pass_rate/all" in r for r in read_metrics(log.run_dir))


def eval_metrics(ev: dict[str, dict[str, float]]) -> dict[str, float]:
    """``eval/pass_rate/<domain>`` and ``eval/reward/<domain>``, "all" included; with sampled
    answers (``run.eval_samples``) also ``eval/sampled_pass_rate/<domain>`` and
    ``eval/pass_at_k/<domain>``."""
    out = {}
    for domain, v in ev.items():
        for key in ("pass_rate", "reward", "sampled_pass_rate", "pass_at_k"):
            if key in v:
                out[f"eval/{key}/{domain}"] = v[key]
    return out


def run_supervised(
    cfg: Config,
    roles: Roles,
    data: StageData,
    log: RunLog,
    ckpt: Checkpointer,
    start: int,
    clock: WallBudget,
) -> None:
    steps, batch = cfg.learner.steps, cfg.learner.global_batch

    def prepared(step: int) -> list:
        """Step ``step``'s rows read, their images decoded, their documents packed per rank."""
        return roles.learner.prepare(
            cfg.stage, supervised_batch(data.rows, step, batch, cfg.run.seed)
        )

    bar = progress_bar(range(start, steps), desc=cfg.stage, unit="step", initial=start, total=steps)
    # the driver prepares the next step's rows while the ranks train on this one: on two cores
    # the demo's pretraining steps took 312 ms instead of 334 (the rank's own 290), the same
    # losses; the step's error, if preparing it fails, is raised at that step as before
    with ThreadPoolExecutor(1, thread_name_prefix="next-step") as ahead:
        upcoming = ahead.submit(prepared, start) if start < steps else None
        for step in bar:
            t = time.perf_counter()
            work = upcoming.result()
            upcoming = ahead.submit(prepared, step + 1) if step + 1 < steps else None
            out = roles.learner.run_prepared(work, cfg.stage)
            metrics = {k: float(v) for k, v in out.items() if isinstance(v, (int, float))}
            metrics["tokens_per_s"] = out["tokens"] / max(out["step_s"], 1e-9)
            log.log(step + 1, metrics, stage=cfg.stage)
            bar.set_postfix(loss=f"{out['loss']:.4f}", tok_s=f"{metrics['tokens_per_s']:.0f}")
            clock.took(time.perf_counter() - t)
            out_of_time = step + 1 < steps and not clock.another_fits()
            ckpt.maybe_save(roles, step + 1, final=out_of_time)
            if out_of_time:
                bar.close()
                clock.stopped(step + 1, steps, "step")
                break


def main(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"rlcs train: {e}", file=sys.stderr)
        return 2
    try:
        run_dir = train(cfg, resume=args.resume)
    except (FileExistsError, FileNotFoundError, NotADirectoryError, ValueError, RunDirBusy) as e:
        print(f"rlcs train: {e}", file=sys.stderr)
        return 2
    except (RunFailed, PlacementError) as e:
        print(f"rlcs train: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rlcs train: interrupted; {where_to_resume(cfg)}", file=sys.stderr)
        return 130
    print(f"run finished: {run_dir} (report: {run_dir / 'report.md'})")
    return 0
