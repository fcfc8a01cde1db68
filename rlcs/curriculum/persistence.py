"""Save and restore a whole ``Curriculum`` through crash-safe snapshots.

The saved state is everything the next batch depends on: the per-item arrays, the pools in
slot order, the pool sums, the RNG state and the expansion EMA. A restored sampler therefore
draws the very batch the saved one would have drawn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlcs.config import CurriculumConfig
from rlcs.curriculum import subcategories
from rlcs.curriculum.core import Curriculum
from rlcs.curriculum.snapshot import (
    corrupt,
    latest_snapshot,
    read_meta,
    read_snapshot_at,
    write_snapshot,
)
from rlcs.curriculum.tiers import TierScheme

CURRICULUM_DIR = "curriculum"
_ITEM_ARRAYS = ("domain", "offline", "attempts", "successes", "ema", "last_seen")
_ACC_ARRAYS = ("sampled", "taken", "groups", "rollouts", "successes")
_ACC_ARRAYS += ("category_rollouts", "category_successes")
#: what every snapshot holds, whatever version wrote it (besides meta.json)
_REQUIRED = (*_ITEM_ARRAYS, "tier", "pool_flat", "pool_sizes", "sum_p", "observed")
_REQUIRED += ("histogram", "domain_share", "reported")
_META_KEYS = ("iteration", "num_items", "config", "domain_names", "expansion_ratio")
_META_KEYS += ("expansion_ema", "rejected", "rejected_at_start", "active", "valid", "solved")
_META_KEYS += ("rng",)


def save_curriculum(cur: Curriculum, run_dir: str | Path) -> Path:
    """Write ``cur`` to ``RUN_DIR/curriculum/`` (a new snapshot, then ``LATEST`` moves)."""
    arrays = {name: getattr(cur, name) for name in _ITEM_ARRAYS}
    arrays.update(
        tier=cur.tier,
        pool_flat=cur.pools.flat(),
        pool_sizes=cur.pools.sizes,
        sum_p=cur._sum_p,
        observed=cur.observed,
        histogram=cur.histogram,
        domain_share=cur.domain_share,
        reported=np.flatnonzero(cur._reported),
        category_rate=cur.category_rate,
        category_domain=cur.category_domain,
    )
    if cur.category is not cur.domain:
        arrays["category"] = cur.category
    for key in _ACC_ARRAYS:
        arrays[f"acc_{key}"] = cur._acc[key]
    if cur.ids is not None:
        arrays["ids"] = cur.ids
    meta = {
        "version": 1,
        "iteration": cur.iteration,
        "num_items": cur.num_items,
        "config": cur.config.model_dump(mode="json"),
        "domain_names": cur.domain_names,
        "category_names": cur.category_names,
        "tier_names": list(cur.scheme.names),
        "expansion_ratio": cur.expansion_ratio,
        "expansion_ema": cur.expansion_ema,
        "rejected": cur.rejected,
        "rejected_at_start": cur._rejected_at_start,
        "active": cur._active,
        "valid": cur._acc["valid"],
        "solved": cur._acc["solved"],
        "rng": json.dumps(cur.rng.bit_generator.state),
    }
    folder = Path(run_dir) / CURRICULUM_DIR
    return write_snapshot(folder, arrays, meta, keep=cur.config.keep_snapshots)


def saved_config(run_dir: str | Path) -> CurriculumConfig:
    """The curriculum settings of the latest saved state in ``RUN_DIR/curriculum/``."""
    return CurriculumConfig.model_validate(read_meta(Path(run_dir) / CURRICULUM_DIR)["config"])


def config_changes(saved: CurriculumConfig, requested: CurriculumConfig) -> list[str]:
    """``key: saved -> requested`` for every curriculum setting that differs."""
    a, b = saved.model_dump(mode="json"), requested.model_dump(mode="json")
    return [f"{k}: {a[k]!r} -> {b[k]!r}" for k in sorted(a) if a[k] != b.get(k)]


def read_whole_snapshot(
    folder: str | Path, mmap: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The latest snapshot in ``folder`` (``RUN_DIR/curriculum/``): its arrays (memory-mapped,
    read-only, if ``mmap``) and meta, once it is known to be whole: a missing array or meta key,
    or an array of the wrong length, raises ``CorruptSnapshotError`` as a damaged file does."""
    snap = latest_snapshot(folder)
    arrays, meta = read_snapshot_at(snap, mmap)
    _check(snap, arrays, meta)
    return arrays, meta


def load_curriculum(run_dir: str | Path, attach: bool = True) -> Curriculum:
    """Rebuild the sampler from the latest complete snapshot in ``RUN_DIR/curriculum/``."""
    arrays, meta = read_whole_snapshot(Path(run_dir) / CURRICULUM_DIR)
    cur = Curriculum.__new__(Curriculum)
    cur.config = CurriculumConfig.model_validate(meta["config"])
    cur.scheme = TierScheme.from_config(cur.config)
    for name in _ITEM_ARRAYS:
        setattr(cur, name, np.array(arrays[name]))
    cur.domain_names = list(meta["domain_names"])
    if "category_rate" in arrays:
        cur.category = np.array(arrays["category"]) if "category" in arrays else cur.domain
        cur.category_names = list(meta["category_names"])
        cur.category_domain = np.array(arrays["category_domain"], np.int64)
        cur.category_rate = np.array(arrays["category_rate"], np.float64)
        subcategories.count_leaning(cur)
    else:  # saved before subcategories: one per domain, no rates yet
        subcategories.assign(cur, None, None)
    cur.ids = np.array(arrays["ids"]) if "ids" in arrays else None
    cur._index = None
    cur.iteration = int(meta["iteration"])
    cur.expansion_ratio = float(meta["expansion_ratio"])
    cur.expansion_ema = float(meta["expansion_ema"])
    cur.rejected = dict(meta["rejected"])
    cur.rng = np.random.default_rng()
    cur.rng.bit_generator.state = json.loads(meta["rng"])
    cur.domain_share = np.array(arrays["domain_share"], np.float64)
    cur.store = None
    cur.observed = np.array(arrays["observed"], np.float64)
    cur._rebuild(arrays)
    cur._reset_iteration()
    cur._reported[arrays["reported"]] = True
    cur._reported_idx = [np.array(arrays["reported"])]
    for key in _ACC_ARRAYS:
        if f"acc_{key}" in arrays:
            cur._acc[key] = np.array(arrays[f"acc_{key}"], np.int64)
    cur._acc["valid"] = int(meta["valid"])
    cur._acc["solved"] = int(meta["solved"])
    cur._active = bool(meta["active"])
    cur._rejected_at_start = int(meta["rejected_at_start"])
    if attach:
        cur.attach(run_dir)
    return cur


def _check(snap: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Refuse a snapshot that is not whole before anything is built from it."""
    missing = [k for k in _META_KEYS if k not in meta]
    missing += [f"{k}.npy" for k in _REQUIRED if k not in arrays]
    if missing:
        raise corrupt(snap, f"missing {', '.join(missing)}")
    n = int(meta["num_items"])
    per_item = (*_ITEM_ARRAYS, "tier", "pool_flat", "category", "ids")
    wrong = [f"{k}.npy" for k in per_item if k in arrays and len(arrays[k]) != n]
    sizes = arrays["pool_sizes"]
    if int(sizes.sum()) != n or sizes.min(initial=0) < 0:
        wrong.append("pool_sizes.npy")
    if wrong:
        raise corrupt(snap, f"{', '.join(wrong)} do not match its {n} items")
