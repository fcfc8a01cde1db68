"""What a run writes as it goes: its resolved ``config.yaml``, ``metrics.jsonl``, TensorBoard
scalars and sample rollouts.

Every step appends one JSON object to ``RUN_DIR/metrics.jsonl`` and flushes it, so a killed run
loses at most the step in flight. On resume, records past the checkpoint's step are dropped
first, so no step is counted twice.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcs.config import Config


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _jsonable(v.item())
    return v


class RunLog:
    """Appends per-step metrics and samples under a run directory."""

    def __init__(
        self, run_dir: str | Path, resume_step: int | None = None, tensorboard: bool = True
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "samples").mkdir(exist_ok=True)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        if resume_step is not None:
            truncate_metrics(self.metrics_path, resume_step)
        elif self.metrics_path.exists():
            self.metrics_path.unlink()
        self._file = self.metrics_path.open("a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # TensorBoard hides the earlier events from purge_step on: the checkpoint's own
            # step was logged before it was saved, and is kept like its metrics.jsonl record
            self._tb = SummaryWriter(
                log_dir=str(self.run_dir / "tensorboard"),
                purge_step=None if resume_step is None else resume_step + 1,
            )

    def log(self, step: int, metrics: dict[str, Any], stage: str = "rl") -> dict[str, Any]:
        record = {"step": step, "stage": stage, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._tb is not None:
            for key, value in record.items():
                if (
                    isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and key != "step"
                ):
                    self._tb.add_scalar(f"{stage}/{key}", value, step)
            self._tb.flush()
        return record

    def samples(self, step: int, rows: list[dict[str, Any]]) -> Path:
        path = self.run_dir / "samples" / f"step_{step:06d}.jsonl"
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows))
        tmp.replace(path)
        return path

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All complete records of ``metrics.jsonl``; a torn last line (a kill mid-write) is skipped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def truncate_metrics(path: Path, last_step: int) -> None:
    """Keep only records with ``step <= last_step``, rewriting the file atomically."""
    if not path.exists():
        return
    keep = [r for r in read_metrics(path.parent) if r.get("step", 0) <= last_step]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
    tmp.replace(path)


def write_resolved(config: Config, run_dir: str | Path) -> Path:
    """Write the resolved config to ``RUN_DIR/config.yaml`` (atomically)."""
    out = Path(run_dir) / "config.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".yaml.tmp")
    tmp.write_text(config.to_yaml())
    tmp.replace(out)
    return out
