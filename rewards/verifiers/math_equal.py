"""Whether two parsed math answers are equal: numbers within a relative tolerance (exact for
integers), identities by probing at generic points before SymPy simplifies, sets, intervals,
tuples, vectors, equations and conditions. ``rewards.verifiers.math`` turns answer text into
the SymPy objects compared here.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction
from functools import lru_cache

import sympy
from sympy.core.function import AppliedUndef

from rewards.verifiers import math_conditions as mc
from rewards.verifiers import math_parse as mp
from rewards.verifiers import math_text as mt


class Undecided(mp.MathParseError):
    """The answers cannot be compared: the prediction is undefined (a division by zero) or a
    side is too large to evaluate. Reported as an error, not as a wrong answer."""


def numbers_close(pred: Fraction | complex, truth: Fraction | complex, rel_tol: float) -> bool:
    """Equal within ``rel_tol``, except that an integer truth needs an equal value: 1000001
    is not 10^6, nor is 12345670.5 12345678."""
    if pred == truth:
        return True
    if _is_integer(truth):
        return False
    return abs(pred - truth) <= rel_tol * max(abs(pred), abs(truth))


def _is_integer(x: Fraction | complex) -> bool:
    return isinstance(x, Fraction) and x.denominator == 1


def fast_equal(pred: str, gt: str, rel_tol: float) -> bool | None:
    """Decide with exact fractions when both sides are plain numbers; None if either is not."""
    p, g = mt.fast_number(pred), mt.fast_number(gt)
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
    if b.is_Integer and (a.is_Rational or a.is_Float):
        return bool(sympy.Rational(a) == b)  # exact: 1000001 is not 10^6, nor is 999999.5
    if a.is_number and b.is_number:
        na, nb = _numeric(a), _numeric(b)
        if na is None or nb is None:
            return False
        return bool(sympy.Abs(na - nb) <= rel_tol * sympy.Max(sympy.Abs(na), sympy.Abs(nb)))
    return _is_identity(_plain_symbols(a), _plain_symbols(b))


#: points at which identities are probed; each symbol takes its own value at each of them
_PROBE_POINTS = 4


@lru_cache(maxsize=1024)
def _probe(point: int, index: int) -> sympy.Float:
    """The value of the ``index``-th symbol (in name order) at a probe point: 30 digits from a
    hash of the two numbers, so that no two symbols share a value and no value has a special
    algebraic meaning. Its size is 0.3 to 2.8, and it is negative at one point of the four
    (a different one for neighbouring symbols): ``\\sqrt{x^2}`` is not ``x``."""
    digest = hashlib.sha256(f"probe {point} {index}".encode()).digest()
    size = sympy.Rational(3, 10) + sympy.Rational(
        int.from_bytes(digest[:16], "big") % 10**30, 4 * 10**29
    )
    return sympy.Float(-size if (point + index) % _PROBE_POINTS == 2 else size, 30)


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
    for k in range(_PROBE_POINTS):
        point = {s: _probe(k, j) for j, s in enumerate(symbols)}
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


def is_condition(x: sympy.Basic) -> bool:
    """A one-variable inequality or chain of them, which ``_as_set`` reads as its set."""
    inequality = _is_inequality(x) or (
        isinstance(x, sympy.And) and all(_is_inequality(arg) for arg in x.args)
    )
    return inequality and len(x.free_symbols) == 1


def _as_set(x: sympy.Basic) -> sympy.Basic:
    """``x < 2`` as the interval ``(-oo, 2)``, for one-variable inequalities, and a chained
    ``-3 \\leq x < 3`` (read as both inequalities) as ``[-3, 3)``. A ``MathParseError`` for
    one SymPy cannot solve quickly (``x^{50} + x > 3``: ``mc.check_condition``)."""
    if is_condition(x):
        mc.check_condition(x)
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


def _as_vector(x: sympy.Basic, other: sympy.Basic) -> sympy.Basic:
    """The tuple ``(1, 2)`` as the vector it names when compared with a matrix of one column
    (or one row): vectors are written either way. ``(1, 2)`` reads as an open interval too."""
    if not isinstance(other, sympy.MatrixBase) or 1 not in other.shape:
        return x
    if isinstance(x, sympy.Interval) and x.left_open and x.right_open:
        x = sympy.Tuple(x.start, x.end)
    if (
        isinstance(x, sympy.Tuple)
        and len(x) == len(other)
        and all(isinstance(e, sympy.Expr) for e in x)
    ):
        return sympy.ImmutableMatrix(*other.shape, list(x))
    return x


def _is_name(x: sympy.Basic) -> bool:
    """A left side that names the answer rather than takes part in it: a variable (``y``,
    ``a_n``) or a function of variables (``f(x)``, ``g(s, t)``)."""
    if x.is_Symbol:
        return True
    return isinstance(x, AppliedUndef) and all(arg.is_Symbol for arg in x.args)


def _same_function(a: sympy.Eq, b: sympy.Eq) -> bool:
    """``f(x) = x^2`` and ``y = x^2``: one function, named two ways. Only a function's name
    against another name that is none of its arguments (``x = 3`` is a value of x, not
    ``f(x) = 3``), with the same right side."""
    if a.lhs == b.lhs or not (_is_name(a.lhs) and _is_name(b.lhs)):
        return False
    f, other = (a.lhs, b.lhs) if isinstance(a.lhs, AppliedUndef) else (b.lhs, a.lhs)
    if not isinstance(f, AppliedUndef) or other in f.args:
        return False
    if isinstance(other, AppliedUndef) and other.args != f.args:
        return False
    return a.rhs.free_symbols <= set(f.args) and b.rhs.free_symbols <= set(f.args)


def equal(a: sympy.Basic, b: sympy.Basic, rel_tol: float) -> bool:
    """Mathematical equivalence of two parsed answers."""
    if a == b:
        return True
    a, b = _as_set(a), _as_set(b)
    a, b = _as_point(a, b), _as_point(b, a)
    if a == b:  # 3 < x < 1 is the empty set
        return True
    if isinstance(a, sympy.Eq) and not isinstance(b, sympy.Eq) and _is_name(a.lhs):
        a = a.rhs
    if isinstance(b, sympy.Eq) and not isinstance(a, sympy.Eq) and _is_name(b.lhs):
        b = b.rhs
    if isinstance(a, sympy.Eq) and isinstance(b, sympy.Eq):
        if _same_function(a, b):
            return equal(a.rhs, b.rhs, rel_tol)
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
    a, b = _as_vector(a, b), _as_vector(b, a)
    if isinstance(a, sympy.MatrixBase) and isinstance(b, sympy.MatrixBase):
        return a.shape == b.shape and all(equal(x, y, rel_tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, sympy.MatrixBase) or isinstance(b, sympy.MatrixBase):
        return False  # a matrix is no number (and SymPy cannot subtract the two)
    if isinstance(a, sympy.Tuple) and isinstance(b, sympy.Interval):
        b = sympy.Tuple(b.start, b.end)
    if isinstance(b, sympy.Tuple) and isinstance(a, sympy.Interval):
        a = sympy.Tuple(a.start, a.end)
    if isinstance(a, sympy.Tuple) and isinstance(b, sympy.Tuple):
        return len(a) == len(b) and all(equal(x, y, rel_tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr):
        return _expr_equal(a, b, rel_tol)
    return False


def _imaginary_unit(expr: sympy.Basic) -> sympy.Basic | None:
    """``expr`` with its free ``i`` as the imaginary unit, or None if it has no free ``i``."""
    table = {s: sympy.I for s in expr.free_symbols if s.name == "i"}
    return expr.subs(table) if table else None


def equal_as_complex(a: sympy.Basic, b: sympy.Basic, rel_tol: float) -> bool:
    """Whether two answers that differ with ``i`` as a variable are equal with ``i`` as the
    imaginary unit (``\\frac{1}{1+i}`` and ``\\frac{1-i}{2}``, ``i^2`` and ``-1``). Only a
    second reading: an answer that is equal with ``i`` as a variable stays equal, and one that
    is undefined as a complex number (``\\frac{1}{i^2+1}``) is unequal, not an error."""
    ca, cb = _imaginary_unit(a), _imaginary_unit(b)
    if ca is None and cb is None:
        return False
    try:
        return equal(a if ca is None else ca, b if cb is None else cb, rel_tol)
    except (mp.MathParseError, ValueError, TypeError, ArithmeticError):
        return False
