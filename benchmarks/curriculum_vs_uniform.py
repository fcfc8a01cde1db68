"""Curriculum sampling against uniform and DAPO-filter sampling, on the demo's tiny VLM.

The same RL budget (iterations x prompts per iteration x rollouts per prompt) from the same SFT
checkpoint, under ``curriculum.policy`` = ``rlcs``, ``uniform`` and ``dapo_filter``, over
several seeds (the seed moves the sampler, the rollouts and the learner's shuffling). Every run
measures the greedy held-out pass rate with its own rollout workers every ``--eval-every``
iterations (``run.eval_every``); the SFT checkpoint's own pass rate is iteration 0.

For each policy the curves are averaged over the seeds. The target is uniform's final mean pass
rate; a policy's figure is the first evaluated RL iteration at which its mean curve reaches the
target (``inf`` when it never does within the budget). ``ratio`` = rlcs / uniform. When
uniform ends no higher than the SFT checkpoint, a warning says the comparison is empty.
Equal iterations are not equal cost: ``rlcs`` rolls out more prompts than it trains on (its
expansion ratio) and ``dapo_filter`` tops up its batch, so each policy's prompts rolled out a
step, and until it reached the target, are printed too, with the ratio of the latter.

    python benchmarks/curriculum_vs_uniform.py                     # data, pretrain, SFT, 9 RL runs
    python benchmarks/curriculum_vs_uniform.py --base runs/demo    # reuse a demo's SFT checkpoint
        [--iterations 36] [--eval-every 6] [--seeds 0 1 2] [--grade 4] [--set key=value ...]

36 iterations by default (about an hour for the nine runs on two cores): at 12, uniform
sampling ended within 0.2 points of the SFT checkpoint in every measurement, so there was no
progress to compare (benchmarks/README.md).

``--grade K`` grades the RL items first, as the paper's RLCS does offline: the SFT checkpoint
answers each item K times (``rlcs grade``) and every run trains on the graded copy. Only
``rlcs`` reads the grades; ``uniform`` and ``dapo_filter`` weigh every item alike.

Run again with the same ``--root`` after an interruption, it reuses the runs that finished
(each run directory records its settings in ``benchmark.json``) and runs the others again; a
root holding runs made with other settings (another checkpoint, budget or ``--set``) stops it
with an error instead of mixing them in.

Ends with ``RESULT iters_rlcs=… iters_uniform=… iters_dapo=… ratio=… final_rlcs=…
final_uniform=… final_dapo=…``.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rounds import count

if TYPE_CHECKING:
    from rlcs.config import Config

POLICIES = ("rlcs", "uniform", "dapo_filter")
SHORT = {"rlcs": "rlcs", "uniform": "uniform", "dapo_filter": "dapo"}


def missing_from_base(base: Path) -> Path | None:
    """The first file that a finished demo run directory holds and ``base`` lacks, or None."""
    needed = [base / "sft" / "hf" / "config.json"]
    needed += [base / "data" / f"{s}.jsonl" for s in ("rl_train", "heldout", "sft", "pretrain")]
    return next((p for p in needed if not p.is_file()), None)


def prepare_base(config: Path, base: Path) -> tuple[Path, dict[str, Path]]:
    """The SFT checkpoint and data splits: a demo run directory's, or made here like the demo's."""
    from cluster.demo import PRETRAIN, SFT, build_data, data_overrides, stage_config
    from cluster.train import connect_ray, train
    from rlcs.config import load_config

    splits = {s: base / "data" / f"{s}.jsonl" for s in ("rl_train", "heldout", "sft", "pretrain")}
    sft = base / "sft" / "hf"
    if sft.exists() and all(p.exists() for p in splits.values()):
        print(f"INFO reusing the SFT checkpoint {sft}", flush=True)
        return sft, splits
    files = build_data(load_config(config), base)
    pre = stage_config(config, base, "pretrain", [*PRETRAIN, *data_overrides(files, "pretrain")])
    connect_ray(pre)
    train(pre)
    cfg = stage_config(config, base, "sft", [*SFT, *data_overrides(files, "sft"),
                                             f"model.path={base / 'pretrain' / 'hf'}"])  # fmt: skip
    train(cfg)
    return sft, files


def rl_run(config: Path, root: Path, name: str, overrides: list[str]) -> dict[int, float]:
    """One RL run; returns its held-out pass rate (all domains) by iteration."""
    from cluster.demo import RL, stage_config
    from cluster.train import connect_ray, train
    from rlcs.runlog import read_metrics

    cfg = stage_config(config, root, name, [*RL, *overrides])
    connect_ray(cfg)
    train(cfg)
    return {
        int(r["step"]): float(r["eval/pass_rate/all"])
        for r in read_metrics(cfg.run_dir)
        if "eval/pass_rate/all" in r
    }


def cached_curve(run_dir: Path, settings: dict) -> dict[int, float] | None:
    """The curve of a finished run of an interrupted benchmark with the same settings, or None
    when the run is still to do (one that was interrupted is run again from its start).

    A run directory left by a benchmark with other settings (another SFT checkpoint, other
    iterations or overrides) is never reused nor resumed: that stops the benchmark with an error
    naming it, and nothing in it is deleted.
    """
    marker = run_dir / "benchmark.json"
    if marker.exists():
        before = json.loads(marker.read_text())
        if before != settings:
            was, now = before.get("overrides", []), settings["overrides"]
            diff = [f"was {o}" for o in was if o not in now]
            diff += [f"now {o}" for o in now if o not in was]
            if before.get("config") != settings["config"]:
                diff.insert(0, f"config was {before.get('config')}, now {settings['config']}")
            raise SystemExit(
                f"error: {run_dir} holds a run with other settings ({'; '.join(diff)}); pass "
                f"another --root, or remove that directory to run it again"
            )
        out = run_dir / "curve.json"
        if out.exists():
            return {int(k): v for k, v in json.loads(out.read_text()).items()}
        # this benchmark's own run, interrupted before its curve was written: clear what it
        # left (`rlcs train` will not start over a run directory) and run it again
        for child in run_dir.iterdir():
            if child != marker:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        return None
    if run_dir.exists() and any(run_dir.iterdir()):
        raise SystemExit(
            f"error: {run_dir} holds a run this benchmark did not record the settings of; pass "
            f"another --root, or remove that directory to run it again"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(settings, indent=1))
    return None


def graded_split(cfg: Config, sft: Path, rl_train: Path, root: Path, samples: int) -> Path:
    """``root/graded/rl_train.jsonl``: the RL items graded by the SFT checkpoint (made once;
    reused while its record names the same checkpoint, items and sample count)."""
    from cluster.grade import grade_files

    out = root / "graded" / "rl_train.jsonl"
    marker = out.with_name("grade.json")
    settings = {"model": str(sft), "data": str(rl_train), "samples": samples}
    if out.exists() and marker.exists() and json.loads(marker.read_text()) == settings:
        print(f"INFO reusing the graded items {out}", flush=True)
        return out
    cpus = cfg.cluster.learner_cpus_per_rank + cfg.cluster.rollout_cpus_per_worker
    t = time.perf_counter()
    result = grade_files(cfg, sft, [rl_train], out, samples, cpus, overwrite=True)
    marker.write_text(json.dumps(settings, indent=1))
    print(result["table"])
    print(f"INFO graded {result['items']} items x {samples} answers in "
          f"{time.perf_counter() - t:.0f}s ({result['unscorable']} unscorable)", flush=True)  # fmt: skip
    return out


def prompts_rolled_out(run_dir: Path) -> dict[int, int]:
    """The prompts a run has rolled out by the end of each iteration, cumulative (each is one
    group of ``rollout.n`` rollouts): the cost of its iterations. ``rlcs`` over-samples by its
    expansion ratio and ``dapo_filter`` tops up, so equal iterations are not equal rollouts."""
    from rlcs.runlog import read_metrics

    total, out = 0, {}
    for r in sorted(read_metrics(run_dir), key=lambda r: r.get("step", -1)):
        if "curriculum/groups" in r and isinstance(r.get("step"), int):
            total += int(r["curriculum/groups"])
            out[r["step"]] = total
    return out


def draws_per_item(run_dir: Path) -> tuple[float, int] | None:
    """How often a run drew its items: the mean over the whole pool of draws per item (each draw
    one group of ``rollout.n`` rollouts) and the most any item was drawn, from the curriculum's
    last snapshot; None when the run left none. A policy that keeps going back to a few items
    can learn their answers rather than the skill (docs/demo.md)."""
    import yaml

    from rlcs.curriculum.persistence import CURRICULUM_DIR
    from rlcs.curriculum.snapshot import SnapshotError, read_snapshot

    try:
        arrays, _ = read_snapshot(run_dir / CURRICULUM_DIR)
    except (SnapshotError, FileNotFoundError):
        return None
    n = yaml.safe_load((run_dir / "config.yaml").read_text())["rollout"]["n"]  # as resolved
    draws = arrays["attempts"] / n
    return float(draws.mean()), int(draws.max())


def cost_at(costs: list[dict[int, int]], iteration: float) -> float:
    """The mean over seeds of the prompts rolled out by the end of ``iteration`` (inf if it
    is inf, nan where a run's metrics do not say)."""
    if math.isinf(iteration):
        return math.inf
    spent = [c.get(int(iteration)) for c in costs]
    return math.nan if not spent or None in spent else statistics.fmean(spent)


def within_budget(curve: dict[int, float], cost: dict[int, int], budget: float) -> float:
    """The pass rate at the last evaluation made within ``budget`` prompts rolled out (the SFT
    point, 0, costs none); nan when the run's metrics do not say what its iterations cost."""
    spent = [it for it in curve if it == 0 or cost.get(it, math.inf) <= budget]
    return curve[max(spent)] if cost else math.nan


def first_reaching(curve: dict[int, float], target: float) -> float:
    """First RL iteration (the SFT point, 0, excluded) whose pass rate reaches ``target``."""
    for it in sorted(k for k in curve if k > 0):
        if curve[it] >= target - 1e-12:
            return float(it)
    return math.inf


def main() -> None:
    from cluster.demo import DEFAULT_CONFIG, data_overrides

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--base", type=Path, default=None,
                    help="a demo run directory (data/ and sft/hf/) to start from")  # fmt: skip
    ap.add_argument("--root", type=Path, default=Path("runs/curriculum-vs-uniform"))
    ap.add_argument("--iterations", type=count(1), default=36)
    ap.add_argument("--eval-every", type=count(1), default=6)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--grade", type=count(0), default=0, metavar="K",
                    help="grade the RL items by K answers of the SFT checkpoint first (0: no)")  # fmt: skip
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="extra config overrides for every RL run")  # fmt: skip
    args = ap.parse_args()
    if "uniform" not in args.policies:
        ap.error("the target is uniform's final pass rate: keep 'uniform' among the policies")
    if args.eval_every > args.iterations:
        ap.error(f"--eval-every {args.eval_every} is over --iterations {args.iterations}: "
                 "no RL iteration would be evaluated")  # fmt: skip
    if args.base is not None and (missing := missing_from_base(args.base)):
        # building a base there instead would train into another run's directory
        raise SystemExit(f"error: --base {args.base} is not a finished demo run directory (no "
                         f"{missing}); run `rlcs demo --run-dir DIR` first, or leave --base out "
                         "to build one under --root")  # fmt: skip

    t0 = time.perf_counter()
    root = args.root.resolve()
    base = (args.base or root / "base").resolve()
    sft, files = prepare_base(args.config, base)

    from cluster.evaluate import evaluate
    from cluster.ray_connect import connect_ray
    from cluster.stage_data import load_stage_data
    from rlcs.config import load_config

    probe = load_config(args.config, data_overrides(files, "rl_train"))
    connect_ray(probe)
    if args.grade:
        files = {**files, "rl_train": graded_split(probe, sft, files["rl_train"], root,
                                                   args.grade)}  # fmt: skip
    heldout = load_stage_data(probe, root / "probe").eval_items
    start = evaluate(sft, heldout, probe.rollout)["all"]["pass_rate"]
    print(
        f"INFO SFT checkpoint: held-out pass rate {start:.4f} on {len(heldout)} items", flush=True
    )

    curves: dict[str, list[dict[int, float]]] = {p: [] for p in args.policies}
    costs: dict[str, list[dict[int, int]]] = {p: [] for p in args.policies}
    draws: dict[str, list[tuple[float, int] | None]] = {p: [] for p in args.policies}
    for seed in args.seeds:
        for policy in args.policies:
            name = f"{policy}-seed{seed}"
            overrides = [
                *data_overrides(files, "rl_train"), f"model.path={sft}",
                f"curriculum.policy={policy}", f"run.seed={seed}", f"rollout.seed={seed}",
                f"run.iterations={args.iterations}", f"run.eval_every={args.eval_every}",
                *args.overrides,
            ]  # fmt: skip
            settings = {"config": str(args.config.resolve()), "overrides": overrides}
            curve = cached_curve(root / "runs" / name, settings)
            if curve is None:
                curve = rl_run(args.config, root / "runs", name, overrides)
                (root / "runs" / name / "curve.json").write_text(json.dumps(curve))
            curve = {0: start, **curve}
            curves[policy].append(curve)
            costs[policy].append(prompts_rolled_out(root / "runs" / name))
            draws[policy].append(draws_per_item(root / "runs" / name))
            print(f"INFO {name}: " + " ".join(f"{k}:{v:.3f}" for k, v in sorted(curve.items())),
                  flush=True)  # fmt: skip

    mean = {
        p: {it: statistics.fmean(c[it] for c in cs) for it in cs[0]}
        for p, cs in curves.items()
        if cs
    }
    for p, curve in mean.items():
        print(f"INFO mean {p}: " + " ".join(f"{k}:{v:.3f}" for k, v in sorted(curve.items())))
    final = {p: curve[max(curve)] for p, curve in mean.items()}
    target = final["uniform"]
    if target <= start:
        print(f"WARNING uniform's final pass rate {target:.4f} is not above the SFT checkpoint's "
              f"{start:.4f}: RL made no progress to compare, so the iteration counts say little",
              flush=True)  # fmt: skip
    iters = {p: first_reaching(curve, target) for p, curve in mean.items()}
    ratio = iters.get("rlcs", math.nan) / iters["uniform"] if iters["uniform"] else math.nan
    # the same comparison by what the iterations cost: prompts rolled out, not steps taken
    prompts = {p: cost_at(costs[p], it) for p, it in iters.items()}
    for p in mean:
        spent = cost_at(costs[p], args.iterations) / args.iterations
        print(f"INFO {p}: {spent:.1f} prompts rolled out a step; {prompts[p]:.0f} by its first "
              f"evaluation at the target (iteration {iters[p]:g})", flush=True)  # fmt: skip
        if all(draws[p]):
            print(f"INFO {p}: an item drawn {statistics.fmean(m for m, _ in draws[p]):.2f} "
                  f"times in the mean over the pool, {max(x for _, x in draws[p])} at most "
                  "(all seeds)", flush=True)  # fmt: skip
    budget = cost_at(costs["uniform"], args.iterations)
    equal = {p: statistics.fmean(within_budget(c, k, budget) for c, k in zip(curves[p], costs[p],
                                                                          strict=True))
             for p in mean}  # fmt: skip
    print(
        f"INFO pass rate within uniform's {budget:.0f} prompts (last evaluation inside it, "
        "mean of seeds): " + " ".join(f"{p}={v:.4f}" for p, v in equal.items()),
        flush=True,
    )
    if "rlcs" in prompts and prompts["uniform"]:
        print(f"INFO prompt ratio (rlcs / uniform, prompts rolled out until each reaches the "
              f"target) {prompts['rlcs'] / prompts['uniform']:.3f}", flush=True)  # fmt: skip
    print(f"INFO target (uniform's final mean pass rate) {target:.4f}; "
          f"wall {time.perf_counter() - t0:.0f}s", flush=True)  # fmt: skip
    fields = [f"iters_{SHORT[p]}={iters.get(p, math.nan):g}" for p in POLICIES]
    fields.append(f"ratio={ratio:.3f}")
    fields += [f"final_{SHORT[p]}={final.get(p, math.nan):.4f}" for p in POLICIES]
    print("RESULT " + " ".join(fields))


if __name__ == "__main__":
    main()
