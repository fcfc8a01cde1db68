"""Conditions as the sets of real numbers they describe: inequalities (``x > 2``), chains
(``-3 \\leq x < 3``), equations and inequalities joined by "or" or "and" (``x < -1 \\text{ or }
x > 1``), and set-builder notation (``\\{x \\mid x^2 = 4\\}``), each solved by SymPy's
``as_set``.

``check_condition`` guards ``as_set``, here and in the math verifier: it refuses, before
SymPy tries, a condition whose polynomials are of too high a degree (``MAX_CONDITION_DEGREE``
for each factor, ``MAX_CONDITION_TOTAL_DEGREE`` for all together), reading the degrees from the
expression tree and factoring only small polynomials (cubics and quartics).

The readers parse each condition with ``math_parse.to_sympy``, and ``to_sympy`` tries them
first on every answer: this module imports ``math_parse``, which imports this one only inside
``to_sympy``, when it is called, so that either may be imported first.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import sympy

from rewards.verifiers.math_parse import MathParseError, to_sympy

#: the highest degree of a polynomial that a condition may ask SymPy to solve whole: ``as_set``
#: finds its real roots by formula or numerically. ``x^d + x > 3`` on a slow 2-core machine:
#: 0.07 s at degree 2, 0.15 s at 3 (0.25 s for other cubics), 0.75 s at 4 (where SymPy gives
#: up), 0.1-0.3 s at 5-9, 1-2 s at 14-20, 3 s at 25, 8 s at 30, minutes at 50. Each factor of a
#: product counts on its own, and a binomial ``c x^k + d`` is solved at once, whatever its degree
MAX_CONDITION_DEGREE = 2
#: the highest degree of a condition's factors together (numerator and denominator), which
#: SymPy multiplies out: 0.1-0.3 s at 4, 0.3-0.8 s at 6, and ``(x - 1)^{1000} > 0`` takes minutes
MAX_CONDITION_TOTAL_DEGREE = 4
#: conditions joined by "or" or "and" that are read as one set; more are read as a list, as
#: before (each is parsed on its own, and an answer holds two or three)
MAX_CONDITIONS = 16
#: "or" and "and" between conditions: ``\\text{ or }`` (also ``\\mathrm``, ``\\textrm``, ``\\mbox``,
#: between ``\\quad``s), ``\\lor``, ``\\vee``, ``\\land``, ``\\wedge``, or the plain word
_CONNECTIVE = re.compile(
    r"(?:\s*\\q?quad)*\s*(?:\\(?:text|textrm|mathrm|mbox)\{\s*(?P<text>or|and)\s*\}"
    r"|\\(?P<command>lor|vee|land|wedge)(?![A-Za-z])|(?<![A-Za-z\\])(?P<word>or|and)(?![A-Za-z]))"
    r"(?:\s*\\q?quad(?![A-Za-z]))*"
)
_CONNECTIVE_KIND = {"or": "or", "and": "and", "lor": "or", "vee": "or", "land": "and",
                    "wedge": "and"}  # fmt: skip


def _split_connectives(s: str) -> tuple[list[str], set[str]]:
    """``s`` cut at its "or"s and "and"s outside brackets, and which of the two it has."""
    pieces, kinds, start, depth, scanned = [], set(), 0, 0, 0
    for m in _CONNECTIVE.finditer(s):
        for c in s[scanned : m.start()]:
            depth += (c in "([{") - (c in ")]}")
        scanned = m.start()
        if depth == 0:
            pieces.append(s[start : m.start()])
            kinds.add(_CONNECTIVE_KIND[m.group("text") or m.group("command") or m.group("word")])
            start = m.end()
    pieces.append(s[start:])
    return pieces, kinds


def joined_conditions(s: str, variable: str | None = None) -> sympy.Set | None:
    """Inequalities in one variable joined by "or", as the union of their sets
    (``x < -1 \\text{ or } x > 1`` is ``(-\\infty, -1) \\cup (1, \\infty)``), or by "and", as
    their intersection (``x > -1 \\text{ and } x < 1`` is ``(-1, 1)``); with "or", equations
    may be among them (``x = 2 \\text{ or } x = 3`` is ``\\{2, 3\\}``). None for anything
    else, which is read as before (the grammar reads "or" and "and" as commas, a list): both
    words in one answer (which binds first?), a piece that is no condition, more than one
    variable, and equations joined by "and", the way a list of solutions is often written
    (``x = 2 \\text{ and } x = 3``). With ``variable``, only conditions on the variable of that
    name (set-builder notation's)."""
    if _CONNECTIVE.search(s) is None:
        return None
    pieces, kinds = _split_connectives(s)
    if not 2 <= len(pieces) <= MAX_CONDITIONS or len(kinds) != 1:
        return None
    if not all(p.strip() for p in pieces):
        return None
    [kind] = kinds
    try:
        parts = [to_sympy(p.strip()) for p in pieces]
    except MathParseError:
        return None
    for part in parts:
        chain = isinstance(part, sympy.And) and all(_inequality(a) for a in part.args)
        equation = kind == "or" and isinstance(part, sympy.Eq)
        if not (_inequality(part) or chain or equation):
            return None
    symbols = set().union(*(p.free_symbols for p in parts))
    if len(symbols) != 1 or (variable is not None and symbols.pop().name != variable):
        return None
    for part in parts:
        check_condition(part)  # a MathParseError, at once, rather than minutes of SymPy
    try:
        sets = [part.as_set() for part in parts]
    except (NotImplementedError, TypeError, ValueError, ArithmeticError, sympy.PolynomialError):
        return None  # an inequality SymPy cannot solve: the list, as before
    return sympy.Union(*sets) if kind == "or" else sympy.Intersection(*sets)


def check_condition(cond: sympy.Basic) -> None:
    """Refuse a condition (an equation, an inequality, a chain, or such joined by "or" or
    "and") that SymPy's ``as_set`` cannot solve quickly, before it tries: a polynomial of a
    degree over ``MAX_CONDITION_DEGREE`` (``x^{50} + x > 3`` runs for minutes), or factors of
    a total degree over ``MAX_CONDITION_TOTAL_DEGREE``. The degrees are read from the
    expression tree, an upper bound, with nothing multiplied out (but for a polynomial of
    degree 3 or 4 with rational coefficients, factored: ``x^3 - x > 0`` passes); under a function
    (``\\sin``, ``|\\cdot|``, ``e^{\\cdot}``) its argument counts, and a radical's
    index multiplies (``\\sqrt[50]{x} + x`` is of degree 50 in the fiftieth root). A binomial
    ``c x^k + d`` is solved at once, whatever its degree (``x^{50} > 3``). Other conditions
    (``\\sin x > 0``, ``x^x > 2``) pass: SymPy answers them at once, or gives up at once."""
    for rel in cond.atoms(sympy.core.relational.Relational):
        lhs, rhs = rel.args
        if not (isinstance(lhs, sympy.Expr) and isinstance(rhs, sympy.Expr)):
            continue
        diff = lhs - rhs
        if _binomial(diff):
            continue
        degrees = _Degrees()
        num, den, hard_num, hard_den = degrees.of(diff)
        hard = math.ceil(max(hard_num, hard_den) * degrees.index)
        total = math.ceil((num + den) * degrees.index)
        if hard > MAX_CONDITION_DEGREE:
            raise MathParseError(
                f"a condition of degree {hard} is too costly to solve (over "
                f"{MAX_CONDITION_DEGREE}): give its solution set"
            )
        if total > MAX_CONDITION_TOTAL_DEGREE:
            raise MathParseError(
                f"a condition of total degree {total} is too costly to solve (over "
                f"{MAX_CONDITION_TOTAL_DEGREE}): give its solution set"
            )


def _binomial(e: sympy.Expr) -> bool:
    """``c x^k + d`` or ``c x^k`` (``x^{50} - 3``, ``x^{-2} - 4``), whose roots are k-th roots."""
    with_variable = [t for t in sympy.Add.make_args(e) if t.free_symbols]
    if len(with_variable) != 1:
        return False
    term = with_variable[0]
    _, power = term.as_independent(*term.free_symbols, as_Add=False)
    base, exponent = power.as_base_exp()
    return base.is_Symbol and exponent.is_number


def _largest_factor(e: sympy.Expr) -> int | None:
    """The degree of the largest irreducible factor of a polynomial in one variable with
    rational coefficients (``x^3 - 6x^2 + 11x - 6``: 1), which SymPy finds in milliseconds for
    the small degrees it is asked for; None for any other expression."""
    if len(e.free_symbols) != 1 or not all(a.is_Symbol or a.is_Rational for a in e.atoms()):
        return None
    [variable] = e.free_symbols
    if not e.is_polynomial(variable):
        return None
    try:
        poly = sympy.Poly(e, variable)
    except sympy.PolynomialError:
        return None
    if not (poly.domain.is_ZZ or poly.domain.is_QQ):
        return None
    return max((factor.degree() for factor, _ in poly.factor_list()[1]), default=0)


class _Degrees:
    """Upper bounds on a rational function's degrees, read from its tree: of its numerator and
    denominator once brought over one denominator, and of the hardest factor of each, the part
    SymPy must find the roots of in one piece; ``index``: the least common multiple of the
    radicals' indices, in whose root the expression is a rational function."""

    def __init__(self) -> None:
        self.index = 1

    def of(self, e: sympy.Basic) -> tuple[Fraction, Fraction, Fraction, Fraction]:
        zero = Fraction(0)
        if not e.free_symbols:
            return zero, zero, zero, zero
        if e.is_Symbol:
            return Fraction(1), zero, Fraction(1), zero
        if isinstance(e, sympy.Add):
            parts = [self.of(a) for a in e.args]
            den = sum((p[1] for p in parts), zero)
            num = max(p[0] + den - p[1] for p in parts)
            hard = num
            if den == 0 and MAX_CONDITION_DEGREE < num <= MAX_CONDITION_TOTAL_DEGREE:
                hard = _largest_factor(e) or num  # x^3 - x is x (x - 1) (x + 1)
            return num, den, hard, max(p[3] for p in parts)
        if isinstance(e, sympy.Mul):
            parts = [self.of(a) for a in e.args]
            return (
                sum((p[0] for p in parts), zero),
                sum((p[1] for p in parts), zero),
                max(p[2] for p in parts),
                max(p[3] for p in parts),
            )
        if isinstance(e, sympy.Pow) and e.exp.is_Rational:
            num, den, hard_num, hard_den = self.of(e.base)
            n = abs(Fraction(e.exp.p, e.exp.q))
            if e.exp.q != 1:  # a radical, which SymPy raises to a power: its whole base counts
                self.index = math.lcm(self.index, e.exp.q)
                hard_num, hard_den = num, den
            num, den = num * n, den * n
            return (num, den, hard_num, hard_den) if e.exp > 0 else (den, num, hard_den, hard_num)
        # a function (\sin, |x|, e^x, x^x, x^{\pi}): SymPy solves for its argument
        inner = max((sum(self.of(a)[:2]) for a in e.args), default=Fraction(1))
        return inner, zero, inner, zero


def _inequality(x: sympy.Basic) -> bool:
    return isinstance(x, sympy.core.relational.Relational) and not isinstance(
        x, (sympy.Eq, sympy.Ne)
    )


#: set-builder notation over the real numbers: ``\\{x \\mid x > 2\\}``, ``\\{x : x > 2\\}``,
#: ``\\{x \\in \\mathbb{R} \\mid x > 2\\}`` (also ``|``, ``\\vert``, ``\\middle|``, ``\\colon``): one
#: letter, the reals or nothing as its domain, then the condition. Another domain
#: (``\\mathbb{Z}``, ``\\mathbb{N}``) is not read: its set is no interval
_SET_BUILDER = re.compile(
    r"\\\{\s*(?P<var>[A-Za-z])\s*"
    r"(?:\\in\s*(?:\\mathbb\s*\{\s*R\s*\}|\\mathbb\s+R|\\R|ℝ)(?![A-Za-z])\s*)?"
    r"(?:\\mid(?![A-Za-z])|\\middle\s*(?:\||\\vert(?![A-Za-z]))|\\vert(?![A-Za-z])"
    r"|\\colon(?![A-Za-z])|\||:)"
    r"(?P<cond>.+)\\\}",
    re.S,
)


def set_builder(s: str) -> sympy.Set | None:
    """``\\{x \\mid x > 2\\}`` as the set its condition describes over the reals, the interval
    ``(2, \\infty)``: inequalities, equations (``\\{x \\mid x^2 = 4\\}`` is ``\\{-2, 2\\}``) and
    conditions joined by "or" or "and", in the variable before the bar and no other. None for
    text that is no such set (``\\{1, 2\\}``); a condition that is none of these, or is on
    another variable, is a ``MathParseError``."""
    m = _SET_BUILDER.fullmatch(s)
    if m is None:
        return None
    variable, condition = m.group("var"), m.group("cond").strip()
    depth = 0  # \\{x \\mid x > 2\\} \\cup \\{3\\} is no single set: the first brace closes early
    for i in range(len(condition)):
        if condition.startswith("\\{", i):
            depth += 1
        elif condition.startswith("\\}", i):
            depth -= 1
            if depth < 0:
                return None
    joined = joined_conditions(condition, variable)
    if joined is not None:
        return joined
    part = to_sympy(condition)
    chain = isinstance(part, sympy.And) and all(_inequality(a) for a in part.args)
    relation = isinstance(part, sympy.core.relational.Relational)
    if not (relation or chain) or {x.name for x in part.free_symbols} != {variable}:
        raise MathParseError(
            f"set-builder notation: the condition must be equations or inequalities in {variable}"
        )
    check_condition(part)
    try:
        return part.as_set()
    except (NotImplementedError, TypeError, ValueError, ArithmeticError, sympy.PolynomialError):
        raise MathParseError("set-builder notation: cannot solve its condition") from None
