"""Chart QA: numbers as in math, except year-like integers (1000-3000) must match exactly;
text answers by normalised exact match."""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from typing import Any

from rewards.base import Verdict, Verifier
from rewards.verifiers import math_parse as mp
from rewards.verifiers.math import DEFAULT_REL_TOL, MathVerifier
from rewards.verifiers.vqa import normalize_text

_CURRENCY = re.compile(r"^(?:\\?\$|€|£|¥)\s*")
_NUMERIC = re.compile(r"\d|\\(?:frac|sqrt|pi)")


def _year(text: str) -> int | None:
    """An integer written without a decimal point, in 1000..3000: read as a year."""
    t = text.replace(",", "") if not text.startswith("-") else text
    if len(t) == 4 and t.isdigit() and 1000 <= int(t) <= 3000:
        return int(t)
    return None


def _clean(text: str) -> str:
    return _CURRENCY.sub("", mp.normalize(text))


class ChartVerifier(Verifier):
    name = "chart"
    cacheable = True

    def __init__(self) -> None:
        self._math = MathVerifier()

    def cache_key(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Hashable:
        return (_clean(extracted), _clean(str(answer)))

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        pred, gt = _clean(extracted), _clean(str(answer))
        year_p, year_g = _year(pred), _year(gt)
        if year_p is not None or year_g is not None:
            return Verdict(float(year_p == year_g))
        if not _NUMERIC.search(gt):
            return Verdict(float(normalize_text(pred) == normalize_text(gt)))
        rel_tol = float(options.get("rel_tol", DEFAULT_REL_TOL))
        return self._math.compare(pred, gt, rel_tol)
