"""Math / STEM: the boxed answer against the ground truth, by value rather than by spelling.

Order of checks, cheapest first: identical normalised text; multiple-choice letters; the exact
fast path for plain numbers (most answers, no SymPy at all); then SymPy objects from the parse
tree, compared in ``math_equal``: numeric match with a relative tolerance, sets and intervals
(open vs closed ends matter), tuples, equations, and symbolic ``simplify(a - b) == 0``. Near
misses stay misses: the tolerance is relative, so 1/2004! and 1/2006! differ.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Mapping
from typing import Any

from rewards.base import NAN_TRUTH, Verdict, Verifier, text_truth_problem
from rewards.verifiers import math_conditions as mc
from rewards.verifiers import math_parse as mp
from rewards.verifiers import math_text as mt
from rewards.verifiers.latex_fast import split_top
from rewards.verifiers.math_equal import equal, equal_as_complex, fast_equal, is_condition

DEFAULT_REL_TOL = 1e-6

# equal, the comparison of two parsed answers, lives in math_equal and is named here too
__all__ = ["DEFAULT_REL_TOL", "MathVerifier", "degrees_to_radians", "equal", "truth_type_problem"]


def truth_type_problem(answer: Any) -> str | None:
    """Why ``answer`` is not a math ground truth (a string or a number), or None. ``str`` of
    an object, a list or a boolean (``{'ans': '5'}``, ``True``) is no answer a model could
    write: every response would score a silent 0 (or 1 for the text ``True``). Nor is NaN,
    a float or its text: it marks a missing value (a spreadsheet's empty cell)."""
    if _is_nan(answer):  # also the text "nan", which an OCR truth may be
        return NAN_TRUTH
    if isinstance(answer, str) and not mt.normalize(answer):
        # an empty cell exported as text: only an empty box would match it
        return "ground truth: empty, no answer; give the answer, or leave the item out"
    return text_truth_problem(answer)


def _is_nan(answer: Any) -> bool:
    if isinstance(answer, float):
        return math.isnan(answer)
    return isinstance(answer, str) and answer.strip().lstrip("+-").lower() == "nan"


#: an answer of letters only: a word (``Monday``, ``\\text{no solution}``) or a name (``ABC``,
#: ``\\angle BAC``); SymPy would read it as a product of one-letter variables, in any order
_LETTERS = re.compile(r"(?:\\(?:angle|triangle) )?[A-Za-z]+(?: [A-Za-z]+)*")
#: words that name a number (plain-text answers are read with them): ``inf`` is ``\\infty``
_NUMBER_WORDS = {"pi", "inf", "infinity"}


#: short words that are answers (``yes``, ``No``): compared as words, case aside, although two
#: or three letters are otherwise a product of variables (``ba`` is ``ab``). Only words that
#: no one writes as a product: ``no`` is no ``n \\cdot o``, so ``on`` does not match it
_SHORT_WORDS = frozenset({"yes", "no", "odd", "all", "any"})


def _letters_only(text: str) -> bool:
    if _LETTERS.fullmatch(text) is None:
        return False
    return not any(w.lower() in _NUMBER_WORDS for w in text.split())


def _has_name(text: str) -> bool:
    """Whether letters-only text holds a name in capitals (``AB``, ``\\angle ABC``), whose
    case is part of it; the case of a word (``Monday``, ``no solution``) is not."""
    return any(len(w) > 1 and w.isupper() for w in text.split() if w[0] != "\\")


def _is_word(text: str, text_mode: bool = False) -> bool:
    """Letters only, with a word or name that no product of a few variables is written as:
    capitals, two or more (``AB``, ``\\angle ABC``), or four letters or more (``none``,
    ``Monday``), or one of the short answer words (``yes``, ``no``), or two letters or more in
    a text-mode command (``text_mode``: ``\\text{on}``). Compared letter for letter; ``xy`` and
    ``abc`` stay algebra (``yx``, ``bca``)."""
    if not _letters_only(text):
        return False
    if text.casefold() in _SHORT_WORDS:
        return True
    words = [w for w in text.split() if w[0] != "\\"]
    if text_mode and any(len(w) > 1 for w in words):
        return True
    return any((len(w) > 1 and w.isupper()) or len(w) > 3 for w in words)


#: pi in an answer: ``\\pi`` or the plain word (``pi/6``)
_PI = re.compile(r"\\pi(?![A-Za-z])|(?<![A-Za-z\\])pi(?![A-Za-z])|π")
#: the name of an angle before its value: ``\\angle A = ``, ``m\\angle ABC = ``
_ANGLE_NAME = r"(?:m\s*)?\\(?:angle|measuredangle)\s*[A-Za-z]+\s*=\s*"
#: ``x = ``, ``\\theta_1 = `` or ``\\angle A = `` before an angle
_NAMED = re.compile(rf"^({_ANGLE_NAME}|\\?[A-Za-z]+(?:_\{{?\w+\}}?)?\s*=\s*)(.+)$", re.S)
_ANGLE_NAMED = re.compile(_ANGLE_NAME)
_BRACKETS = {"(": ")", "[": "]", "\\{": "\\}"}


def _encloses(s: str) -> bool:
    """Whether the bracket that opens ``s`` is the one that closes it (``(1, 2)``, not
    ``(1) + (2)``)."""
    return mt.closing_bracket(s, 0) == len(s) - 1


def drop_angle_names(s: str) -> str:
    """``\\angle A = 30`` -> ``30``, value by value (``\\angle A = 30, \\angle B = 60`` ->
    ``30, 60``): the name of an angle is no part of its value, and the grammar would read
    ``\\angle A`` as a product of letters. For an answer compared with one that is no
    equation."""
    if _ANGLE_NAMED.search(s) is None:
        return s
    parts = (p.strip() for p in split_top(s, ","))
    return ", ".join(p[m.end() :] if (m := _ANGLE_NAMED.match(p)) else p for p in parts)


def degrees_to_radians(s: str) -> str:
    """A normalised answer in degrees (its signs already dropped) read in radians, value by
    value: ``30, 150`` -> ``\\frac{(30)\\pi}{180}, \\frac{(150)\\pi}{180}``, keeping an outer
    bracket and a leading ``x =`` of each value (``30 + 360k`` becomes ``pi/6 + 2 pi k``)."""
    for left, right in _BRACKETS.items():
        if s.startswith(left) and s.endswith(right) and _encloses(s[len(left) - 1 :]):
            return left + degrees_to_radians(s[len(left) : -len(right)]) + right
    out = []
    for part in split_top(s, ","):
        part = part.strip()
        named = _NAMED.match(part)
        name, value = (named.group(1), named.group(2)) if named else ("", part)
        out.append(f"{name}\\frac{{({value.strip()})\\pi}}{{180}}")
    return ", ".join(out)


class MathVerifier(Verifier):
    name = "math"
    cacheable = True

    def cache_key(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Hashable:
        # the flag keeps a refused truth apart from the string it prints as (True, "True")
        ok = truth_type_problem(answer) is None
        degrees = (mt.has_degrees(extracted), mt.has_degrees(str(answer)))
        text_mode = mt.in_text_mode(str(answer))  # \text{on} is a word, a bare on a product
        return (mt.normalize(extracted), mt.normalize(str(answer)), ok, degrees, text_mode)

    def check_answer(self, answer: Any) -> str | None:
        return truth_type_problem(answer)

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        problem = truth_type_problem(answer)
        if problem:
            return Verdict(0.0, "answer", problem)
        rel_tol = float(options.get("rel_tol", DEFAULT_REL_TOL))
        pred, gt = mt.normalize(extracted), mt.normalize(str(answer))
        text_mode = mt.in_text_mode(str(answer))
        verdict = self.compare(pred, gt, rel_tol, text_mode)
        if verdict.reward == 1.0:
            return verdict
        return self._in_radians(extracted, str(answer), pred, gt, rel_tol) or verdict

    def _in_radians(
        self, raw_pred: str, raw_gt: str, pred: str, gt: str, rel_tol: float
    ) -> Verdict | None:
        """A right angle given in degrees where the other side is in radians (``30^\\circ``
        against ``\\frac{\\pi}{6}``, or the other way round): a second reading, tried when
        exactly one side has a degree sign and the other is a multiple of pi; a bare ``30``
        against ``\\frac{\\pi}{6}`` stays wrong."""
        deg_pred, deg_gt = mt.has_degrees(raw_pred), mt.has_degrees(raw_gt)
        if deg_pred == deg_gt:
            return None
        if deg_pred and _PI.search(gt):
            pred = degrees_to_radians(pred)
        elif deg_gt and _PI.search(pred):
            gt = degrees_to_radians(gt)
        else:
            return None
        verdict = self.compare(pred, gt, rel_tol)
        return verdict if verdict.reward == 1.0 else None

    def compare(self, pred: str, gt: str, rel_tol: float, text_mode: bool = False) -> Verdict:
        """``pred`` against ``gt``, both normalised; ``text_mode``: the truth was written in
        a text-mode command (``\\text{on}``), so its letters are a word."""
        if pred == gt:
            return Verdict(1.0)
        if not pred:
            return Verdict(0.0, "parse", "empty answer")
        if "=" not in gt:  # \\angle A = 30 against 30: the value; against \\angle A = 30 as it is
            pred = drop_angle_names(pred)
        if "=" not in pred:
            gt = drop_angle_names(gt)
        letter = mt.choice_letter(gt)
        if letter is not None:
            return Verdict(float(mt.pred_choice_letter(pred) == letter))
        pred, gt = mt.number_words(pred), mt.number_words(gt)  # five is 5
        if _is_word(gt, text_mode) and _letters_only(pred):  # BAC is not ABC, as a product is
            p, g = pred.replace(" ", ""), gt.replace(" ", "")
            # a word, not a name in capitals: No solution, no solution; YES, yes
            if not _has_name(gt) or gt.casefold() in _SHORT_WORDS:
                p, g = p.casefold(), g.casefold()
            return Verdict(float(p == g))
        gt = mt.scale_words(gt)
        if mt.fast_number(gt) is not None:
            pred = mt.strip_unit_words(pred)
        fast = fast_equal(pred, gt, rel_tol)
        if fast is not None:
            return Verdict(float(fast))
        pred, gt = mt.drop_thousands(pred), mt.drop_thousands(gt)  # 1,000 is no list
        try:
            g = mp.to_sympy(gt)
        except mp.MathParseError as e:
            return Verdict(0.0, None, f"ground truth unparsable ({e}); exact match only")
        try:
            p = mp.to_sympy(pred)
        except mp.MathParseError as e:
            return Verdict(0.0, "parse", str(e))
        if p != g and is_condition(g):
            try:  # a truth SymPy cannot solve quickly is the truth's fault, not the answer's
                mc.check_condition(g)
            except mp.MathParseError as e:
                return Verdict(0.0, None, f"ground truth unparsable ({e}); exact match only")
        try:
            return Verdict(float(equal(p, g, rel_tol) or equal_as_complex(p, g, rel_tol)))
        except mp.MathParseError as e:  # Undecided, or a condition too costly to solve
            return Verdict(0.0, "parse", str(e))
        except OverflowError:  # mpmath's working precision of a value too large to evaluate
            return Verdict(0.0, "parse", "too large to compare exactly")
        except ZeroDivisionError:  # SymPy divides by zero to evaluate \cot 0
            return Verdict(0.0, "parse", "undefined value (a division by zero)")
        except (ValueError, TypeError, ArithmeticError) as e:
            # how SymPy says that it cannot evaluate a value: (-1)! (a pole of the gamma
            # function), an integral at a probe point
            return Verdict(0.0, "parse", f"cannot evaluate: {type(e).__name__}: {e}"[:200])
