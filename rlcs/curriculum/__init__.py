"""RLCS, the curriculum sampler: pure numpy, no Ray.

``Curriculum`` keeps per-item pass rates and difficulty tiers over up to 10M items, draws
tier-weighted batches in O(batch), sizes them with the ratio-EMA expansion, and persists
itself crash-safe in the run directory, where the dashboard reads it.
"""

from rlcs.curriculum.core import Curriculum, ReportError
from rlcs.curriculum.evidence import merged_pass_rate
from rlcs.curriculum.expansion import (
    expansion_ratio,
    oversampled,
    select_balanced,
    update_ema,
    valid_groups,
)
from rlcs.curriculum.items import curriculum_from_items
from rlcs.curriculum.persistence import CURRICULUM_DIR, load_curriculum, save_curriculum
from rlcs.curriculum.snapshot import CorruptSnapshotError, SnapshotError, read_snapshot
from rlcs.curriculum.store import STORE_NAME, read_store
from rlcs.curriculum.tiers import UNSEEN, TierScheme, tier_weights

__all__ = [
    "CURRICULUM_DIR",
    "CorruptSnapshotError",
    "STORE_NAME",
    "UNSEEN",
    "Curriculum",
    "ReportError",
    "SnapshotError",
    "TierScheme",
    "curriculum_from_items",
    "expansion_ratio",
    "load_curriculum",
    "merged_pass_rate",
    "oversampled",
    "read_snapshot",
    "read_store",
    "save_curriculum",
    "select_balanced",
    "tier_weights",
    "update_ema",
    "valid_groups",
]
