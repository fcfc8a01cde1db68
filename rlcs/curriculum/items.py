"""Build a ``Curriculum`` from dataset ``Item``s (the actor's path; the core takes arrays)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlcs.config import CurriculumConfig
from rlcs.curriculum.core import Curriculum
from rlcs.curriculum.tiers import TierScheme
from rlcs.data import Item


def curriculum_from_items(
    items: Sequence[Item],
    config: CurriculumConfig | None = None,
    domain_weights: dict[str, float] | None = None,
) -> Curriculum:
    """Domains become codes in first-seen order; ``difficulty`` becomes the offline pass rate."""
    config = config or CurriculumConfig()
    scheme = TierScheme.from_config(config)
    names: dict[str, int] = {}
    for d in domain_weights or {}:
        names.setdefault(d, len(names))
    codes = [names.setdefault(it.domain, len(names)) for it in items]
    if len(names) > 256:
        raise ValueError(f"at most 256 domains, got {len(names)}")
    codes = np.array(codes, np.uint8)
    offline = np.array([scheme.offline_pass_rate(it.difficulty) for it in items], np.float32)
    return Curriculum(
        codes,
        config,
        domain_names=list(names),
        offline=offline,
        ids=[it.id for it in items],
        domain_weights=domain_weights,
    )
