"""`rlcs eval`: a checkpoint's pass rates on item files, per domain, the way the demo measures
them (one greedy answer an item), or with ``--samples K`` the mean pass rate of K sampled
answers and pass@K; ``--out`` keeps every scored answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cluster.evaluate import answer_items, eval_summary
from cluster.placement import worker_gpus
from rewards.base import ANSWER_ERRORS
from rlcs.config import Config


def summary_table(summary: dict[str, dict[str, Any]], samples: int) -> str:
    """The summary as a text table; pass@K only where there are several answers an item."""
    cols = ["items", "pass rate"] + ([f"pass@{samples}"] if samples > 1 else [])
    cols += ["reward", "format/parse", "unscorable"]
    lines = [f"{'domain':<12}" + "".join(f"{c:>14}" for c in cols)]
    for d, v in summary.items():
        answer_errors = sum(n for k, n in v["errors"].items() if k in ANSWER_ERRORS)
        cells = [str(v["items"]), f"{100 * v['pass_rate']:.1f}%"]
        cells += [f"{100 * v['pass_at_k']:.1f}%"] if samples > 1 else []
        cells += [f"{v['reward']:.3f}", str(answer_errors), str(v["unscorable"])]
        lines.append(f"{d:<12}" + "".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def eval_files(
    cfg: Config,
    model_path: Path,
    inputs: Sequence[Path],
    *,
    samples: int = 1,
    temperature: float = 0.0,
    num_cpus: float = 1.0,
    workers: int = 1,
    batch_items: int | None = 128,
    out: Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate ``model_path`` on the items of ``inputs``; with ``out``, write every scored
    answer there as JSONL (one line each, in item order), replacing a file there only with
    ``overwrite``."""
    from actors.reward import options_from_config
    from cluster.ray_connect import connect_ray
    from cluster.stage_data import load_rl_items
    from rlcs.data import check_output_file, write_jsonl

    if out is not None and out.resolve() in {p.resolve() for p in inputs}:
        raise ValueError(f"--out {out} is one of the inputs; write the answers elsewhere")
    items = load_rl_items(
        list(inputs), cfg.reward.custom_domains, image_check=cfg.data.image_check,
        multiple_choice=cfg.data.multiple_choice,
    )  # fmt: skip
    if not items:
        raise ValueError("no items to evaluate")
    if out is not None:  # after the items: it makes --out's folder, which a refusal must not
        check_output_file(out, overwrite=overwrite)
    connect_ray(cfg)  # once the inputs are known to be good
    records = answer_items(
        model_path, items, cfg.rollout, samples, temperature=temperature, num_cpus=num_cpus,
        num_gpus=worker_gpus(cfg.cluster), workers=workers, batch_items=batch_items,
        timeout_s=cfg.reward.timeout_s, reward_options=options_from_config(cfg.reward),
        dtype=cfg.model.dtype, progress=progress, ship_images=cfg.cluster.ship_images,
    )  # fmt: skip
    if out is not None:
        write_jsonl(records, out)
    return {"model": str(model_path), "samples": samples, "temperature": temperature,
            "summary": eval_summary(records), "out": str(out) if out else None}  # fmt: skip


class EvalTargetError(ValueError):
    """What `rlcs eval` was given does not name a model and items it can evaluate."""


def resolve_target(
    target: Path,
    step: int | None,
    config: Path | None,
    data: Sequence[str],
    overrides: Sequence[str] = (),
) -> tuple[Path, Config, list[Path]]:
    """(model directory, config, item files) for `rlcs eval`; the config is ``config`` (default
    configs/tiny-vlm.yaml) with ``overrides``.

    ``target`` is a Hugging Face model directory, or a run directory (one holding the
    ``config.yaml`` that `rlcs train` writes): then the model is its final ``hf/`` (or, with
    ``step``, the copy `run.export_hf_checkpoints` put beside that checkpoint), the config is
    the run's own, and the items default to its ``data.eval``.
    """
    from cluster.checkpointing import tag_of
    from cluster.demo import DEFAULT_CONFIG
    from rlcs.config import load_config

    files = [Path(p) for p in data]
    if any(o.split("=", 1)[0].strip() == "rollout.n" for o in overrides):
        raise EvalTargetError(
            "rollout.n is the RL group size and rlcs eval does not use it: give --samples K "
            "for K answers an item (1, greedy, by default)"
        )
    if not target.exists():
        raise EvalTargetError(f"{target}: no such model or run directory")
    if not target.is_dir():
        raise EvalTargetError(
            f"{target} is a file: give a model or run directory first, then the item files"
        )
    if (target / "config.json").is_file():
        if step is not None:
            raise EvalTargetError(f"--step needs a run directory; {target} is a model directory")
        if not files:
            raise EvalTargetError("give the item files to evaluate on")
        _check_model(target)
        return target, load_config(config or DEFAULT_CONFIG, list(overrides)), files
    if not (target / "config.yaml").is_file() and (target / "rl" / "config.yaml").is_file():
        raise EvalTargetError(
            f"{target} holds a run per stage (as `rlcs demo` writes): evaluate one of them, "
            f"e.g. {target / 'sft'} or {target / 'rl'}"
        )
    if not (target / "config.yaml").is_file():
        raise EvalTargetError(
            f"{target} is neither a Hugging Face model directory (config.json) nor a run "
            "directory (config.yaml)"
        )
    config = config or target / "config.yaml"
    if step is None:
        model = target / "hf"
        if not (model / "config.json").is_file():
            raise EvalTargetError(
                f"{target} has no final model ({model}): the run has not finished; pass --step K "
                "for a checkpoint exported with run.export_hf_checkpoints"
            )
    else:
        model = target / "checkpoints" / tag_of(step) / "hf"
        if not (model / "config.json").is_file():
            have = sorted(q.parent.name for q in (target / "checkpoints").glob("step_*/hf"))
            raise EvalTargetError(
                f"{target}: no Hugging Face copy of step {step} ({model}); "
                + (f"steps with one: {', '.join(have)}" if have else
                   "none was kept: run with run.export_hf_checkpoints: true")
            )  # fmt: skip
    cfg = load_config(config, list(overrides))
    _check_model(model)
    if not files:
        if cfg.data.synthetic is not None:
            files = [target / "data" / "heldout.jsonl"]
        else:
            files = [Path(f) for f in cfg.data.eval]
        if not files:
            raise EvalTargetError(f"{config} names no data.eval: give the item files")
    return model, cfg, files


def _check_model(model: Path) -> None:
    from cluster.stage_data import model_dir_problem

    if problem := model_dir_problem(model):
        raise EvalTargetError(f"{model}: {problem}")


def main(args: argparse.Namespace) -> int:
    from rlcs.config import ConfigError
    from rlcs.data import DatasetError

    try:
        model, cfg, files = resolve_target(
            Path(args.model), args.step, Path(args.config) if args.config else None, args.data,
            args.overrides,
        )  # fmt: skip
    except (ConfigError, EvalTargetError) as e:
        print(f"rlcs eval: {e}", file=sys.stderr)
        return 2
    samples = args.samples
    temperature = args.temperature
    if temperature is None:
        temperature = 0.0 if samples == 1 else cfg.rollout.temperature
    if samples < 1 or temperature < 0.0 or (samples > 1 and temperature == 0.0):
        print(f"rlcs eval: --samples {samples} at temperature {temperature}: give one greedy "
              "answer (temperature 0) or several sampled ones (temperature above 0)",
              file=sys.stderr)  # fmt: skip
        return 2
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        print(f"rlcs eval: no such item file: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        result = eval_files(
            cfg, model, files, samples=samples, temperature=temperature,
            num_cpus=args.cpus or cfg.cluster.rollout_cpus_per_worker, workers=args.workers,
            batch_items=args.batch_items or None, out=Path(args.out) if args.out else None, overwrite=args.overwrite,
        )  # fmt: skip
    except (DatasetError, ValueError) as e:
        print(f"rlcs eval: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlcs eval: interrupted", file=sys.stderr)
        return 130
    how = (
        "one greedy answer"
        if temperature == 0.0
        else f"{samples} answer{'s' if samples > 1 else ''} at temperature {temperature:g}"
    )
    print(f"{model}: {how} per item")
    print(summary_table(result["summary"], samples))
    unscorable = result["summary"].get("all", {}).get("unscorable", 0)
    if unscorable:
        print(f"{unscorable} answers could not be scored (timeouts or verifier errors); "
              "they count as failures", file=sys.stderr)  # fmt: skip
    if result["out"]:
        print(f"answers -> {result['out']}")
    print("RESULT " + json.dumps(result))
    return 0
