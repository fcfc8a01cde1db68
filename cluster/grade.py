"""`rlcs grade`: RLCS's offline grading. A reference model answers every item ``k`` times at the
rollout temperature; the share of answers the verifiers pass becomes the item's ``difficulty``.

The curriculum reads ``difficulty`` as an offline pass rate worth
``curriculum.offline_prior_weight`` attempts, so an RL run starts with every item in a tier
instead of every item unseen, and online evidence takes over as groups come back.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewards.base import is_unscorable
from rlcs.config import Config, RolloutConfig
from rlcs.data import Item

if TYPE_CHECKING:
    from cluster.grade_progress import GradeProgress
    from rlcs.curriculum.tiers import TierScheme

#: the pass-rate buckets of the summary table
BUCKETS = ("0", "(0, .25]", "(.25, .5]", "(.5, .75]", "(.75, 1)", "1")


def bucket(p: float) -> str:
    if p <= 0.0:
        return BUCKETS[0]
    if p >= 1.0:
        return BUCKETS[5]
    return BUCKETS[1 + min(3, int((p - 1e-9) * 4))]


def check_sampling(rollout: RolloutConfig) -> None:
    if rollout.temperature <= 0.0:
        raise ValueError("grading samples answers: rollout.temperature must be above 0")


def pass_rates(
    model_path: str | Path,
    items: Sequence[Item],
    rollout: RolloutConfig,
    samples: int,
    *,
    threshold: float = 0.5,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    workers: int = 1,
    batch_items: int = 64,
    timeout_s: float | None = None,
    reward_options: Mapping[str, Any] | None = None,
    dtype: str = "float32",
    progress: bool = True,
    ship_images: bool = False,
    kept: GradeProgress | None = None,
) -> tuple[dict[str, float | None], Counter[str]]:
    """Each item's share of its scored answers reaching ``threshold`` (None when none of its
    ``samples`` answers could be scored), and the answers' errors by kind. A wrong or
    unreadable answer (``format``, ``parse``) is a failure; one the verifiers could not score
    (a timeout, a crash) is left out, as in training.

    ``workers`` rollout workers, each reserving ``num_cpus`` and ``num_gpus``, answer
    ``batch_items`` items at a time, at ``rollout.temperature``; image paths must be absolute.
    The workers are killed at the end, also on failure. With ``kept`` (a grading's kept
    progress), the items it holds are not answered again and each batch is added to it.
    """
    from cluster.evaluate import answer_items
    from cluster.grade_progress import GradeProgress

    check_sampling(rollout)
    kept = kept or GradeProgress(None, {"threshold": threshold})
    if todo := [it for it in items if it.id not in kept.done]:
        answer_items(
            model_path, todo, rollout, samples, temperature=rollout.temperature,
            num_cpus=num_cpus, num_gpus=num_gpus, workers=workers, batch_items=batch_items,
            timeout_s=timeout_s, reward_options=reward_options, dtype=dtype, progress=progress,
            desc="grade", ship_images=ship_images, on_batch=kept.add,
        )  # fmt: skip
    return kept.rates([it.id for it in items])


def item_rates(
    records: Sequence[dict[str, Any]], ids: Sequence[str], threshold: float
) -> tuple[dict[str, float | None], Counter[str]]:
    """Each item's pass rate over its scored answers (None without any), and the errors by
    kind, from `cluster.evaluate.answer_items`' records."""
    from cluster.grade_progress import GradeProgress

    counts = GradeProgress(None, {"threshold": threshold})
    counts.add(records)
    return counts.rates(ids)


def tally(records: Sequence[dict[str, Any]], threshold: float) -> tuple[Counter[str], Counter[str]]:
    """Each item's answers that reach ``threshold``, and the answers' errors by kind, from
    `cluster.evaluate.answer_items`' records. An answer with an error never counts as a pass."""
    successes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for r in records:
        if r["error"] is not None:
            errors[r["error"]] += 1
        elif r["reward"] >= threshold:
            successes[r["id"]] += 1
    return successes, errors


def graded_items(
    items: Sequence[Item],
    rates: dict[str, float | None],
    src_dir: Path,
    out_dir: Path,
    tiers: TierScheme | None = None,
) -> list[Item]:
    """The items with ``difficulty`` set to their pass rate (4 decimals; left as it was where
    the rate is None), every other field as it was; relative image paths are rewritten to stay
    valid from ``out_dir``. An item labelled with a tier name (a human label) merges the two,
    as the recipe's offline grading does: the mean of the pass rate that tier stands for
    (``tiers``, the curriculum's) and the model's, both kept in ``meta`` (``human_tier``,
    ``model_pass_rate``)."""
    missing = [it.id for it in items if it.id not in rates]
    if missing:
        raise ValueError(f"{len(missing)} items have no grade, e.g. {missing[:3]}")
    same = src_dir.resolve() == out_dir.resolve()
    out = []
    for it in items:
        rate = rates[it.id]
        update: dict[str, Any] = {} if rate is None else {"difficulty": round(rate, 4)}
        if rate is not None and tiers is not None and isinstance(it.difficulty, str):
            label = tiers.offline_pass_rate(it.difficulty)
            update["difficulty"] = round((label + rate) / 2, 4)
            update["meta"] = {**it.meta, "human_tier": it.difficulty,
                              "model_pass_rate": round(rate, 4)}  # fmt: skip
        if not same and it.images:
            update["images"] = [_rebase(ref, src_dir, out_dir) for ref in it.images]
        out.append(it.model_copy(update=update))
    return out


def _rebase(ref: str, src_dir: Path, out_dir: Path) -> str:
    if ref.startswith("data:") or Path(ref).is_absolute():
        return ref
    return os.path.relpath((src_dir / ref).resolve(), out_dir.resolve())


def summary_table(items: Sequence[Item], rates: dict[str, float | None]) -> str:
    """Items per domain in each pass-rate bucket, and the domain's mean pass rate; a last
    column counts the items left without a grade, when there are any."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    means: dict[str, list[float]] = defaultdict(list)
    for it in items:
        rate = rates[it.id]
        if rate is None:
            counts[it.domain]["none"] += 1
            continue
        counts[it.domain][bucket(rate)] += 1
        means[it.domain].append(rate)
    ungraded = any(c["none"] for c in counts.values())
    head = f"{'domain':<12}" + "".join(f"{b:>11}" for b in BUCKETS) + f"{'mean':>8}"
    lines = [head + (f"{'no grade':>10}" if ungraded else "")]
    for d in sorted(counts):
        cells = "".join(f"{counts[d][b]:>11}" for b in BUCKETS)
        mean = f"{sum(means[d]) / len(means[d]):>8.3f}" if means[d] else f"{'-':>8}"
        lines.append(f"{d:<12}{cells}{mean}" + (f"{counts[d]['none']:>10}" if ungraded else ""))
    return "\n".join(lines)


def grade_settings(
    cfg: Config, model_path: Path, inputs: Sequence[Path], samples: int, items: int
) -> dict[str, Any]:
    """What a grading's kept progress must match to be continued (`GradeProgress`)."""
    from actors.reward import options_from_config

    return {"model": str(model_path.resolve()), "samples": samples,
            "temperature": cfg.rollout.temperature, "threshold": cfg.curriculum.success_threshold,
            "inputs": [str(p.resolve()) for p in inputs], "items": items,
            "reward": options_from_config(cfg.reward), "dtype": cfg.model.dtype,
            "multiple_choice": cfg.data.multiple_choice}  # fmt: skip


def grade_files(
    cfg: Config,
    model_path: Path,
    inputs: Sequence[Path],
    out: Path,
    samples: int,
    num_cpus: float,
    progress: bool = True,
    workers: int = 1,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Grade the items of ``inputs`` and write them, graded, as one JSONL file at ``out``
    (replacing a file there only with ``overwrite``).
    What is graded is kept in ``OUT.partial`` as it comes back, and a grading interrupted
    before its end goes on from there when run again (`cluster.grade_progress`)."""
    from actors.reward import options_from_config
    from cluster.grade_progress import GradeProgress
    from cluster.placement import worker_gpus
    from cluster.ray_connect import connect_ray
    from cluster.stage_data import (
        absolute_images,
        check_ground_truths,
        register_domains,
        tier_names,
    )
    from rlcs.curriculum.tiers import TierScheme
    from rlcs.data import as_asked, check_output_file, load_items, write_jsonl

    if out.resolve() in {p.resolve() for p in inputs}:
        raise ValueError(f"--out {out} is one of the inputs; write the graded copy elsewhere")
    check_sampling(cfg.rollout)
    domains = register_domains(cfg.reward.custom_domains)
    # a tier label is checked now: it is merged with the model's pass rate at the end
    tiers, names = TierScheme.from_config(cfg.curriculum), tier_names(cfg)
    loaded = [(p, load_items(p, domains, cfg.data.image_check, names)) for p in inputs]
    # answered as a run asks them; the graded copy keeps each item as its file gives it
    items = [absolute_images(it, p.parent) for p, its in loaded for it in check_ground_truths(
             p, [as_asked(it, cfg.data.multiple_choice) for it in its])]  # fmt: skip
    if not items:
        raise ValueError("no items to grade")
    check_output_file(out, overwrite=overwrite)  # after the items: it makes --out's folder
    kept = GradeProgress(out, grade_settings(cfg, model_path, inputs, samples, len(items)))
    todo = [it for it in items if it.id not in kept.done]
    if len(todo) < len(items):
        print(f"continuing the grading kept in {kept.path}: {len(items) - len(todo)} of "
              f"{len(items)} items graded already")  # fmt: skip
    if todo:
        connect_ray(cfg)  # once the inputs are known to be good
    rates, errors = pass_rates(
        model_path, items, cfg.rollout, samples, threshold=cfg.curriculum.success_threshold,
        num_cpus=num_cpus, num_gpus=worker_gpus(cfg.cluster), workers=workers,
        timeout_s=cfg.reward.timeout_s, reward_options=options_from_config(cfg.reward),
        dtype=cfg.model.dtype, progress=progress, ship_images=cfg.cluster.ship_images, kept=kept,
    )  # fmt: skip
    write_jsonl(
        [g for p, its in loaded for g in graded_items(its, rates, p.parent, out.parent, tiers)],
        out,
    )
    kept.finish()
    unscorable = sum(n for kind, n in errors.items() if is_unscorable(kind))
    return {"items": len(items), "answers": len(items) * samples, "errors": dict(errors),
            "unscorable": unscorable, "ungraded": sum(r is None for r in rates.values()),
            "table": summary_table(items, rates), "out": str(out)}  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from rlcs.config import ConfigError, load_config
    from rlcs.data import DatasetError

    try:
        from cluster.demo import DEFAULT_CONFIG

        cfg = load_config(Path(args.config) if args.config else DEFAULT_CONFIG, args.overrides)
    except ConfigError as e:
        print(f"rlcs grade: {e}", file=sys.stderr)
        return 2
    from cluster.stage_data import model_dir_problem

    model = Path(args.model)
    if problem := model_dir_problem(model):
        if (model / "config.yaml").is_file():  # a run directory, as `rlcs eval` takes
            problem = f"a run directory, not a model; grade with its model, {model / 'hf'}"
        print(f"rlcs grade: {model}: {problem}", file=sys.stderr)
        return 2
    cpus = args.cpus or cfg.cluster.rollout_cpus_per_worker
    try:
        result = grade_files(cfg, model, [Path(p) for p in args.data], Path(args.out),
                             args.samples, cpus, workers=args.workers,
                             overwrite=args.overwrite)  # fmt: skip
    except (DatasetError, ValueError) as e:
        print(f"rlcs grade: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        partial = Path(args.out).with_name(Path(args.out).name + ".partial")
        print(f"rlcs grade: interrupted; what was graded is kept in {partial}: the same "
              "command goes on from there", file=sys.stderr)  # fmt: skip
        return 130
    print(result["table"])
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(result["errors"].items())) or "none"
    print(f"{result['items']} items, {result['answers']} answers; errors: {kinds}"
          f" ({result['unscorable']} unscorable, left out of the pass rates) -> {result['out']}")  # fmt: skip
    if result["ungraded"]:
        print(f"{result['ungraded']} items had no answer the verifiers could score and keep "
              "the difficulty they had")  # fmt: skip
    print("RESULT " + json.dumps({k: v for k, v in result.items() if k != "table"}))
    return 0
