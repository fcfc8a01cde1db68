"""The dashboard's view of a run's ``metrics.jsonl``: held-out evaluations and the training
figures of each RL iteration, read incrementally while the run appends to the file."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

#: the held-out figures a run logs (``run.eval_every``, ``run.eval_samples``) as
#: ``eval/<kind>/<domain>`` in its ``metrics.jsonl``
HELDOUT_KINDS = ("pass_rate", "sampled_pass_rate", "pass_at_k")

#: What a group went through in an iteration (counts of groups, one group per prompt): drawn
#: and rolled out over all generation rounds, then trained on or rejected by a group filter.
GROUP_COUNTS = {
    "rolled out": "curriculum/groups",
    "trained": "curriculum/selected",
    "filtered out": "curriculum/filtered",
}
#: Rollouts of an iteration that were not an ordinary scored answer (counts of rollouts).
ROLLOUT_COUNTS = {
    "could not be scored": "errors/reward",
    "left out of training": "errors/dropped_rollouts",
    "format error": "errors/format",
    "degenerate thinking": "errors/degenerate",
}
_KEPT = ("eval/", "reward/", "errors/", "curriculum/generation_rounds",
         *GROUP_COUNTS.values())  # fmt: skip


class MetricsLog:
    """The figures of ``metrics.jsonl`` the dashboard plots, by step. Each call parses only the
    complete lines appended since the last one, and starts over when the file is replaced or
    shortened (a resumed run rewrites it). Safe to call from the server's worker threads."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._reset(None)

    def _reset(self, inode: int | None) -> None:
        self._inode, self._offset = inode, 0
        self._points: dict[int, dict[str, float]] = {}

    def points(self) -> dict[int, dict[str, float]]:
        """Every step's kept figures so far (a copy)."""
        with self._lock:
            self._update()
            return {step: dict(figures) for step, figures in self._points.items()}

    def last_step(self) -> int | None:
        """The last step with a kept figure, or None."""
        with self._lock:
            self._update()
            return max(self._points, default=None)

    def _update(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._reset(None)
            return
        if st.st_ino != self._inode or st.st_size < self._offset:
            self._reset(st.st_ino)
        if st.st_size > self._offset:
            self._consume()

    def _consume(self) -> None:
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next call
        self._offset += end
        for line in data[:end].splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a torn line from a kill mid-write
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                continue
            figures = {k: v for k, v in rec.items() if k.startswith(_KEPT)
                       and isinstance(v, (int, float)) and not isinstance(v, bool)}  # fmt: skip
            if figures:
                self._points.setdefault(rec["step"], {}).update(figures)

    def heldout(self) -> dict[str, Any]:
        """``steps`` with an evaluation, and per kind (pass_rate, sampled_pass_rate, pass_at_k)
        each domain's value at those steps (None where that kind was not logged)."""
        points = {s: p for s, p in self.points().items() if any(k.startswith("eval/") for k in p)}
        steps = sorted(points)
        out: dict[str, Any] = {"steps": steps}
        for kind in HELDOUT_KINDS:
            out[kind] = _by_suffix(points, steps, f"eval/{kind}/")
        return out

    def training(self) -> dict[str, Any]:
        """The RL iterations' own figures, at the ``steps`` that logged a reward: the sampled
        reward of each domain and their mean (``reward``: domain -> values, ``mean`` included),
        ``groups`` and ``rollouts`` (label -> counts, see GROUP_COUNTS and ROLLOUT_COUNTS; a
        label whose metric the run does not log is left out) and ``generation_rounds``."""
        points = {s: p for s, p in self.points().items() if "reward/mean" in p}
        steps = sorted(points)

        def named(keys: dict[str, str]) -> dict[str, list[float | None]]:
            return {label: [points[s].get(key) for s in steps] for label, key in keys.items()
                    if any(key in points[s] for s in steps)}  # fmt: skip

        rounds = "curriculum/generation_rounds"
        return {
            "steps": steps,
            "reward": _by_suffix(points, steps, "reward/"),
            "groups": named(GROUP_COUNTS),
            "rollouts": named(ROLLOUT_COUNTS),
            "generation_rounds": [points[s].get(rounds) for s in steps],
        }


def _by_suffix(points: dict[int, dict[str, float]], steps: list[int], prefix: str):
    """``{name: [value at each step or None]}`` for every key ``prefix + name``."""
    names = sorted({k[len(prefix) :] for p in points.values() for k in p if k.startswith(prefix)})
    return {name: [points[s].get(prefix + name) for s in steps] for name in names}
