"""The RLCS curriculum: per-item evidence, tiers, tier-weighted sampling and expansion.

Per item it keeps compact arrays (about 30 bytes resident per item in all): domain, offline
pass rate, attempts, successes, the EMA pass rate, the last iteration it was sampled in, its
tier, and its slot in the (domain, tier) index pools. Items are indices ``0..N-1``; string ids
are an optional mapping supplied by the caller.

Items may also name a subcategory of their domain (a math item's operation, a GUI page's size).
With ``subcategory_prior``, an item with no evidence of its own (never drawn, no offline grade)
takes its subcategory's recent pass rate, and so its tier: the tier weights then move whole
subcategories from what their drawn items scored (the paper's re-weighting of per-domain
subcategories; ``subcategories.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlcs.config import CurriculumConfig
from rlcs.curriculum import expansion, subcategories
from rlcs.curriculum.aggregates import iteration_row, tier_rows
from rlcs.curriculum.evidence import group_successes, merged_pass_rate
from rlcs.curriculum.pools import TierPools
from rlcs.curriculum.quotas import split_quota, spread_over_tiers
from rlcs.curriculum.tiers import TierScheme, tier_weights

HIST_BINS = 20
#: The histogram's bins cut at their edges as the tiers do at their boundaries: a rate on an
#: edge, as stored in float16 (0.9 as 0.8999), counts in the bin above it, as in the tier above.
_HIST_EDGES = TierScheme(np.arange(1, HIST_BINS) / HIST_BINS)


class ReportError(ValueError):
    """A rejected report: unknown ids, duplicates, or items not sampled this iteration."""

    def __init__(self, message: str, bad: list[Any]):
        super().__init__(message)
        self.bad = bad

    def __reduce__(self):
        return (ReportError, (str(self), self.bad))  # survives pickling across Ray


class Curriculum:
    """Samples prompts by difficulty tier and learns each item's pass rate from its groups."""

    def __init__(
        self,
        domains: Sequence[int] | np.ndarray,
        config: CurriculumConfig | None = None,
        *,
        domain_names: Sequence[str] | None = None,
        offline: Sequence[float] | np.ndarray | None = None,
        ids: Sequence[str] | None = None,
        domain_weights: dict[str, float] | None = None,
        categories: Sequence[int] | np.ndarray | None = None,
        category_names: Sequence[str] | None = None,
    ):
        """``domains``: each item's domain code; ``offline``: its offline pass rate or NaN;
        ``categories``: its subcategory code (names in ``category_names``), each subcategory
        within one domain; without them each domain is one subcategory."""
        self.config = config or CurriculumConfig()
        self.scheme = TierScheme.from_config(self.config)
        self.domain = np.asarray(domains, dtype=np.uint8)
        n = len(self.domain)
        num_domains = int(self.domain.max()) + 1 if n else 1
        self.domain_names = list(domain_names or [f"domain{d}" for d in range(num_domains)])
        if len(self.domain_names) < num_domains:
            raise ValueError(f"{num_domains} domain codes but {len(self.domain_names)} names")
        self.offline = (
            np.full(n, np.nan, np.float16) if offline is None else np.asarray(offline, np.float16)
        )
        self.attempts = np.zeros(n, np.uint32)
        self.successes = np.zeros(n, np.uint32)
        self.ema = np.zeros(n, np.float16)
        self.last_seen = np.full(n, -1, np.int32)
        subcategories.assign(self, categories, category_names)
        # UTF-8 bytes in one fixed-width array: no per-item Python objects, memory-mappable
        self.ids = None if ids is None else np.array([str(i).encode() for i in ids], np.bytes_)
        self._index: dict[str, int] | None = None
        self.iteration = 0
        self.expansion_ratio = 1.0
        self.expansion_ema = 1.0
        self.rejected = {"unknown": 0, "duplicate": 0, "not_sampled": 0}
        self.rng = np.random.default_rng(self.config.seed)
        self.set_domain_weights(domain_weights)
        self.store = None
        self.observed = np.full(self._shape, np.nan)
        self._rebuild()
        self._reset_iteration()

    # -- derived state ---------------------------------------------------------------------
    @property
    def num_items(self) -> int:
        return len(self.domain)

    @property
    def _shape(self) -> tuple[int, int]:
        return len(self.domain_names), self.scheme.num_tiers

    def set_domain_weights(self, weights: dict[str, float] | None) -> None:
        """Fixed domain proportions by name; empty or None means by item count."""
        counts = np.bincount(self.domain, minlength=len(self.domain_names)).astype(np.float64)
        if not weights:
            self.domain_share = counts
        else:
            unknown = set(weights) - set(self.domain_names)
            if unknown:
                raise ValueError(f"domain_weights names unknown domains: {sorted(unknown)}")
            self.domain_share = np.array([weights.get(d, 0.0) for d in self.domain_names])
        self.domain_share = np.where(counts > 0, self.domain_share, 0.0)

    def pass_rate(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Each item's current pass rate: offline and online evidence merged (NaN: unseen).

        With ``subcategory_prior``, an item with neither kind of evidence takes its
        subcategory's recent pass rate.
        """
        sibling = self.category_rate[self.category[idx]] if self.config.subcategory_prior else None
        return merged_pass_rate(
            self.offline[idx],
            self.attempts[idx],
            self.ema[idx],
            self.config.offline_prior_weight,
            fallback=sibling,
        )

    def _keys(self, tiers: np.ndarray, domains: np.ndarray) -> np.ndarray:
        return domains.astype(np.int64) * self.scheme.num_tiers + tiers

    def _rebuild(self, saved: dict[str, np.ndarray] | None = None) -> None:
        """Derive tiers, pools, pool sums and the histogram from the per-item arrays.

        A restore passes the saved pools and sums, so that it continues bit for bit.
        """
        size = int(np.prod(self._shape))
        if saved is not None:
            self.tier = np.array(saved["tier"], np.uint8)
            n = self.num_items
            self.pools = TierPools.from_flat(saved["pool_flat"], saved["pool_sizes"], n)
            self._sum_p = np.array(saved["sum_p"], np.float64)
            # counted again from the rates: a snapshot from before the bins cut at their
            # edges as the tiers do may hold items one bin low
            self.histogram = self._count_histogram(self.pass_rate())
            return
        p = self.pass_rate()
        self.tier = self.scheme.tier_of(p)
        keys = self._keys(self.tier, self.domain)
        self.pools = TierPools(keys, size)
        seen = ~np.isnan(p)
        sums = np.bincount(keys[seen], p[seen], minlength=size).astype(np.float64)
        self._sum_p = sums.reshape(self._shape)
        self.histogram = self._count_histogram(p)

    def _count_histogram(self, p: np.ndarray) -> np.ndarray:
        """Items per pass-rate bin, over the items with a rate."""
        return np.bincount(self._bins(p[~np.isnan(p)]), minlength=HIST_BINS).astype(np.int64)

    @staticmethod
    def _bins(p: np.ndarray) -> np.ndarray:
        return _HIST_EDGES.tier_of(p).astype(np.int64)

    def nbytes(self) -> int:
        """Bytes held for the items: every per-item array plus the pools' capacity."""
        arrays = (self.domain, self.offline, self.attempts, self.successes, self.ema)
        arrays += (self.last_seen, self.tier, self._reported)
        if self.category is not self.domain:
            arrays += (self.category,)
        ids = 0 if self.ids is None else self.ids.nbytes
        return sum(a.nbytes for a in arrays) + self.pools.nbytes() + ids

    def population(self) -> np.ndarray:
        return self.pools.sizes.reshape(self._shape)

    def weights(self) -> np.ndarray:
        """The per-item weight table ``[domain, tier]`` the next batch is drawn with.

        A tier's pass rate is what its groups scored lately (``observed``), because items move
        on as soon as they are trained; before any group, it is its members' mean estimate.
        """
        pop = self.population()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self._sum_p / pop
        mean = np.where(np.isnan(self.observed), mean, self.observed)
        return tier_weights(mean, pop, self.config, self.scheme.unseen)

    # -- sampling --------------------------------------------------------------------------
    def next_batch(self, batch: int) -> np.ndarray:
        """Start an iteration: ``batch`` prompts, or ``ceil(batch * ratio_ema)`` under rlcs."""
        if self._active:
            self.end_iteration()
        self.iteration += 1
        self._active = True
        n = batch
        if self.config.policy == "rlcs":
            n = expansion.oversampled(batch, self.expansion_ema)
        return self._sample(n, exclude=False)

    def extra(self, n: int) -> np.ndarray:
        """More prompts for the current iteration, none already drawn in it (DAPO's top-up)."""
        if not self._active:
            raise RuntimeError("extra() needs an iteration started by next_batch()")
        return self._sample(n, exclude=True)

    def _sample(self, n: int, exclude: bool) -> np.ndarray:
        available = self.population() - self._acc["taken"]
        quotas = split_quota(n, self.domain_share, available.sum(axis=1), self.rng)
        weights = self.weights()
        counts = np.zeros_like(available)
        for d in np.flatnonzero(quotas).tolist():
            counts[d] = spread_over_tiers(
                int(quotas[d]), weights[d] * available[d], available[d], self.rng
            )
        keys = np.flatnonzero(counts.reshape(-1))
        wanted = counts.reshape(-1)[keys]
        if exclude:
            parts = [
                self.pools.sample(int(k), int(c), self.rng, self.last_seen, self.iteration)
                for k, c in zip(keys.tolist(), wanted.tolist(), strict=True)
            ]
            idx = np.concatenate(parts) if parts else np.empty(0, np.int64)
        else:
            idx = self.pools.sample_many(keys, wanted, self.rng)
        self._acc["sampled"] += counts
        self._acc["taken"] += counts
        idx = idx[self.rng.permutation(len(idx))]
        self.last_seen[idx] = self.iteration
        return idx

    # -- outcomes --------------------------------------------------------------------------
    def index_of(self, ids: Sequence[Any]) -> np.ndarray:
        """Item indices for string ids (or pass-through for integer indices); -1 if unknown."""
        if self.ids is None or (len(ids) and not isinstance(ids[0], str)):
            arr = np.asarray(ids)
            if arr.dtype.kind not in "iu":
                return np.full(len(arr), -1, np.int64)
            return np.where((arr >= 0) & (arr < self.num_items), arr, -1).astype(np.int64)
        if self._index is None:
            self._index = {s.decode(): i for i, s in enumerate(self.ids.tolist())}
        return np.array([self._index.get(str(i), -1) for i in ids], dtype=np.int64)

    def id_of(self, idx: np.ndarray) -> list[str]:
        if self.ids is None:
            return [str(i) for i in np.asarray(idx).tolist()]
        return [s.decode() for s in self.ids[np.asarray(idx)].tolist()]

    def report(
        self, ids: Sequence[Any], rewards: np.ndarray | Sequence[Sequence[float]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Record each item's group of rewards; returns (successes, group sizes) per group.

        All or nothing: an unknown id, an id given twice, or one already reported (or never
        sampled) this iteration rejects the whole call with a ``ReportError``, counts it, and
        leaves the state untouched.
        """
        ids = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
        idx = self.index_of(ids)
        succ, sizes = group_successes(rewards, self.config.success_threshold, len(idx))
        bad: dict[str, list] = {"unknown": [], "duplicate": [], "not_sampled": []}
        known = idx >= 0
        bad["unknown"] = [ids[i] for i in np.flatnonzero(~known)]
        good = idx[known]
        uniq, counts = np.unique(good, return_counts=True)
        twice = uniq[counts > 1]
        again = np.unique(good[self._reported[good]])
        bad["duplicate"] = self.id_of(np.union1d(twice, again))
        fresh = good[~self._reported[good]]
        if self._active:
            fresh = fresh[self.last_seen[fresh] != self.iteration]
        bad["not_sampled"] = self.id_of(np.unique(fresh))
        if any(bad.values()):
            for kind, items in bad.items():
                self.rejected[kind] += len(items)
            parts = [f"{k.replace('_', ' ')}: {v[:5]}" for k, v in bad.items() if v]
            raise ReportError(
                f"report rejected for iteration {self.iteration}, state unchanged ("
                + "; ".join(parts)
                + ")",
                [x for v in bad.values() for x in v],
            )
        self._apply(idx, succ, sizes)
        return succ, sizes

    def _apply(self, idx: np.ndarray, succ: np.ndarray, sizes: np.ndarray) -> None:
        p_old = self.pass_rate(idx)
        t_old = self.tier[idx]
        d = self.domain[idx]
        rate = succ / np.maximum(sizes, 1)
        first = self.attempts[idx] == 0
        # items with evidence of their own from now on
        own = first & (sizes > 0) & np.isnan(self.offline[idx])
        np.subtract.at(self.leaning, self.category[idx[own]], 1)
        alpha = self.config.pass_rate_ema
        ema = np.where(first, rate, (1 - alpha) * self.ema[idx] + alpha * rate)
        ema = np.where(sizes > 0, ema, self.ema[idx])  # an empty group is no evidence
        self.ema[idx] = ema.astype(np.float16)
        self.attempts[idx] += sizes.astype(np.uint32)
        self.successes[idx] += succ.astype(np.uint32)
        p_new = self.pass_rate(idx)
        t_new = self.scheme.tier_of(p_new)
        self.tier[idx] = t_new
        shape, size = self._shape, int(np.prod(self._shape))
        k_old, k_new = self._keys(t_old, d), self._keys(t_new, d)
        # an item still without evidence (reported with an empty group) has no rate to count
        seen_old, seen_new = ~np.isnan(p_old), ~np.isnan(p_new)
        self._sum_p -= np.bincount(k_old[seen_old], p_old[seen_old], size).reshape(shape)
        self._sum_p += np.bincount(k_new[seen_new], p_new[seen_new], size).reshape(shape)
        self.histogram -= np.bincount(self._bins(p_old[seen_old]), minlength=HIST_BINS)
        self.histogram += np.bincount(self._bins(p_new[seen_new]), minlength=HIST_BINS)
        moved = k_old != k_new
        if moved.any():
            self.pools.move(idx[moved], k_old[moved], k_new[moved])
            # reported items were drawn this iteration: keep the per-pool "taken" count right
            taken = self._acc["taken"].reshape(-1)
            np.add.at(taken, k_old[moved], -1)
            np.add.at(taken, k_new[moved], 1)
        self._reported[idx] = True
        self._reported_idx.append(idx)
        acc = self._acc
        np.add.at(acc["groups"], (d, t_old), 1)
        np.add.at(acc["rollouts"], (d, t_old), sizes)
        np.add.at(acc["successes"], (d, t_old), succ)
        np.add.at(acc["category_rollouts"], self.category[idx], sizes)
        np.add.at(acc["category_successes"], self.category[idx], succ)
        acc["valid"] += int(expansion.valid_groups(succ, sizes).sum())
        acc["solved"] += int((succ > 0).sum())

    def select(
        self,
        successes: np.ndarray,
        sizes: np.ndarray,
        batch: int,
        eligible: np.ndarray | None = None,
    ) -> np.ndarray:
        """Which scored groups to train on, by policy (indices into the reported groups).

        ``eligible``: a mask of the groups that may be chosen at all (a group filter's verdict);
        the policy selects among those alone.
        """
        succ, sizes = np.asarray(successes), np.asarray(sizes)
        among = np.arange(len(succ)) if eligible is None else np.flatnonzero(eligible)
        succ, sizes = succ[among], sizes[among]
        if self.config.policy == "rlcs":
            pick = expansion.select_balanced(succ, sizes, batch, self.config.expansion_surplus)
        elif self.config.policy == "dapo_filter":
            pick = np.flatnonzero(expansion.valid_groups(succ, sizes))[:batch]
        else:
            pick = np.arange(min(batch, len(succ)))
        return among[pick]

    # -- iteration bookkeeping -------------------------------------------------------------
    def _reset_iteration(self) -> None:
        shape = self._shape
        keys = ("sampled", "taken", "groups", "rollouts")
        self._acc = {k: np.zeros(shape, np.int64) for k in keys}
        self._acc["successes"] = np.zeros(shape, np.int64)
        for k in ("category_rollouts", "category_successes"):
            self._acc[k] = np.zeros(len(self.category_names), np.int64)
        self._acc["valid"] = 0
        self._acc["solved"] = 0
        if not hasattr(self, "_reported"):
            self._reported = np.zeros(self.num_items, bool)
        for idx in getattr(self, "_reported_idx", []):
            self._reported[idx] = False
        self._reported_idx: list[np.ndarray] = []
        self._active = False
        self._rejected_at_start = sum(self.rejected.values())

    def end_iteration(self) -> dict[str, Any]:
        """Close the iteration: update the expansion EMA and write its aggregates."""
        acc = self._acc
        groups = int(acc["groups"].sum())
        valid_fraction = acc["valid"] / groups if groups else None
        if groups:
            cfg = self.config
            self.expansion_ratio = expansion.expansion_ratio(1 - valid_fraction, cfg.expansion_cap)
            self.expansion_ema = expansion.update_ema(
                self.expansion_ema, self.expansion_ratio, cfg.expansion_ema, cfg.expansion_cap
            )
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = acc["successes"] / acc["rollouts"]
        a = self.config.tier_rate_ema
        blended = np.where(np.isnan(self.observed), rate, (1 - a) * self.observed + a * rate)
        self.observed = np.where(np.isnan(rate), self.observed, blended)
        if self.config.subcategory_prior:
            subcategories.follow_rates(self)
        row = iteration_row(self, groups, valid_fraction)
        drawn = subcategories.store_rows(self)  # none when items name no subcategories
        # the per-tier rows are only built when someone keeps them; a second close of the same
        # iteration (nothing drawn since) must not replace its rows with empty ones
        if self.store is not None and self._active:
            self.store.write_iteration(row, tier_rows(self), drawn)
        # this iteration's pass rate per tier (all domains), for the run's metrics
        rollouts, successes = acc["rollouts"].sum(axis=0), acc["successes"].sum(axis=0)
        row["tier_pass_rate"] = {
            name: float(successes[t] / rollouts[t])
            for t, name in enumerate(self.scheme.names)
            if rollouts[t]
        }
        if drawn:  # and per subcategory
            row["subcategory_pass_rate"] = {
                r["subcategory"]: r["successes"] / r["rollouts"] for r in drawn
            }
        self._reset_iteration()
        return row

    def save(self, run_dir: str | Path) -> Path:
        """Save the full state, crash-safe, to ``RUN_DIR/curriculum/``."""
        from rlcs.curriculum.persistence import save_curriculum

        return save_curriculum(self, run_dir)

    @classmethod
    def restore(cls, run_dir: str | Path, attach: bool = True) -> Curriculum:
        """The sampler as last saved: its next batch is the one the saved sampler would draw."""
        from rlcs.curriculum.persistence import load_curriculum

        return load_curriculum(run_dir, attach=attach)

    def attach(self, run_dir: str | Path) -> None:
        """Write per-iteration aggregates to ``RUN_DIR/curriculum/aggregates.sqlite``.

        Rows the store holds for iterations after this sampler's are dropped: they are those
        of an attempt that went further (a run resumed from an earlier snapshot, or started
        over before its first one), which this sampler replays; until it does, the dashboard
        must not show them as this run's.
        """
        from rlcs.curriculum.store import STORE_NAME, AggregateStore

        self.store = AggregateStore(Path(run_dir) / "curriculum" / STORE_NAME)
        self.store.drop_after(self.iteration)
        self.store.set_meta(
            domains=self.domain_names,
            tiers=list(self.scheme.names),
            policy=self.config.policy,
            num_items=self.num_items,
        )
