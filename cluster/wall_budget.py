"""``run.max_wall_s``: a training run's time limit.

A run given a limit stops before the RL iteration or learner step that would end past it, and
ends there as if it had run all of them: its last iteration evaluated (with ``run.eval_every``)
and checkpointed, its model exported, its report written. ``--resume`` goes on from that
checkpoint, with the limit counted afresh. The limit counts from the start of the run, its
actors' start-up included; the export and the report after the last step are not budgeted.
"""

from __future__ import annotations

import sys
import time
from collections import deque

from tqdm import tqdm


class WallBudget:
    """Whether one more iteration (or learner step) fits in what is left of ``limit_s``,
    judged by the slowest of the last few. ``None`` never runs out."""

    def __init__(self, limit_s: float | None, window: int = 3):
        self.limit_s = limit_s
        self.t0 = time.perf_counter()
        self.recent: deque[float] = deque(maxlen=window)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def took(self, seconds: float) -> None:
        """Record how long an iteration or step took."""
        self.recent.append(seconds)

    def another_fits(self, then_s: float = 0.0) -> bool:
        """Whether one more iteration or step, and ``then_s`` seconds after it, end within the
        limit (always, before the first is timed)."""
        if self.limit_s is None or not self.recent:
            return True
        return self.elapsed() + max(self.recent) + then_s <= self.limit_s

    def next_s(self) -> float:
        """How long the next iteration or step is expected to take (0 before the first)."""
        return max(self.recent, default=0.0)

    def stopped(self, done: int, total: int, unit: str) -> None:
        tqdm.write(
            f"run.max_wall_s={self.limit_s:g}: stopped after {unit} {done} of {total}, "
            f"{self.elapsed():.0f}s into the run (one more would have ended past the limit); "
            "the run ends here as if done, and --resume goes on from it",
            file=sys.stderr,
        )
