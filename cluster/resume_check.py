"""What ``--resume`` may change of a run's settings.

A resumed run takes its settings from the config given now, and most of them may differ from
the run's saved ``config.yaml`` (more iterations, another evaluation schedule, another
learning rate): those are listed, so none changes unnoticed. These may not:

- the **stage**: an SFT run resumed as RL would find no RL checkpoint, start at step 0, and
  replace the SFT run's metrics, checkpoints and exported model with its own;
- the **tiny model** the run built into ``RUN_DIR/model``: the run goes on with the model it
  built, so other ``model.tiny`` settings would be recorded in ``config.yaml`` and not applied;
- once a learner checkpoint exists, the **learner's layout** (``FIXED_BY_CHECKPOINT``), which
  DeepSpeed's checkpoint loader does not convert;
- once an RL run's sampler has saved its state, the **synthetic RL items** (what of
  ``data.synthetic`` decides them): ``RUN_DIR/data`` would be built again under the same item
  ids, and the sampler's record of each id would then describe another item;
- once a pretraining or SFT run has committed a checkpoint, its **training examples**: the
  checkpoint's step count, optimizer state and place in the examples' shuffled order describe
  the data the run started with, and would go on over other data as if they described it. The
  ``data.synthetic`` settings that decide the stage's split are compared here, before the data
  is built again; the training files, with what the run recorded at its start
  (``cluster.train_data_record``), once they are at hand (:func:`check_resume_examples`).

There is no override: a run that is to go on over other data starts anew from the model this
one has trained (the refusal says where it is).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from rlcs.config import Config

log = logging.getLogger(__name__)

#: Keys (and key prefixes) a resumed run must keep.
FIXED = ("stage", "model.tiny", "model.tiny_overrides", "model.tokenizer_merges",
         "model.tokenizer_corpus")  # fmt: skip
#: ... and those it must keep once it has saved a learner checkpoint, each with what of it the
#: checkpoint's files depend on: DeepSpeed partitions the optimizer state over the ranks, and
#: loads it back only as it was saved (2 ranks into 1: "The checkpoint being loaded used a DP
#: world size of 2 but the current world size is 1"; ZeRO-2 into ZeRO-3: an assertion in its
#: state-dict loader; fp32 into bf16 and back: it looks for the optimizer-state files under the
#: other precision's names, "bf16_zero_pp_rank_0_..." against "zero_pp_rank_0_...", and finds
#: none). Of the precision only the weights' dtype: bf16-mixed keeps fp32 weights and optimizer
#: state (it casts to bf16 inside the forward passes alone), so a run may go between it and fp32.
FIXED_BY_CHECKPOINT: dict[str, Callable[[Any], Any]] = {
    "learner.num_ranks": lambda ranks: ranks,
    "learner.zero_stage": lambda stage: stage,
    "learner.precision": lambda precision: "bf16" if precision == "bf16" else "fp32",
}


def _layout_change(key: str, saved: Any, asked: Any) -> bool:
    """Whether changing ``key`` from ``saved`` to ``asked`` changes what the checkpoint holds."""
    stored = FIXED_BY_CHECKPOINT.get(key)
    return stored is not None and stored(saved) != stored(asked)


class ResumeConflict(ValueError):
    """--resume was asked to change what a run cannot change."""


def changes(saved: Any, now: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Every setting that differs, as ``{"section.key": (saved, now)}``: sections are compared
    key by key, and a key one side lacks is None there (``{}`` against ``{"math": 1}`` differs
    in ``math`` alone; a section against None is one change)."""
    if isinstance(saved, dict) and isinstance(now, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for k in sorted(saved.keys() | now.keys()):
            out.update(changes(saved.get(k), now.get(k), f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {} if saved == now else {prefix: (saved, now)}


_NO_DEFAULT = object()


def _default_of(key: str) -> Any:
    """The declared default of setting ``key`` ("section.field"), JSON-dumped as config.yaml
    holds it; ``_NO_DEFAULT`` for a key inside a free-form dict or without a default."""
    model: Any = Config
    field = None
    for part in key.split("."):
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return _NO_DEFAULT
        field = fields[part]
        model = field.annotation
    if field is None or field.is_required():
        return _NO_DEFAULT
    value = field.get_default(call_default_factory=True)
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def _added_later(key: str, saved: Any, now: Any) -> bool:
    """A setting the saved config.yaml lacks, asked at its default: the run was saved before
    the setting existed, and ran as its default has it."""
    return saved is None and now is not None and _default_of(key) == now


#: Settings read only where a tiny model is built.
TINY_ONLY = ("model.tiny", "model.tokenizer_")


def _builds_tiny(model: dict) -> bool:
    return not model.get("path") and model.get("tiny") is not None


def _fixed(key: str) -> bool:
    return any(key == f or key.startswith(f + ".") for f in FIXED)


def _saved_config(run_dir: Path) -> dict[str, Any]:
    """The run's saved ``config.yaml``: a mapping with a ``stage``, or a ``ResumeConflict``
    saying what is wrong with it (an empty or damaged file would otherwise resume as if every
    setting had changed)."""
    path = run_dir / "config.yaml"
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ResumeConflict(f"--resume: cannot read {path}: {e}") from None
    if not isinstance(saved, dict) or "stage" not in saved:
        what = "empty" if saved is None else "not a config (no stage)"
        raise ResumeConflict(
            f"--resume: {path} is {what}; the run's settings are unknown, so it cannot be "
            "resumed: restore the file, or start a new run (another run.name)"
        )
    return saved


def _diff(cfg: Config, run_dir: Path) -> tuple[dict, dict[str, tuple[Any, Any]]]:
    """(the saved config, the settings that differ from it)."""
    saved = _saved_config(run_dir)
    now = cfg.resolved()
    if "steps" not in now["learner"]:  # derived from run.iterations, whose change is listed
        saved = {**saved, "learner": {k: v for k, v in (saved.get("learner") or {}).items()
                                      if k != "steps"}}  # fmt: skip
    diff = changes(saved, now)
    diff = {k: v for k, v in diff.items() if not _added_later(k, *v)}
    if not (_builds_tiny(saved.get("model") or {}) and _builds_tiny(now["model"])):
        # the model is (or was) read from model.path: the tiny model's settings are not used
        diff = {k: v for k, v in diff.items() if not k.startswith(TINY_ONLY)}
    return saved, diff


def check_resume_settings(cfg: Config, run_dir: Path) -> None:
    """A ResumeConflict naming each setting of :data:`FIXED` that differs from the run's saved
    ``config.yaml``; once the RL sampler has saved its state, each change of the synthetic RL
    items; once a pretraining or SFT run has committed a checkpoint, each change of the
    synthetic examples it trains on; once a learner checkpoint exists, each change of its
    layout."""
    from cluster.checkpointing import committed_step, saved_steps
    from cluster.stage_data import SPLIT_OF_STAGE

    saved, diff = _diff(cfg, run_dir)
    if bad := [k for k in diff if _fixed(k)]:
        raise ResumeConflict(
            f"--resume: a resumed run cannot change {', '.join(bad)} of the run in {run_dir} "
            f"({_listed({k: diff[k] for k in bad})}, saved -> asked); resume it with its own "
            "settings, or start a new run (--set run.name=<new name>)"
        )
    bad = _items_changes(saved, cfg, diff)
    # before the sampler saves its state, or before a checkpoint, the run starts from step 0
    if bad and cfg.stage == "rl" and snapshot_meta(run_dir) is not None:
        raise ResumeConflict(
            f"--resume: the curriculum of the run in {run_dir} keeps a record of each RL item "
            f"it has drawn (attempts, successes, tier) by the item's id, and {_listed(bad)} "
            "(saved -> asked) would build its data again under the same ids: an item would "
            "keep its id but not its content, so the record of that id would describe another "
            "item (and items added would never be drawn: the sampler keeps those it started "
            "with; items dropped would be missing). Resume with the run's own data.synthetic "
            "settings, or " + _new_run_from(run_dir)
        )
    if bad and cfg.stage != "rl" and (step := committed_step(run_dir)):
        raise ResumeConflict(
            f"--resume: the {cfg.stage} run in {run_dir} has trained {step} steps on the "
            f"{SPLIT_OF_STAGE[cfg.stage]} examples data.synthetic built, and {_listed(bad)} "
            "(saved -> asked) would build others: the checkpoint's step count, optimizer state "
            "and place in the examples' shuffled order describe the examples the run started "
            "with, and would go on over the new ones as if they described them. Resume with the "
            "run's own data.synthetic settings, or " + _new_run_from(run_dir)
        )
    steps = saved_steps(run_dir)
    if steps and (bad := [k for k in diff if _layout_change(k, *diff[k])]):
        raise ResumeConflict(
            f"--resume: the learner checkpoint of step {steps[-1]} in {run_dir} cannot load "
            f"with {_listed({k: diff[k] for k in bad})} (saved -> asked): DeepSpeed loads it "
            "only into the layout it was saved from; resume with the run's own settings, or "
            "start a new run"
            + (f" from its exported model (model.path={run_dir / 'hf'})"
               if (run_dir / "hf").is_dir() else "")
        )  # fmt: skip


def _items_changes(saved: dict, cfg: Config, diff: dict) -> dict[str, tuple[Any, Any]]:
    """The changes of ``diff`` to ``data.synthetic`` that change the examples of the stage's
    split it builds (their content, which there are, and for pretraining and SFT their order),
    where both the saved config and ``cfg`` build them; the other splits' sizes change none of
    them (each split is drawn from a seed of its own), and neither do settings that come to the
    same examples (the split's default size given, a domain's range given as the common one)."""
    from cluster.stage_data import SPLIT_OF_STAGE
    from rlcs.tasks import SPLITS

    was = (saved.get("data") or {}).get("synthetic")
    now = cfg.data.synthetic
    if not isinstance(was, dict) or now is None:
        # data.train files: check_resume_items and check_resume_examples compare the data
        return {}
    split = SPLIT_OF_STAGE[cfg.stage]
    if _items_of(was, split) == _items_of(now.model_dump(mode="json"), split):
        return {}
    others = tuple(f"data.synthetic.sizes.{s}" for s in SPLITS if s != split)
    return {k: v for k, v in diff.items()
            if k.startswith("data.synthetic") and not k.startswith(others)}  # fmt: skip


def _items_of(synthetic: dict, split: str) -> dict:
    """What of a ``data.synthetic`` section decides the examples of ``split`` it builds: the
    domains, the number of each, the seed, and each domain's difficulty range and form (text
    or image). An RL item's id and content do not depend on the domains' order; a pretraining
    or SFT example's place in its file, which the steps' shuffled order follows, does."""
    from pydantic import ValidationError

    from rlcs.config import SyntheticDataConfig
    from rlcs.tasks import DEFAULT_SIZES

    try:
        syn = SyntheticDataConfig.model_validate(synthetic)
    except ValidationError:  # a section saved under other rules: compared as written
        return synthetic
    return {
        "domains": sorted(syn.domains) if split == "rl_train" else list(syn.domains),
        "size": syn.sizes.get(split, DEFAULT_SIZES[split]),
        "seed": syn.seed,
        "text_only": syn.text_only,
        "heldout": syn.heldout,
        "difficulty": {d: list(syn.difficulty_of(d)) for d in syn.domains},
    }


def _new_run_from(run_dir: Path) -> str:
    """The end of a refusal of other data: how to train on it instead."""
    return (
        f"start a new run on the new data from this run's model: {_start_from(run_dir)} --set "
        "run.name=<new name>"
    )


def _start_from(run_dir: Path) -> str:
    """How to start a new run from the model of the run in ``run_dir``: its exported model,
    else the newest checkpoint's export, else how to get one."""
    from cluster.checkpointing import saved_steps, tag_of

    exports = [run_dir / "hf"]
    exports += [run_dir / "checkpoints" / tag_of(s) / "hf" for s in reversed(saved_steps(run_dir))]
    if found := next((p for p in exports if p.is_dir()), None):
        return f"--set model.path={found}"
    return (
        f"finish this run with its own data settings (it exports its model to {run_dir / 'hf'}), "
        f"then --set model.path={run_dir / 'hf'}"
    )


def report_resume_changes(cfg: Config, run_dir: Path) -> dict[str, tuple[Any, Any]]:
    """Log (and return) the settings that differ from the run's saved ``config.yaml``: those
    that apply from here on, and those a resumed RL run's sampler keeps from its snapshot."""
    _, diff = _diff(cfg, run_dir)
    shown = {k: v for k, v in diff.items() if not k.startswith("curriculum.")}  # see below
    kept = {}
    if cfg.stage == "rl" and snapshot_meta(run_dir) is not None:
        kept = {k: v for k, v in shown.items() if k.startswith(SNAPSHOT_KEEPS)}
        shown = {k: v for k, v in shown.items() if k not in kept}
        warn_curriculum_changes(cfg, run_dir)
    if shown:
        log.warning(
            "--resume: these settings differ from the run's saved config.yaml and apply from "
            "here on: %s", _listed(shown),
        )  # fmt: skip
    if kept:
        log.warning(
            "--resume: the curriculum sampler keeps the domain weights saved with its state; "
            "these requested changes are not applied (start a new run to use them): %s",
            _listed(kept),
        )
    return diff


#: What a resumed RL run's sampler takes from its snapshot instead of the config (besides the
#: ``curriculum`` section, which :func:`warn_curriculum_changes` reports).
SNAPSHOT_KEEPS = ("data.domain_weights",)


def _listed(diff: dict[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())


def snapshot_meta(run_dir: Path) -> dict | None:
    """The meta of the run's latest curriculum snapshot, or None when it has saved none."""
    from rlcs.curriculum.persistence import CURRICULUM_DIR
    from rlcs.curriculum.snapshot import SnapshotError, read_meta

    try:
        return read_meta(run_dir / CURRICULUM_DIR)
    except (SnapshotError, FileNotFoundError):
        return None


def check_resume_items(run_dir: Path, item_ids: set[str]) -> None:
    """A resumed RL run's sampler draws the items of its snapshot, and the driver looks each
    one up in the data given now: a ResumeConflict when some are missing there (another
    ``data.train``), instead of a KeyError once the roles have started."""
    import numpy as np

    from rlcs.curriculum.persistence import CURRICULUM_DIR
    from rlcs.curriculum.snapshot import latest_snapshot

    if snapshot_meta(run_dir) is None:
        return  # no state saved yet: the sampler starts from the data given now
    path = latest_snapshot(run_dir / CURRICULUM_DIR) / "ids.npy"
    if not path.is_file():
        return
    saved = np.load(path, allow_pickle=False)
    if saved.dtype.kind == "S":  # ids are stored as UTF-8 bytes
        saved = np.char.decode(saved, "utf-8")
    missing = saved[~np.isin(saved, np.array(sorted(item_ids)))].tolist()
    if missing:
        raise ResumeConflict(
            f"--resume: the run's curriculum draws from {len(saved)} items, and {len(missing)} "
            f"of them are not in data.train now (e.g. {missing[:3]}); resume with the data "
            "the run started with (the files may have moved), or start a new run"
        )


def check_resume_examples(cfg: Config, run_dir: Path, files: Sequence[Path]) -> None:
    """A resumed pretraining or SFT run goes on from its checkpoint's step, optimizer state and
    place in the examples' shuffled order: a ResumeConflict when ``files``, its training files
    now, do not hold the bytes it recorded at its start (other files, or files whose content
    changed). Nothing is compared before a checkpoint is committed (the run starts over from
    step 0, on the data given now), nor for a run made before the record existed."""
    from cluster.checkpointing import committed_step
    from cluster.train_data_record import data_changes, fingerprint, recorded_train_data

    step = committed_step(run_dir)
    saved = recorded_train_data(run_dir) if step else None
    if saved is None or not (changed := data_changes(saved, fingerprint(files))):
        return
    raise ResumeConflict(
        f"--resume: the {cfg.stage} run in {run_dir} has trained {step} steps on other data than "
        f"it is given now ({'; '.join(changed)}): the checkpoint's step count, optimizer state "
        "and place in the examples' shuffled order describe the data the run started with, and "
        "would go on over this data as if they described it. Resume with the data the run "
        f"started with ({', '.join(f['path'] for f in saved)}; the files may move, their "
        "content may not change), or " + _new_run_from(run_dir)
    )


def as_resumed(cfg: Config, run_dir: Path) -> Config:
    """The config a resumed RL run runs with: its sampler's snapshot keeps the curriculum
    settings and the domain weights it started with, so ``config.yaml`` records those rather
    than the requested ones (which :func:`report_resume_changes` and
    :func:`warn_curriculum_changes` name as not applied)."""
    from rlcs.config import CurriculumConfig

    meta = snapshot_meta(run_dir)
    if cfg.stage != "rl" or meta is None:
        return cfg
    saved = _saved_config(run_dir)
    weights = (saved.get("data") or {}).get("domain_weights") or {}
    return cfg.model_copy(update={
        "curriculum": CurriculumConfig.model_validate(meta["config"]),
        "data": cfg.data.model_copy(update={"domain_weights": weights}),
    })  # fmt: skip


def warn_curriculum_changes(cfg: Config, run_dir: Path) -> list[str]:
    """A resumed sampler continues with the curriculum settings saved with its state: say so
    when the config asks for others, instead of ignoring them silently."""
    from rlcs.curriculum.persistence import config_changes, saved_config

    changes = config_changes(saved_config(run_dir), cfg.curriculum)
    if changes:
        log.warning(
            "--resume continues the curriculum with the settings saved in %s; these requested "
            "changes are not applied (start a new run to use them): %s",
            run_dir,
            "; ".join(changes),
        )
    return changes
