"""Per-iteration aggregates of a ``Curriculum``: the rows the dashboard reads from SQLite."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcs.curriculum.core import Curriculum


def iteration_row(cur: Curriculum, groups: int, valid_fraction: float | None) -> dict[str, Any]:
    """The iteration's scalars: what it drew, how many groups had signal, the expansion."""
    acc = cur._acc
    seen = cur.histogram.sum()
    mean = float((cur._sum_p[:, : cur.scheme.unseen].sum()) / seen) if seen else None
    row = {
        "iteration": cur.iteration,
        "time": time.time(),
        "policy": cur.config.policy,
        "sampled": int(acc["sampled"].sum()),
        "groups": groups,
        "valid_groups": int(acc["valid"]),
        "valid_fraction": valid_fraction,
        "pass_at_k": acc["solved"] / groups if groups else None,
        "expansion_ratio": cur.expansion_ratio,
        "expansion_ema": cur.expansion_ema,
        "mean_pass_rate": mean,
        "rejected": sum(cur.rejected.values()) - cur._rejected_at_start,
        "histogram": cur.histogram.tolist(),
    }
    return row


def tier_rows(cur: Curriculum) -> list[dict[str, Any]]:
    """One row per (domain, tier): population, draws, groups, observed pass rate, weight."""
    acc, pop, weights = cur._acc, cur.population(), cur.weights()
    tiers = []
    for d, dname in enumerate(cur.domain_names):
        for t, tname in enumerate(cur.scheme.names):
            rollouts = int(acc["rollouts"][d, t])
            tiers.append(
                {
                    "iteration": cur.iteration,
                    "domain": dname,
                    "tier": tname,
                    "population": int(pop[d, t]),
                    "sampled": int(acc["sampled"][d, t]),
                    "groups": int(acc["groups"][d, t]),
                    "rollouts": rollouts,
                    "successes": int(acc["successes"][d, t]),
                    "pass_rate": acc["successes"][d, t] / rollouts if rollouts else None,
                    "weight": float(weights[d, t]),
                }
            )
    return tiers
