"""What a resumed `rlcs demo` keeps: each stage marks its directory with the settings it ran
with when it finishes, and ``--resume`` keeps the stages whose settings are the same, up to
the first that is not."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcs.config import Config
    from rlcs.config_roles import RolloutConfig
    from rlcs.data import Item

#: Written into a stage's directory when the stage has finished: its settings and wall time.
STAGE_DONE = "demo-stage.json"
STAGES = ("data", "pretrain", "sft", "rl")
#: The held-out evaluation of SFT's checkpoint, kept with SFT on ``--resume`` when it is
#: asked the same (``eval_settings``), in a directory of its own
STAGE_DIRS = {"eval after SFT": "eval-sft"}
#: Rollout settings a greedy evaluation does not read
SAMPLING_ONLY = ("n", "temperature", "top_p", "num_workers", "sleep_between_iterations")
#: Parts of the config that pretraining and SFT never read: only the RL stage starts rollout
#: engines, reward actors and the sampler, and runs GRPO. An edit to them leaves the demo's
#: earlier stages kept on ``--resume``.
RL_ONLY = ("rollout", "reward", "curriculum", "learner.grpo", "data.domain_weights",
           "run.iterations", "run.prompts_per_iteration", "run.topup_rounds",
           "run.samples_per_iteration", "run.eval_every", "run.eval_before_train",
           "run.eval_samples")  # fmt: skip


def stage_settings(cfg: Config) -> dict:
    """What a demo stage's result depends on: its whole resolved config, less the parts that
    only RL reads when the stage is pretraining or SFT. The time limit is left out: it is what
    the demo's budget left when the stage started, and a stage that finished under it is done;
    so is ``data.image_check``, which checks the data without changing it."""
    out = cfg.model_dump(mode="json")
    del out["run"]["max_wall_s"]
    del out["data"]["image_check"]  # how the data is checked at load, not what is trained
    if cfg.stage != "rl":
        for path in RL_ONLY:
            *parents, key = path.split(".")
            section = out
            for name in parents:
                section = section[name]
            del section[key]
    return out


def eval_settings(
    rollout: RolloutConfig,
    heldout: list[Item],
    cpus: float,
    reward: Mapping[str, Any] | None = None,
    dtype: str = "float32",
) -> dict:
    """What the greedy held-out evaluation's figures depend on, beside the model: the rollout
    settings less the sampling ones, the verifier options and the weights' dtype it scores and
    runs with, the items, and the CPU threads it runs on."""
    out = rollout.model_dump(mode="json", exclude=set(SAMPLING_ONLY))
    return {"rollout": out, "reward": dict(reward or {}), "dtype": dtype,
            "heldout": [it.id for it in heldout], "cpus": cpus}  # fmt: skip


class LedgerError(ValueError):
    """A stage's completion record that ``--resume`` cannot read."""


class StageLedger:
    """Which stages of a resumed demo are kept: those that finished with the same settings, up
    to the first that did not. That stage and every later one run again, from an empty
    directory, so nothing of an interrupted attempt mixes into the new one. An evaluation
    feeds no later stage: it is kept or runs again without deciding for the ones after it."""

    def __init__(self, root: Path, resume: bool):
        self.root = root
        self.keeping = resume
        self.kept: dict[str, float] = {}  # stage -> its wall time when it ran
        self.results: dict[str, Any] = {}  # kept stage -> what it returned (an evaluation's)

    def _marker(self, name: str) -> Path:
        return self.root / STAGE_DIRS.get(name, name) / STAGE_DONE

    def keep(
        self, name: str, settings: dict, feeds_later: bool = True, outputs: Sequence[str] = ()
    ) -> bool:
        """Whether stage ``name`` is kept; if not, its directory is removed. An evaluation
        (``feeds_later=False``) is kept only with the figures it recorded; a stage with
        ``outputs`` (paths in its directory), only while they all exist (a model removed since
        is made again)."""
        marker = self._marker(name)
        if self.keeping and marker.is_file():
            done = self._read(name, marker)
            whole = all((marker.parent / out).exists() for out in outputs)
            if done.get("settings") == settings and whole and (feeds_later or "result" in done):
                self.kept[name] = done["wall_s"]
                if "result" in done:
                    self.results[name] = done["result"]
                return True
        if feeds_later:
            self.keeping = False
        if marker.parent.exists():
            shutil.rmtree(marker.parent)
        return False

    @staticmethod
    def _read(name: str, marker: Path) -> dict:
        """A finished stage's record, or a LedgerError that says which file and what to do: a
        record that cannot be read is not taken for a finished stage, nor quietly run again."""
        try:
            done = json.loads(marker.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            why = getattr(e, "strerror", None) or str(e)
        else:
            if isinstance(done, dict) and isinstance(done.get("wall_s"), (int, float)):
                return done
            why = "not a stage record: no wall_s"
        raise LedgerError(
            f"--resume: {marker} cannot be read ({why}); remove that file and the {name} stage "
            "runs again, with every stage after it"
        )

    def finished(self, name: str, settings: dict, wall_s: float, result: Any = None) -> None:
        marker = self._marker(name)
        marker.parent.mkdir(parents=True, exist_ok=True)
        done = {"settings": settings, "wall_s": wall_s}
        if result is not None:
            done["result"] = result
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps(done, indent=1))
        tmp.replace(marker)
