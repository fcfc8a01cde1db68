"""Difficulty tiers: pass-rate boundaries, names, offline difficulty, and the tier weight table.

Tier ``0`` is the hardest (lowest pass rate); the last real tier is the easiest. One extra tier,
``unseen``, holds items with neither offline difficulty nor any attempt yet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rlcs.config import CurriculumConfig

DEFAULT_NAMES_5 = ("very_hard", "hard", "medium", "easy", "very_easy")
UNSEEN = "unseen"


class TierScheme:
    """Maps pass rates to tier indices and tier names to representative pass rates."""

    def __init__(self, boundaries: Sequence[float], names: Sequence[str] | None = None):
        self.boundaries = np.asarray(boundaries, dtype=np.float64)
        n = len(self.boundaries) + 1
        if names is None:
            names = DEFAULT_NAMES_5 if n == 5 else tuple(f"tier{i}" for i in range(n))
        self.names: tuple[str, ...] = (*names, UNSEEN)
        self.unseen = n
        # A rate equal to a boundary belongs to the tier above it. Pass rates are stored as
        # float16, which keeps 0.9 as 0.89990 and 0.1 as 0.09998 (9 or 1 of 10): the cut is the
        # boundary's float16 value where that is lower, less a margin for merging in float64.
        # The next float16 value down (0.09991 for 0.0999) keeps its lower tier.
        as_stored = self.boundaries.astype(np.float16).astype(np.float64)
        self._cuts = np.minimum(self.boundaries, as_stored) - 1e-9
        edges = np.concatenate([[0.0], self.boundaries, [1.0]])
        #: the pass rate an offline tier label stands for: the middle of its interval
        self.midpoints = (edges[:-1] + edges[1:]) / 2

    @classmethod
    def from_config(cls, config: CurriculumConfig) -> TierScheme:
        return cls(config.tier_boundaries, config.tier_names)

    @property
    def num_tiers(self) -> int:
        """Tiers including ``unseen``."""
        return len(self.names)

    def tier_of(self, pass_rate: np.ndarray, seen: np.ndarray | None = None) -> np.ndarray:
        """Tier index of each pass rate (``unseen`` where ``seen`` is False or the rate is NaN)."""
        p = np.asarray(pass_rate, dtype=np.float64)
        tiers = np.searchsorted(self._cuts, p, side="right").astype(np.uint8)
        missing = np.isnan(p)
        if seen is not None:
            missing |= ~np.asarray(seen, dtype=bool)
        tiers[missing] = self.unseen
        return tiers

    def offline_pass_rate(self, difficulty: float | str | None) -> float:
        """An item's offline difficulty (a pass rate or a tier name) as a pass rate; NaN if none."""
        if difficulty is None:
            return math.nan
        if isinstance(difficulty, str):
            try:
                return float(self.midpoints[self.names.index(difficulty)])
            except (ValueError, IndexError):
                known = ", ".join(self.names[:-1])
                raise ValueError(
                    f"unknown difficulty tier {difficulty!r} (known: {known})"
                ) from None
        value = float(difficulty)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"difficulty must be a pass rate in [0, 1], got {value}")
        return value


def tier_weights(
    mean_pass_rate: np.ndarray,
    population: np.ndarray,
    config: CurriculumConfig,
    unseen: int,
) -> np.ndarray:
    """Per-item sampling weight of each (domain, tier): the middle boosted, the ends floored.

    ``mean_pass_rate`` and ``population`` are ``[domains, tiers]``. The weight is
    ``max((4 p (1 - p)) ** power, floor)``, so a tier at p = 0.5 weighs 1 and none weighs 0;
    ``unseen`` weighs ``config.unseen_weight``. The ``uniform`` and ``dapo_filter`` policies
    weigh every item 1. Empty pools weigh 0.
    """
    if config.policy != "rlcs":
        w = np.ones_like(mean_pass_rate, dtype=np.float64)
    else:
        p = np.clip(np.nan_to_num(mean_pass_rate, nan=0.5), 0.0, 1.0)
        w = np.maximum((4.0 * p * (1.0 - p)) ** config.weight_power, config.weight_floor)
        w[:, unseen] = config.unseen_weight
    w[population == 0] = 0.0
    return w
