"""Math / STEM: the boxed answer against the ground truth, by value rather than by spelling.

Order of checks, cheapest first: identical normalised text; multiple-choice letters; the exact
fast path for plain numbers (most answers, no SymPy at all); then SymPy objects from the parse
tree: numeric match with a relative tolerance, sets and intervals (open vs closed ends matter),
tuples, equations, and symbolic ``simplify(a - b) == 0``. Near misses stay misses: the
tolerance is relative, so 1/2004! and 1/2006! differ.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from fractions import Fraction
from typing import Any

import sympy

from rewards.base import Verdict, Verifier
from rewards.verifiers import math_parse as mp

DEFAULT_REL_TOL = 1e-6


class Undecided(mp.MathParseError):
    """The answers cannot be compared: the prediction is undefined (a division by zero) or a
    side is too large to evaluate. Reported as an error, not as a wrong answer."""


def numbers_close(a: Fraction | complex, b: Fraction | complex, rel_tol: float) -> bool:
    """Equal within ``rel_tol``, except that two integers must be equal: 1000001 is not 10^6."""
    if a == b:
        return True
    if _is_integer(a) and _is_integer(b):
        return False
    return abs(a - b) <= rel_tol * max(abs(a), abs(b))


def _is_integer(x: Fraction | complex) -> bool:
    return isinstance(x, Fraction) and x.denominator == 1


def _fast_equal(pred: str, gt: str, rel_tol: float) -> bool | None:
    """Decide with exact fractions when both sides are plain numbers; None if either is not."""
    p, g = mp.fast_number(pred), mp.fast_number(gt)
    if p is None or g is None:
        return None
    (pv, ppct), (gv, gpct) = p, g
    if numbers_close(pv, gv, rel_tol):
        return True
    if ppct != gpct:
        return numbers_close(pv / 100 if ppct else pv, gv / 100 if gpct else gv, rel_tol)
    return False


def _numeric(expr: sympy.Basic) -> sympy.Expr | None:
    """30-digit value, kept as a SymPy float: Python floats would flush 1/2004! to zero."""
    value = sympy.N(expr, 30)
    if not value.is_number or value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        return None
    return value


def _expr_equal(a: sympy.Basic, b: sympy.Basic, rel_tol: float) -> bool:
    """``a`` is the prediction, ``b`` the ground truth."""
    if a == b:
        return True
    if a.has(sympy.zoo, sympy.nan):
        raise Undecided("undefined value (a division by zero?)")
    if a.has(sympy.oo, -sympy.oo) or b.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return False
    if mp.is_huge(a) or mp.is_huge(b):
        raise Undecided("too large to compare exactly")
    if a.is_Integer and b.is_Integer:
        return False  # and not within rel_tol: 1000001 is not 10^6
    if a.is_number and b.is_number:
        na, nb = _numeric(a), _numeric(b)
        if na is None or nb is None:
            return False
        return bool(sympy.Abs(na - nb) <= rel_tol * sympy.Max(sympy.Abs(na), sympy.Abs(nb)))
    return _is_identity(_plain_symbols(a), _plain_symbols(b))


#: generic points (no special algebraic meaning) at which identities are probed, 30 digits
_PROBES = tuple(
    sympy.Float(v, 30)
    for v in ("0.41428719356103729384", "1.73205813295540127761", "-0.86602745319873610455",
              "2.53964821070932466213")
)  # fmt: skip


def _plain_symbols(expr: sympy.Basic) -> sympy.Basic:
    """Both parsers' symbols as plain ``Symbol``s named alike (``a_{10}`` == ``a_10``)."""
    table = {s: sympy.Symbol(s.name.replace("{", "").replace("}", "")) for s in expr.free_symbols}
    return expr.xreplace(table) if table else expr


def _is_identity(a: sympy.Expr, b: sympy.Expr) -> bool:
    """``a == b`` for all values of their symbols. Evaluating both sides at a few generic
    points to 30 digits rejects non-identities in microseconds and confirms identities that
    ``simplify`` can take minutes over (sin^2(32x) + cos^2(32x)); ``expand`` and then
    ``simplify`` decide only when the probes cannot (undefined or complex infinities)."""
    if a == b:
        return True
    symbols = sorted(a.free_symbols | b.free_symbols, key=lambda s: s.name)
    agree = 0
    for k in range(len(_PROBES)):
        point = {s: _PROBES[(k + j) % len(_PROBES)] for j, s in enumerate(symbols)}
        va, vb = sympy.N(a.xreplace(point), 30), sympy.N(b.xreplace(point), 30)
        if not (va.is_number and vb.is_number) or va.has(*_UNDEFINED) or vb.has(*_UNDEFINED):
            continue
        # compared as SymPy numbers: as floats, values past 1e308 are inf, and inf <= 1e-20 * inf
        # would count (x+1)(x+2)...(x+200) as agreeing with any answer at all
        gap, scale = abs(va - vb), max(sympy.Integer(1), abs(va), abs(vb))
        if gap > 1e-12 * scale:
            return False
        agree += bool(gap <= 1e-20 * scale)
    d = sympy.expand(a - b)
    if d == 0:
        return True
    if d.is_number:  # a constant gap, however small (x + 10^-25 is not x)
        return False
    return agree >= 3 or sympy.simplify(d) == 0


_UNDEFINED = (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)


def _equation_equal(a: sympy.Eq, b: sympy.Eq) -> bool:
    da = _plain_symbols(a.lhs - a.rhs)
    db = _plain_symbols(b.lhs - b.rhs)
    if _is_identity(da, db) or _is_identity(da, -db):
        return True
    if db == 0:
        return False
    ratio = sympy.simplify(da / db)
    return bool(ratio.is_number and ratio != 0)


def _match_unordered(xs: list, ys: list, rel_tol: float) -> bool:
    if len(xs) != len(ys):
        return False
    left = list(ys)
    for x in xs:
        for i, y in enumerate(left):
            if equal(x, y, rel_tol):
                del left[i]
                break
        else:
            return False
    return True


def _is_inequality(x: sympy.Basic) -> bool:
    return isinstance(x, sympy.core.relational.Relational) and not isinstance(
        x, (sympy.Eq, sympy.Ne)
    )


def _as_set(x: sympy.Basic) -> sympy.Basic:
    """``x < 2`` as the interval ``(-oo, 2)``, for one-variable inequalities, and a chained
    ``-3 \\leq x < 3`` (read as both inequalities) as ``[-3, 3)``."""
    inequality = _is_inequality(x) or (
        isinstance(x, sympy.And) and all(_is_inequality(arg) for arg in x.args)
    )
    if inequality and len(x.free_symbols) == 1:
        try:
            return x.as_set()
        except (NotImplementedError, TypeError, ValueError):
            return x
    return x


def _as_point(x: sympy.Basic, other: sympy.Basic) -> sympy.Basic:
    """``x = 2, y = 3`` as the point ``(2, 3)`` (variables in name order) when compared
    with a tuple, or with ``(2, 3)`` read as an open interval."""
    if not isinstance(other, (sympy.Tuple, sympy.Interval)) or not isinstance(x, sympy.FiniteSet):
        return x
    eqs = list(x.args)
    if len(eqs) < 2 or not all(isinstance(e, sympy.Eq) and e.lhs.is_Symbol for e in eqs):
        return x
    values = [e.rhs for e in sorted(eqs, key=lambda e: e.lhs.name)]
    if isinstance(other, sympy.Interval) and (
        not (other.left_open and other.right_open) or len(values) != 2
    ):
        return x
    return sympy.Tuple(*values)


def equal(a: sympy.Basic, b: sympy.Basic, rel_tol: float) -> bool:
    """Mathematical equivalence of two parsed answers."""
    if a == b:
        return True
    a, b = _as_set(a), _as_set(b)
    a, b = _as_point(a, b), _as_point(b, a)
    if a == b:  # 3 < x < 1 is the empty set
        return True
    if isinstance(a, sympy.Eq) and not isinstance(b, sympy.Eq) and a.lhs.is_Symbol:
        a = a.rhs
    if isinstance(b, sympy.Eq) and not isinstance(a, sympy.Eq) and b.lhs.is_Symbol:
        b = b.rhs
    if isinstance(a, sympy.Eq) and isinstance(b, sympy.Eq):
        return _equation_equal(a, b)
    if isinstance(a, sympy.Interval) and isinstance(b, sympy.Interval):
        return (
            a.left_open == b.left_open
            and a.right_open == b.right_open
            and equal(a.start, b.start, rel_tol)
            and equal(a.end, b.end, rel_tol)
        )
    if (isinstance(a, sympy.FiniteSet) and isinstance(b, sympy.FiniteSet)) or (
        isinstance(a, sympy.Union) and isinstance(b, sympy.Union)
    ):
        return _match_unordered(list(a.args), list(b.args), rel_tol)
    if isinstance(a, sympy.MatrixBase) and isinstance(b, sympy.MatrixBase):
        return a.shape == b.shape and all(equal(x, y, rel_tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, sympy.Tuple) and isinstance(b, sympy.Interval):
        b = sympy.Tuple(b.start, b.end)
    if isinstance(b, sympy.Tuple) and isinstance(a, sympy.Interval):
        a = sympy.Tuple(a.start, a.end)
    if isinstance(a, sympy.Tuple) and isinstance(b, sympy.Tuple):
        return len(a) == len(b) and all(equal(x, y, rel_tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr):
        return _expr_equal(a, b, rel_tol)
    return False


def truth_type_problem(answer: Any) -> str | None:
    """Why ``answer`` is not a math ground truth (a string or a number), or None. ``str`` of
    an object, a list or a boolean (``{'ans': '5'}``, ``True``) is no answer a model could
    write: every response would score a silent 0 (or 1 for the text ``True``). Nor is NaN,
    a float or its text: it marks a missing value (a spreadsheet's empty cell)."""
    if _is_nan(answer):
        return (
            "ground truth: NaN is a missing value, not an answer; give the answer, or leave "
            "the item out"
        )
    if isinstance(answer, str) or (
        isinstance(answer, (int, float)) and not isinstance(answer, bool)
    ):
        return None
    kind = "a boolean" if isinstance(answer, bool) else f"a {type(answer).__name__}"
    return f"ground truth: a string or a number is expected, got {kind}"


def _is_nan(answer: Any) -> bool:
    if isinstance(answer, float):
        return math.isnan(answer)
    return isinstance(answer, str) and answer.strip().lstrip("+-").lower() == "nan"


class MathVerifier(Verifier):
    name = "math"
    cacheable = True

    def cache_key(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Hashable:
        # the flag keeps a refused truth apart from the string it prints as (True, "True")
        ok = truth_type_problem(answer) is None
        return (mp.normalize(extracted), mp.normalize(str(answer)), ok)

    def check_answer(self, answer: Any) -> str | None:
        return truth_type_problem(answer)

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        problem = truth_type_problem(answer)
        if problem:
            return Verdict(0.0, "answer", problem)
        rel_tol = float(options.get("rel_tol", DEFAULT_REL_TOL))
        return self.compare(mp.normalize(extracted), mp.normalize(str(answer)), rel_tol)

    def compare(self, pred: str, gt: str, rel_tol: float) -> Verdict:
        if pred == gt:
            return Verdict(1.0)
        if not pred:
            return Verdict(0.0, "parse", "empty answer")
        letter = mp.choice_letter(gt)
        if letter is not None:
            return Verdict(float(mp.pred_choice_letter(pred) == letter))
        if mp.fast_number(gt) is not None:
            pred = mp.strip_unit_words(pred)
        fast = _fast_equal(pred, gt, rel_tol)
        if fast is not None:
            return Verdict(float(fast))
        try:
            g = mp.to_sympy(gt)
        except mp.MathParseError as e:
            return Verdict(0.0, None, f"ground truth unparsable ({e}); exact match only")
        try:
            p = mp.to_sympy(pred)
        except mp.MathParseError as e:
            return Verdict(0.0, "parse", str(e))
        try:
            return Verdict(float(equal(p, g, rel_tol)))
        except Undecided as e:
            return Verdict(0.0, "parse", str(e))
        except OverflowError:  # mpmath's working precision of a value too large to evaluate
            return Verdict(0.0, "parse", "too large to compare exactly")
