"""``CurriculumSampler``: the RLCS curriculum as a Ray actor, the one home of sampling state.

The driver asks it for prompts (``next_batch``), hands back every scored group (``report``) and
trains on the groups it selects. Bad reports (an unknown item id, or a second report for the
same item in one iteration) are refused with a clear error and counted in ``stats()``; the
state is left exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray

from rlcs.config import CurriculumConfig
from rlcs.curriculum import Curriculum, ReportError, curriculum_from_items, load_curriculum
from rlcs.data import Item, load_items

Outcomes = Mapping[str, Sequence[float]] | Sequence[Mapping[str, Any]] | Sequence[tuple]


class LocalCurriculumSampler:
    """The actor's logic, usable in-process (``CurriculumSampler`` is this class under Ray)."""

    def __init__(
        self,
        run_dir: str | Path,
        items: Sequence[Item] | None = None,
        data_paths: Sequence[str] | None = None,
        config: CurriculumConfig | Mapping[str, Any] | None = None,
        domain_weights: Mapping[str, float] | None = None,
        resume: bool = False,
    ):
        """Start fresh from ``items`` (or the files in ``data_paths``), or ``resume`` a saved run."""
        self.run_dir = Path(run_dir)
        if resume:
            self.cur = load_curriculum(self.run_dir)
        else:
            if items is None:
                if not data_paths:
                    raise ValueError("CurriculumSampler needs items, data_paths or resume=True")
                items = load_items(list(data_paths), check_images=False)
            if not isinstance(config, CurriculumConfig):
                config = CurriculumConfig.model_validate(dict(config or {}))
            self.cur = curriculum_from_items(items, config, dict(domain_weights or {}))
            self.cur.attach(self.run_dir)
        self._batch = 0

    def next_batch(self, n: int) -> list[str]:
        """Item ids to roll out for a training batch of ``n`` groups (more under rlcs)."""
        if n < 1:
            raise ValueError(f"next_batch needs n >= 1, got {n}")
        self._batch = n
        return self.cur.id_of(self.cur.next_batch(n))

    def extra(self, n: int) -> list[str]:
        """More ids for this iteration, none drawn before in it (the dapo_filter top-up)."""
        return self.cur.id_of(self.cur.extra(n))

    def report(
        self, outcomes: Outcomes, untrainable: Sequence[str] = (), batch: int | None = None
    ) -> dict[str, Any]:
        """Record groups of rewards; returns the ids to train on and the valid-group count.

        ``outcomes``: ``{item_id: rewards}``, or ``[{"item_id": ..., "rewards": [...]}]``, or
        ``[(item_id, rewards)]``. ``untrainable``: ids whose groups count as evidence but may
        not be selected (a group filter rejected them). ``batch``: how many groups to select
        at most (a top-up's missing ones); by default the ``next_batch`` size.
        """
        ids, rewards = _split_outcomes(outcomes)
        succ, sizes = self.cur.report(ids, rewards)
        barred = set(untrainable)
        eligible = np.array([i not in barred for i in ids], bool) if barred else None
        keep = self.cur.select(succ, sizes, batch or self._batch or len(ids), eligible)
        valid = int(((succ > 0) & (succ < sizes)).sum())
        return {
            "iteration": self.cur.iteration,
            "selected": [ids[i] for i in keep.tolist()],
            "groups": len(ids),
            "valid_groups": valid,
        }

    def end_iteration(self) -> dict[str, Any]:
        """Close the iteration now (``next_batch`` does it too): expansion EMA, aggregates."""
        return self.cur.end_iteration()

    def stats(self) -> dict[str, Any]:
        cur = self.cur
        pop = cur.population()
        return {
            "iteration": cur.iteration,
            "policy": cur.config.policy,
            "num_items": cur.num_items,
            "tiers": dict(zip(cur.scheme.names, pop.sum(axis=0).tolist(), strict=True)),
            "domains": {
                d: dict(zip(cur.scheme.names, pop[i].tolist(), strict=True))
                for i, d in enumerate(cur.domain_names)
            },
            "weights": {
                d: dict(zip(cur.scheme.names, np.round(cur.weights()[i], 4).tolist(), strict=True))
                for i, d in enumerate(cur.domain_names)
            },
            "expansion_ratio": cur.expansion_ratio,
            "expansion_ema": cur.expansion_ema,
            "rejected": dict(cur.rejected),
            "rejected_total": sum(cur.rejected.values()),
        }

    def save(self) -> str:
        """Persist the state crash-safe under ``RUN_DIR/curriculum/``; returns the snapshot."""
        return str(self.cur.save(self.run_dir))

    def restore(self) -> int:
        """Reload the last saved state (dropping anything since); returns its iteration."""
        if self.cur.store is not None:
            self.cur.store.close()
        self.cur = Curriculum.restore(self.run_dir)
        return self.cur.iteration


def _split_outcomes(outcomes: Outcomes) -> tuple[list[Any], list[Sequence[float]]]:
    if isinstance(outcomes, Mapping):
        return list(outcomes.keys()), list(outcomes.values())
    ids, rewards = [], []
    for o in outcomes:
        if isinstance(o, Mapping):
            ids.append(o["item_id"])
            rewards.append(o["rewards"])
        else:
            ids.append(o[0])
            rewards.append(o[1])
    return ids, rewards


CurriculumSampler = ray.remote(num_cpus=0)(LocalCurriculumSampler)

__all__ = ["CurriculumSampler", "LocalCurriculumSampler", "ReportError"]
