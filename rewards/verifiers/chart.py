"""Chart QA: numbers as in math, except year-like integers (1000-3000) must match exactly;
text answers by normalised exact match.

A ground truth that is a number or a formula (``12.5%``, ``\\frac{1}{4}``, ``$5``) is
compared as math. One with words in it (``Q1 2019``, ``COVID-19``, ``1.5 million``) is text:
word for word, where two words that are both numbers compare as numbers (the year rule
included). Math would read its letters as variables, and a product of variables does not
care about order: ``2019 Q1`` would equal ``Q1 2019``, and ``DIVOC-19`` ``COVID-19``.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from typing import Any

from rewards.base import Verdict, Verifier
from rewards.verifiers import math_text as mt
from rewards.verifiers.math import DEFAULT_REL_TOL, MathVerifier, truth_type_problem
from rewards.verifiers.vqa import normalize_pair, normalize_text

_CURRENCY = re.compile(r"^(?:\\?\$|€|£|¥)\s*")
_NUMERIC = re.compile(r"\d|\\(?:frac|sqrt|pi)")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_LETTER = re.compile(r"[A-Za-z]")
_DIGIT = re.compile(r"\d")


def _year(text: str) -> int | None:
    """An integer written without a decimal point, in 1000..3000: read as a year."""
    t = text.replace(",", "") if not text.startswith("-") else text
    if len(t) == 4 and t.isdigit() and 1000 <= int(t) <= 3000:
        return int(t)
    return None


def _number_word(pred: str) -> str:
    """``three`` as ``3``, as a text ground truth reads it: so that ``three`` matches the
    truth ``3`` just as ``3`` matches the truth ``three``."""
    words = normalize_text(pred)
    return words if words.isascii() and words.isdigit() and not _DIGIT.search(pred) else pred


def _clean(text: str) -> str:
    return _CURRENCY.sub("", mt.normalize(text))


def _is_math(gt: str) -> bool:
    """A number or a formula: digits, and no letters but those of LaTeX commands."""
    if not _NUMERIC.search(gt):
        return False
    return mt.fast_number(gt) is not None or not _LETTER.search(_COMMAND.sub("", gt))


class ChartVerifier(Verifier):
    name = "chart"
    cacheable = True

    def __init__(self) -> None:
        self._math = MathVerifier()

    def cache_key(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Hashable:
        ok = truth_type_problem(answer) is None  # as for math: True is not "True"
        return (_clean(extracted), _clean(str(answer)), ok)

    def check_answer(self, answer: Any) -> str | None:
        return truth_type_problem(answer)

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        problem = truth_type_problem(answer)
        if problem:
            return Verdict(0.0, "answer", problem)
        pred, gt = _clean(extracted), _clean(str(answer))
        rel_tol = float(options.get("rel_tol", DEFAULT_REL_TOL))
        if _year(pred) is not None or _year(gt) is not None or _is_math(gt):
            return self._number(_number_word(pred), gt, rel_tol)
        pred_text, gt_text = normalize_pair(pred, gt)
        pred_words, gt_words = pred_text.split(), gt_text.split()
        if not pred_words or len(pred_words) != len(gt_words):
            return Verdict(0.0)
        for p, g in zip(pred_words, gt_words, strict=True):
            if p == g:
                continue
            if mt.fast_number(p) is None or mt.fast_number(g) is None:
                return Verdict(0.0)
            if self._number(p, g, rel_tol).reward < 1.0:
                return Verdict(0.0)
        return Verdict(1.0)

    def _number(self, pred: str, gt: str, rel_tol: float) -> Verdict:
        """A year on either side must equal the other side's value exactly (``2019.0`` is
        2019, ``2019.0000001`` is not); other numbers compare as math does."""
        if _year(pred) is not None or _year(gt) is not None:
            value = mt.fast_number(pred)
            return Verdict(float(value is not None and value == mt.fast_number(gt)))
        return self._math.compare(pred, gt, rel_tol)
