"""Whole-run checkpoints that a `kill -9` at any moment cannot tear.

A checkpoint at step k is the learner's (``RUN_DIR/checkpoints/step_<k>/``: DeepSpeed state,
RNG, data position) plus, in RL, the curriculum snapshot. The learner's is written first and
the curriculum's second, and the curriculum's ``LATEST`` pointer is the commit point: resume
takes the iteration of the curriculum's latest snapshot and loads the learner checkpoint of
that same step, which exists because it was written before. Pretraining and SFT have no
sampler, so the learner's ``latest`` pointer is the commit point there.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import ray

from actors.rank_calls import RanksStuck, own_error
from rlcs.config import Config

_TAG = re.compile(r"^step_(\d{8})$")


def saved_steps(run_dir: Path) -> list[int]:
    """The steps with a checkpoint in ``RUN_DIR/checkpoints``, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _TAG.match(p.name)))


def committed_step(run_dir: Path) -> int:
    """The step of the checkpoint the learner's ``latest`` pointer names, where pretraining
    and SFT resume; 0 when there is none."""
    latest = run_dir / "checkpoints" / "latest"
    if not latest.is_file():
        return 0
    m = _TAG.match(latest.read_text().strip())
    return int(m.group(1)) if m else 0


def tag_of(step: int) -> str:
    return f"step_{step:08d}"


class SaveFailed(RuntimeError):
    """A checkpoint could not be written: a full disk, a folder the actors cannot write to.
    What was committed before it (``latest``, the curriculum's pointer) is untouched."""


class Checkpointer:
    def __init__(self, run_dir: Path, cfg: Config):
        self.run_dir, self.cfg = run_dir, cfg
        self.root = run_dir / "checkpoints"
        self.root.mkdir(parents=True, exist_ok=True)

    def steps(self) -> list[int]:
        return saved_steps(self.run_dir)

    def resume_point(self) -> int:
        """The step to continue after: 0 when nothing was checkpointed yet."""
        if self.cfg.stage == "rl":
            from rlcs.curriculum.persistence import CURRICULUM_DIR
            from rlcs.curriculum.snapshot import SnapshotError, read_meta

            try:  # the snapshot's meta alone: loading 10M items' arrays would take seconds
                meta = read_meta(self.run_dir / CURRICULUM_DIR)
            except (SnapshotError, FileNotFoundError):
                return 0
            step = int(meta["iteration"])
        else:
            step = committed_step(self.run_dir)
        if step and step not in self.steps():
            raise FileNotFoundError(
                f"{self.root}: the curriculum is at step {step} but no learner checkpoint "
                f"{tag_of(step)} exists; the run directory is damaged"
            )
        return step

    def restore(self, roles, step: int) -> None:
        state = roles.learner.load_checkpoint(self.root, tag_of(step))
        if state and state.get("step") != step:
            raise RuntimeError(f"checkpoint {tag_of(step)} holds step {state.get('step')}")

    def maybe_save(self, roles, step: int, final: bool = False) -> None:
        """Save on schedule (``run.save_every``), at the run's last step, and at ``final``: a
        step the run ends at before its last (``run.max_wall_s``)."""
        if self.due(step) or final:
            self.save(roles, step)

    def due(self, step: int) -> bool:
        """Whether ``step`` is checkpointed on schedule (every ``run.save_every``, and the last)."""
        every = self.cfg.run.save_every
        return bool(every and step % every == 0) or step == self._last_step()

    def save(self, roles, step: int) -> None:
        """The learner's checkpoint, then the curriculum's snapshot (the commit point). A
        write that fails for want of space or permission raises ``SaveFailed``."""
        try:
            roles.learner.save_checkpoint(
                self.root, tag_of(step), {"step": step, "stage": self.cfg.stage}
            )
            if self.cfg.run.export_hf_checkpoints:
                roles.learner.export_hf(self.root / tag_of(step) / "hf")
            if roles.sampler is not None:
                ray.get(roles.sampler.save.remote())
        except (ray.exceptions.RayTaskError, RanksStuck) as e:
            # a rank's own error; under RanksStuck, that of the rank the others were stuck on
            failed = e.__cause__ if isinstance(e, RanksStuck) else e
            cause = own_error(failed)
            if not isinstance(cause, OSError):
                raise
            raise SaveFailed(
                f"the checkpoint of step {step} could not be written in {self.root} "
                f"({type(cause).__name__}: {cause})"
            ) from e
        # A checkpoint of a later step is one an earlier attempt left unfinished (killed before
        # its curriculum snapshot, which resume follows): this run went on from before it, so
        # it is stale, and counted among the newest it would push this save out.
        done = [s for s in self.steps() if s <= step]
        for stale in (s for s in self.steps() if s > step):
            shutil.rmtree(self.root / tag_of(stale), ignore_errors=True)
        keep = self.cfg.run.keep_checkpoints
        for old in done[:-keep] if keep else []:
            shutil.rmtree(self.root / tag_of(old), ignore_errors=True)

    def _last_step(self) -> int:
        return self.cfg.run.iterations if self.cfg.stage == "rl" else self.cfg.learner.steps
