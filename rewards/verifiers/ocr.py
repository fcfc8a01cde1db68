"""OCR: ``1 - edit_distance / max(len)`` with all whitespace removed; two empty strings score 1."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import Levenshtein

from rewards.base import Verdict, Verifier


def _squash(text: str) -> str:
    return "".join(text.split())


class OCRVerifier(Verifier):
    name = "ocr"

    def bounded(self, extracted: str, answer: Any) -> bool:
        return len(extracted) * len(str(answer)) <= 4_000_000

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        a, g = _squash(extracted), _squash(str(answer))
        longest = max(len(a), len(g))
        if longest == 0:
            return Verdict(1.0)
        return Verdict(1.0 - Levenshtein.distance(a, g) / longest)
