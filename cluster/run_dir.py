"""A run's directory: claiming it for a run (new, resumed, or started over when an earlier
launch stopped before its first step), and what an interrupted run left to resume from."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from cluster.checkpointing import Checkpointer, saved_steps
from cluster.resume_check import check_resume_settings
from cluster.run_lock import lock_run_dir, unlock_run_dir
from cluster.train_data_record import TRAIN_DATA_FILE
from rlcs.config import Config
from rlcs.data import make_writable_dir

log = logging.getLogger(__name__)


def prepare_run_dir(
    cfg: Config, resume: bool, lock: bool = False, made: Sequence[Path] = ()
) -> Path:
    """Check that the run can start in its directory, and create that; with ``lock``, claim it
    for this driver first (``cluster.run_lock``; the caller unlocks it when the run ends).
    ``made``: the folders this call creates (``new_folders``), removed again while empty when
    the directory cannot be claimed."""
    run_dir = cfg.run_dir
    for parent in (run_dir, *run_dir.parents):
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(
                    f"{parent} is a file; the run directory would be {run_dir}"
                )
            break
    if resume and not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"--resume: {run_dir} has no config.yaml; nothing to resume")
    if lock:
        lock_run_dir(make_writable_dir(run_dir, "the run directory"))
    try:
        return _claim(cfg, run_dir, resume)
    except BaseException:
        if lock:
            unlock_run_dir(run_dir, remove_lock=True, made=made)
        raise


def _claim(cfg: Config, run_dir: Path, resume: bool) -> Path:
    if resume:
        check_resume_settings(cfg, run_dir)
    held = [n for n in ("config.yaml", "checkpoints", "metrics.jsonl", "hf")
            if (run_dir / n).exists()]  # fmt: skip
    if not resume and held and not _took_a_step(run_dir):
        # it stopped before its first step (at the Ray cluster's start or the roles'
        # placement, say): nothing of it is worth keeping, and the same command runs it again
        log.warning("%s holds a run that stopped before its first step; starting it over", run_dir)
        for name in _BEFORE_FIRST_STEP:
            path = run_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        held = []
    if not resume and held:
        raise FileExistsError(
            f"{run_dir} already holds a run ({', '.join(held)}); pass --resume to continue it "
            f"(or to start it over if it saved no checkpoint), --set run.name=<new name> to "
            f"start another, or remove that directory"
        )
    return make_writable_dir(run_dir, "the run directory")


#: What a run writes into its directory before its first step. ``data/`` stays: a synthetic
#: build checks its own settings (``cluster.stage_data.data_files``); a tiny ``model/`` is
#: built again from the config, which may have changed.
_BEFORE_FIRST_STEP = ("config.yaml", "checkpoints", "metrics.jsonl", "samples", "tensorboard",
                      "curriculum", "model", TRAIN_DATA_FILE)  # fmt: skip


def _took_a_step(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` logged a step, saved a checkpoint or exported a model."""
    metrics = run_dir / "metrics.jsonl"
    return (
        (run_dir / "hf").exists()
        or bool(saved_steps(run_dir))
        or (metrics.is_file() and metrics.stat().st_size > 0)
    )


def where_to_resume(cfg: Config) -> str:
    """What an interrupted run left to continue from, for its last line."""
    run_dir = cfg.run_dir
    if not (run_dir / "checkpoints").is_dir() or not (run_dir / "config.yaml").is_file():
        return f"it stopped before its first step: the same command starts it over in {run_dir}"
    step = Checkpointer(run_dir, cfg).resume_point()
    if not step:
        return (f"no checkpoint was saved yet in {run_dir}: the same command with --resume "
                "starts it over")  # fmt: skip
    return f"its checkpoint of step {step} is intact in {run_dir}: continue with --resume"
