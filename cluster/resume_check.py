"""What ``--resume`` may change of a run's settings.

A resumed run takes its settings from the config given now, and most of them may differ from
the run's saved ``config.yaml`` (more iterations, another evaluation schedule, another
learning rate): those are listed, so none changes unnoticed. Two kinds may not:

- the **stage**: an SFT run resumed as RL would find no RL checkpoint, start at step 0, and
  replace the SFT run's metrics, checkpoints and exported model with its own;
- the **tiny model** the run built into ``RUN_DIR/model``: the run goes on with the model it
  built, so other ``model.tiny`` settings would be recorded in ``config.yaml`` and not applied.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from rlcs.config import Config

log = logging.getLogger(__name__)

#: Keys (and key prefixes) a resumed run must keep.
FIXED = ("stage", "model.tiny", "model.tiny_overrides")


class ResumeConflict(ValueError):
    """--resume was asked to change what a run cannot change."""


def flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}``; lists and scalars are leaves, an empty section
    has none (so ``{}`` against ``{"math": 1}`` differs in ``math`` alone)."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def changes(saved: dict, now: dict) -> dict[str, tuple[Any, Any]]:
    """Every key whose value differs, with (saved, now); a key one side lacks is None there."""
    a, b = flat(saved), flat(now)
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def _builds_tiny(model: dict) -> bool:
    return not model.get("path") and model.get("tiny") is not None


def _fixed(key: str) -> bool:
    return any(key == f or key.startswith(f + ".") for f in FIXED)


def check_resume_settings(cfg: Config, run_dir: Path) -> dict[str, tuple[Any, Any]]:
    """Compare the config with the run's saved ``config.yaml``: a ResumeConflict naming each
    setting of :data:`FIXED` that differs, else log (and return) the settings that do."""
    try:
        saved = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ResumeConflict(f"--resume: cannot read {run_dir / 'config.yaml'}: {e}") from None
    now = cfg.model_dump(mode="json")
    diff = changes(saved, now)
    if not (_builds_tiny(saved.get("model") or {}) and _builds_tiny(now["model"])):
        # the model is (or was) read from model.path: the tiny settings are not used
        diff = {k: v for k, v in diff.items() if not k.startswith("model.tiny")}
    if bad := [k for k in diff if _fixed(k)]:
        shown = "; ".join(f"{k}: {diff[k][0]!r} -> {diff[k][1]!r}" for k in bad)
        raise ResumeConflict(
            f"--resume: {run_dir} holds a run of stage {saved.get('stage')!r}, and a resumed run "
            f"cannot change {', '.join(bad)} ({shown}); resume it with its own settings, or "
            "start a new run (--set run.name=<new name>)"
        )
    if diff:
        log.warning(
            "--resume: these settings differ from the run's saved config.yaml and apply from "
            "here on: %s", "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items()),
        )  # fmt: skip
    return diff
