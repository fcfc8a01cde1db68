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
    """Domains become codes in first-seen order; ``difficulty`` becomes the offline pass rate;
    ``meta["subcategory"]`` names a subcategory of the item's domain (``domain/subcategory``;
    the domain alone when an item names none)."""
    config = config or CurriculumConfig()
    scheme = TierScheme.from_config(config)
    names: dict[str, int] = {}
    for d in domain_weights or {}:
        names.setdefault(d, len(names))
    codes = [names.setdefault(it.domain, len(names)) for it in items]
    if len(names) > 256:
        raise ValueError(f"at most 256 domains, got {len(names)}")
    codes = np.array(codes, np.uint8)
    categories: dict[str, int] = {}
    cat_codes = []
    for it in items:
        sub = it.meta.get("subcategory")
        cat_codes.append(
            categories.setdefault(f"{it.domain}/{sub}" if sub else it.domain, len(categories))
        )
    if len(categories) > 65536:
        raise ValueError(f"at most 65536 subcategories, got {len(categories)}")
    named = any(it.meta.get("subcategory") for it in items)
    offline = np.array([scheme.offline_pass_rate(it.difficulty) for it in items], np.float32)
    return Curriculum(
        codes,
        config,
        domain_names=list(names),
        offline=offline,
        ids=[it.id for it in items],
        domain_weights=domain_weights,
        # without any subcategory named, each domain is one (and costs no extra array)
        categories=np.array(cat_codes, np.uint16) if named else None,
        category_names=list(categories) if named else None,
    )
