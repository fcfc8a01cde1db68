"""`rlcs demo`: the whole platform on a laptop CPU, in minutes.

From ``configs/tiny-vlm.yaml``: build the tiny GLM-4.1V-architecture model and the synthetic
four-domain data, pretrain on captions, SFT on think/answer examples, evaluate on the held-out
split, run RL with curriculum sampling on the reward pool and sampler (the dashboard serves the
live run), evaluate again, and write ``report.md`` (results, stage times, plots). It ends with
a table of per-domain pass rates after SFT and after RL, and a ``RESULT`` line (their
formatting and writing: ``cluster/demo_report.py``; what ``--resume`` keeps:
``cluster/demo_ledger.py``; the dashboard's process: ``cluster/demo_dashboard.py``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cluster.demo_dashboard import (
    dashboard_line,
    start_dashboard,
    stop_dashboard,
)
from cluster.demo_ledger import (
    STAGE_DONE,
    LedgerError,
    StageLedger,
    eval_settings,
    stage_settings,
)
from cluster.demo_report import demo_plots, domain_rewards, report_results
from rlcs.config import Config, load_config
from rlcs.dashboard import DEMO_MARKER  # written when a demo starts: --resume needs it

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tiny-vlm.yaml"

#: What the demo changes in the RL config for its first two stages. The tiny model must learn
#: to see in these minutes: pretraining on captions teaches it to read the images, and SFT
#: teaches the output format and the tasks. The vision tower trains at a sixth of the language
#: model's rate: at one shared rate high enough for the language model, the tower's output
#: collapses to the same vector for every image before the model learns to use it (see
#: docs/learner.md, ``lr_groups``). Only the learner runs in these stages, so it gets both
#: cores of a laptop (torch threads follow the actor's CPUs): about twice as fast as one.
VISION_LR = 'learner.lr_groups={"model.visual": 5.0e-5}'
PRETRAIN = ["stage=pretrain", "learner.steps=600", "learner.lr=3.0e-4", VISION_LR,
            "learner.global_batch=16", "learner.micro_batch=16", "learner.lr_schedule=constant",
            "learner.warmup_steps=10", "cluster.learner_cpus_per_rank=2"]  # fmt: skip
SFT = ["stage=sft", "learner.steps=300", "learner.lr=3.0e-4", VISION_LR,
       "learner.global_batch=16", "learner.micro_batch=16", "learner.lr_schedule=cosine",
       "learner.warmup_steps=10", "cluster.learner_cpus_per_rank=2"]  # fmt: skip
#: The RL stage runs configs/tiny-vlm.yaml as it is, plus a held-out evaluation every few
#: iterations so the report and the dashboard show the held-out pass rate as RL goes.
RL = ["run.eval_every=6"]
#: What the demo's time budget (``--minutes``) keeps back from RL (``run.max_wall_s``) for what
#: comes after it: the RL stage's export, report and shutdown after its last iteration, and the
#: demo's plots and report (1 s and 7 s in `/tmp/demo96`). The held-out evaluation of RL's
#: model is the stage's own at its last iteration, inside its limit (`rl_final_figures`); where
#: RL evaluates none (``run.eval_every=0``) the demo evaluates its exported model, and keeps
#: back as long again as the SFT checkpoint's evaluation took (12-22 s on two cores).
AFTER_RL_S = 20.0
#: ``--dashboard-port``'s default (cluster/cli.py): the resume command names another one
DASHBOARD_PORT = 8266


#: What a finished stage leaves in its directory, that the stages after it read: a stage kept on
#: ``--resume`` without it would fail them
STAGE_OUTPUTS = {
    "data": tuple(f"{split}.jsonl" for split in ("pretrain", "sft", "rl_train", "heldout")),
    **{name: ("hf/config.json",) for name in ("pretrain", "sft", "rl")},
}


class DemoError(ValueError):
    """What stops the demo for its settings or its data, said in one line (exit status 2)."""


def build_data(cfg: Config, root: Path) -> dict[str, Path]:
    """The synthetic data, built once into ``root/data`` for every stage."""
    from cluster.stage_data import build_synthetic

    if cfg.data.synthetic is None:
        raise ValueError("the demo config needs a data.synthetic section")
    return build_synthetic(cfg.data.synthetic, root / "data")


def browser_problem(cfg: Config, root: Path, resume: bool) -> str | None:
    """Why the GUI pages cannot be rendered, when the demo will make its data and the GUI domain
    is in it (a demo resumed after its data stage needs no browser); else None."""
    from rlcs.tasks.gui import ChromiumMissing, find_chromium

    syn = cfg.data.synthetic
    if (
        syn is None
        or "gui" not in syn.domains
        or (resume and (root / "data" / STAGE_DONE).exists())
    ):
        return None
    try:
        find_chromium()
    except ChromiumMissing as e:
        return str(e)
    return None


def data_overrides(files: dict[str, Path], split: str) -> list[str]:
    """Point a stage at the prebuilt split instead of building the data again."""
    return ["data.synthetic=null", f"data.train={json.dumps([str(files[split])])}",
            f"data.eval={json.dumps([str(files['heldout'])])}"]  # fmt: skip


#: The splits whose texts a tiny model's tokenizer learns its merges from
#: (``model.tokenizer_merges``): everything the model trains on, never the held-out items.
CORPUS_SPLITS = ("pretrain", "sft", "rl_train")


def corpus_overrides(cfg: Config, files: dict[str, Path]) -> list[str]:
    """Where the pretraining stage's tokenizer learns its merges, when it learns any."""
    if not cfg.model.tokenizer_merges:
        return []
    return [f"model.tokenizer_corpus={json.dumps([str(files[s]) for s in CORPUS_SPLITS])}"]


def stage_config(base: Path, run_root: Path, name: str, overrides: list[str]) -> Config:
    return load_config(
        base, [*overrides, f"run.root={run_root}", f"run.name={name}", "run.save_every=0"]
    )


def rl_budget_line(
    budget_s: float, spent_s: float, limit_s: float, iterations: int, after_s: float = AFTER_RL_S
) -> str:
    """What the demo says of the time budget as RL starts: RL's limit, or that the stages
    before it spent the budget, and RL runs one iteration. ``after_s``: what the budget keeps
    back from RL."""
    if spent_s + after_s + 1.0 >= budget_s:
        return (
            f"RL: the demo's {budget_s / 60:g}-minute budget (--minutes) is spent: the stages "
            f"before RL took {spent_s:.0f}s; RL runs one iteration (run.max_wall_s="
            f"{limit_s:.0f}) and stops; a larger --minutes, or 0 (no limit), gives it more"
        )
    return (
        f"RL: up to {iterations} iterations, stopping after the one that leaves "
        f"{after_s:.0f}s of the demo's {budget_s / 60:g} minutes (run.max_wall_s="
        f"{limit_s:.0f}; --minutes sets the budget, 0 lifts it)"
    )


def rl_final_figures(metrics: Sequence[dict], like: Mapping[str, Any]) -> dict | None:
    """The held-out figures of the RL stage's evaluation at its last iteration, per domain of
    ``like`` (an `evaluate` result; "all" among them) as `evaluate` gives them; None where that
    iteration's record holds no evaluation of each. The stage evaluates on its own rollout
    engine, greedily, with the weights its checkpoint exports: the same figures as an
    evaluation of the exported model (every domain's, to the item, in `/tmp/demo96`:
    docs/demo.md, "RL's own last evaluation")."""
    record = max(metrics, key=lambda r: r.get("step", 0), default={})
    if not record.get("step"):
        return None
    keys = [(d, f"eval/pass_rate/{d}", f"eval/reward/{d}") for d in like]
    if any(p not in record or r not in record for _, p, r in keys):
        return None
    return {d: {"pass_rate": record[p], "reward": record[r]} for d, p, r in keys}


def run(
    config: Path,
    root: Path,
    dashboard_port: int | None,
    resume: bool = False,
    overrides: Sequence[str] = (),
    budget_s: float | None = None,
    started: float | None = None,
) -> dict:
    """The whole demo into ``root``. ``resume`` keeps the stages of an earlier attempt that
    finished with the same settings (see ``StageLedger``). ``overrides`` (``key=value``) change
    ``config`` for every stage, before the demo's own settings for pretraining and SFT
    (``PRETRAIN``, ``SFT``), which therefore keep theirs, and after those for RL (``RL``):
    ``run.iterations=150`` lengthens RL alone, and on ``resume`` leaves the data, pretraining
    and SFT kept. ``budget_s`` bounds the whole demo's wall time: RL gets what the stages
    before it left, less ``AFTER_RL_S`` (and as long as the SFT checkpoint's evaluation took,
    where RL evaluates none of its iterations), as its ``run.max_wall_s`` (at least one
    iteration).
    ``started``: the ``time.perf_counter()`` the wall time and the budget count from (the
    command's start; by default this call's)."""
    t0 = time.perf_counter() if started is None else started
    import ray
    from rich.console import Console

    from actors.rank_calls import own_error
    from actors.reward import options_from_config
    from cluster.evaluate import evaluate
    from cluster.stage_data import load_stage_data
    from cluster.train import RunFailed, connect_ray, train
    from rewards.argtypes import listen_error
    from rlcs.runlog import read_metrics
    from rlcs.tasks import SPLITS

    console = Console()

    def say(text: str) -> None:
        """A line as it is: no markup read from its paths, and its commands not wrapped (a
        command broken over two lines cannot be pasted; logs are 80 columns wide)."""
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    walls: dict[str, float] = {}
    ledger = StageLedger(root, resume)
    root.mkdir(parents=True, exist_ok=True)
    (root / DEMO_MARKER).write_text(json.dumps({"config": str(config)}))

    def stage(name: str, fn, settings: dict | None = None, evaluation: bool = False):
        outputs = STAGE_OUTPUTS.get(name, ())
        if settings is not None and ledger.keep(name, settings, not evaluation, outputs):
            console.rule(f"[bold]{name}[/] (kept)")
            say(f"{name}: kept from the earlier attempt (it took {ledger.kept[name]:.0f}s)")
            walls[name] = 0.0
            return ledger.results.get(name)
        console.rule(f"[bold]{name}")
        s = time.perf_counter()
        out = fn()
        walls[name] = time.perf_counter() - s
        if settings is not None:
            ledger.finished(name, settings, walls[name], out if evaluation else None)
        console.print(f"[green]{name} done[/] in {walls[name]:.0f}s")
        return out

    base = load_config(config, list(overrides))
    stage("data", lambda: build_data(base, root), base.data.model_dump(mode="json")["synthetic"])
    files = {split: root / "data" / f"{split}.jsonl" for split in SPLITS}
    rl_data = [*RL, *overrides, *data_overrides(files, "rl_train")]
    rl_sets = [*rl_data, f"model.path={root / 'sft' / 'hf'}"]
    rl = stage_config(config, root, "rl", rl_sets)
    # RL's items are read before pretraining: what they refuse (a domain weight for a domain the
    # data lacks, say) stops the demo here, not after pretraining and SFT; read for the model
    # the stages start from (an SFT checkpoint there may be one that runs again)
    try:
        heldout = load_stage_data(stage_config(config, root, "rl", rl_data), rl.run_dir).eval_items
    except ValueError as e:
        raise DemoError(f"the RL stage's data: {e}") from e
    if not heldout:
        raise DemoError(f"{files['heldout']} holds no items: the demo measures RL on them "
                        "(data.synthetic.sizes.heldout)")  # fmt: skip
    pre = stage_config(config, root, "pretrain",
                       [*overrides, *PRETRAIN, *data_overrides(files, "pretrain"),
                        *corpus_overrides(base, files)])  # fmt: skip
    connect_ray(pre)
    stage("pretrain", lambda: train(pre), stage_settings(pre))
    sft = stage_config(config, root, "sft", [*overrides, *SFT, *data_overrides(files, "sft"),
                                             f"model.path={root / 'pretrain' / 'hf'}"])  # fmt: skip
    stage("sft", lambda: train(sft), stage_settings(sft))
    # the evaluations run alone, on the CPUs that RL's learner and rollout engine take in turn
    cpus = rl.cluster.learner_cpus_per_rank + rl.cluster.rollout_cpus_per_worker
    options, dtype = options_from_config(rl.reward), rl.model.dtype
    scoring = {"reward_options": options, "dtype": dtype}

    def held_out(name: str, model: Path) -> dict:
        try:
            return evaluate(model, heldout, rl.rollout, cpus, **scoring, progress=True, desc=name)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            if isinstance(e, ray.exceptions.RayActorError):
                why = f"its rollout worker died ({type(e).__name__})"
            else:
                cause = own_error(e)
                first = (str(cause).strip().splitlines() or [""])[0]
                why = f"{type(cause).__name__}: {first}".rstrip(": ")
            raise RunFailed(f"the held-out evaluation ({name}) of {model} stopped: {why}") from e

    # kept only with SFT's checkpoint: a stage before it that ran again ends the keeping
    before = stage("eval after SFT", lambda: held_out("eval after SFT", root / "sft" / "hf"),
                   eval_settings(rl.rollout, heldout, cpus, options, dtype),
                   evaluation=True)  # fmt: skip
    spent = time.perf_counter() - t0
    # an RL run that evaluates no iteration leaves the demo to evaluate its model, for about as
    # long as the SFT checkpoint's evaluation took
    eval_s = walls["eval after SFT"] or ledger.kept.get("eval after SFT", 0.0)
    after_s = AFTER_RL_S + (0.0 if rl.run.eval_every else eval_s)
    if budget_s:
        left = budget_s - spent - after_s
        rl = stage_config(config, root, "rl", [*rl_sets, f"run.max_wall_s={max(left, 1.0):.0f}"])

    def rl_stage() -> None:
        if budget_s:
            say(rl_budget_line(budget_s, spent, rl.run.max_wall_s, rl.run.iterations, after_s))
        dash = None
        if dashboard_port:
            # free when the demo started; something may have taken it since
            if problem := listen_error("127.0.0.1", dashboard_port):
                say(f"curriculum dashboard: not served ({problem}); `rlcs dashboard {root} "
                    "--port N` serves it from another shell")  # fmt: skip
            else:
                dash = start_dashboard(rl.run_dir, dashboard_port, root / "dashboard.log")
                say(dashboard_line(root, dashboard_port))
        try:
            # the SFT checkpoint's evaluation is RL's step 0, where the dashboard's curves start
            train(rl, baseline=before)
        finally:
            if dash is not None:
                stop_dashboard(dash)

    stage("rl", rl_stage, stage_settings(rl))
    rl_metrics = read_metrics(rl.run_dir)
    # RL evaluated its last iteration's weights, those its checkpoint holds, on these items: the
    # exported model is evaluated again only where it did not (run.eval_every=0, say)
    after = rl_final_figures(rl_metrics, before) or stage(
        "eval after RL", lambda: held_out("eval after RL", root / "rl" / "hf")
    )
    rl_rewards = domain_rewards(rl_metrics)
    rl_iters = max((r["step"] for r in rl_metrics), default=0)
    summary = {
        "sft_pass_rate": before["all"]["pass_rate"],
        "rl_pass_rate": after["all"]["pass_rate"],
        "gain_points": 100 * (after["all"]["pass_rate"] - before["all"]["pass_rate"]),
        "min_domain_rl_reward": min(rl_rewards.values()) if rl_rewards else 0.0,
        "wall_s": None,  # below, once the report's plots are drawn
        "before": before,
        "after": after,
        "stage_wall_s": walls,
        "kept_stages": ledger.kept,
        "rl_reward": rl_rewards,
        "rl_iterations": rl_iters,
        # the RL run ended early for the budget (run.max_wall_s): the command that goes on
        "rl_continue": (
            f"rlcs train {rl.run_dir / 'config.yaml'} --resume --set run.max_wall_s=null"
            if 0 < rl_iters < rl.run.iterations
            else None
        ),
        "heldout_items": len(heldout),
    }
    plots = demo_plots(root, summary)
    summary["wall_s"] = time.perf_counter() - t0
    report_results(root, summary, plots, rl.run.iterations, console, say)
    return summary


def main(args: argparse.Namespace) -> int:
    started = time.perf_counter()  # the demo's wall time and its budget count from here
    from cluster.run_lock import LOCK_FILE
    from rewards.argtypes import listen_error
    from rlcs.config import ConfigError
    from rlcs.data import make_writable_dir

    root = Path(args.run_dir or "runs/demo")
    config = Path(args.config or DEFAULT_CONFIG)
    try:  # everything a user can get wrong is checked before the first stage starts
        cfg = load_config(config, args.overrides)
        if cfg.data.synthetic is None:
            raise ConfigError(f"{config}: the demo builds its data: give a data.synthetic section")
        from rlcs.tasks import DEFAULT_SIZES

        sizes = {**DEFAULT_SIZES, **cfg.data.synthetic.sizes}
        if empty := [split for split in DEFAULT_SIZES if sizes[split] < 1]:
            # each stage would stop at its empty split, the held-out one after RL
            raise ConfigError(
                f"data.synthetic.sizes gives no {' and no '.join(empty)} items: the demo "
                f"pretrains, fine-tunes, runs RL and evaluates on one split each; give each at "
                "least 1 a domain"
            )
        if cfg.run.max_wall_s is not None:
            # every stage would take it as its own limit, and cut pretraining or SFT short
            raise ConfigError(
                f"run.max_wall_s={cfg.run.max_wall_s:g} is set (in {config} or by --set): the "
                "demo's time limit is --minutes, which gives RL what pretraining and SFT leave"
            )
    except ConfigError as e:
        print(f"rlcs demo: {e}", file=sys.stderr)
        return 2
    if root.exists() and not root.is_dir():
        print(f"rlcs demo: --run-dir {root} is a file", file=sys.stderr)
        return 2
    if args.dashboard_port and (problem := listen_error("127.0.0.1", args.dashboard_port)):
        print(f"rlcs demo: the dashboard {problem}; pass another --dashboard-port, or 0 for "
              "none", file=sys.stderr)  # fmt: skip
        return 2
    if args.resume and not root.exists():
        print(f"rlcs demo: --resume: {root} does not exist; nothing to resume (drop --resume to "
              "start a demo there)", file=sys.stderr)  # fmt: skip
        return 2
    used = root.exists() and any(p.name != LOCK_FILE for p in root.iterdir())
    if used and not args.resume:
        print(f"rlcs demo: {root} is not empty; remove it, pass another --run-dir, or --resume "
              "to keep the stages that finished there", file=sys.stderr)  # fmt: skip
        return 2
    if used and not (root / DEMO_MARKER).is_file():
        print(f"rlcs demo: --resume: {root} holds no demo (no {DEMO_MARKER}); nothing in it is "
              "touched", file=sys.stderr)  # fmt: skip
        return 2
    if problem := browser_problem(cfg, root, args.resume):
        print(f"rlcs demo: {problem}", file=sys.stderr)
        return 2
    try:
        from cluster.ray_connect import check_ray_address

        # a cluster.address or $RAY_ADDRESS that nothing answers stops here, before any write
        check_ray_address(cfg)
        make_writable_dir(root, "--run-dir")  # as does a folder under a file, or unwritable
    except ValueError as e:
        print(f"rlcs demo: {e}", file=sys.stderr)
        return 2
    from cluster.run_lock import RunDirBusy, lock_run_dir, unlock_run_dir

    try:  # a second demo in the same folder (its stages lock their own folders in turn)
        lock_run_dir(root)
    except RunDirBusy as e:
        print(f"rlcs demo: {e}", file=sys.stderr)
        return 2
    from cluster.placement import PlacementError
    from cluster.train import RunFailed
    from rlcs.tasks.gui import ChromiumMissing

    port = (
        [f"--dashboard-port={args.dashboard_port}"] if args.dashboard_port != DASHBOARD_PORT else []
    )
    again = shlex.join(
        ["rlcs", "demo", "--resume", "--run-dir", str(root)]
        + (["--config", str(config)] if args.config else [])
        + [a for kv in args.overrides for a in ("--set", kv)]
        + [f"--minutes={args.minutes:g}"]
        + port  # another port than the default: the default may be the one that was taken
    )
    from rlcs.data import DatasetError

    try:
        budget = 60 * args.minutes if args.minutes else None
        run(config, root.resolve(), args.dashboard_port, args.resume, args.overrides, budget,
            started=started)  # fmt: skip
    except KeyboardInterrupt:
        print(f"rlcs demo: interrupted; the stages that finished are kept: continue with "
              f"`{again}`", file=sys.stderr)  # fmt: skip
        return 130
    except (ChromiumMissing, DemoError, LedgerError, DatasetError, ConfigError) as e:
        # the data made again on --resume (other settings) without a browser; data that RL
        # refuses; a stage record that cannot be read
        print(f"rlcs demo: {e}", file=sys.stderr)
        return 2
    except (RunFailed, PlacementError) as e:  # an actor died, a checkpoint could not be written
        print(f"rlcs demo: {e}\nrlcs demo: the stages that finished are kept: continue with "
              f"`{again}`", file=sys.stderr)  # fmt: skip
        return 1
    finally:
        unlock_run_dir(root)
    return 0
