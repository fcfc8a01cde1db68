"""A small recursive-descent parser for the LaTeX most answers use, straight to SymPy objects.

latex2sympy2_extended's ANTLR grammar costs several milliseconds per answer; this covers the
common subset (numbers, + - * / ^, \\frac, \\sqrt, \\pi, \\infty, letters with subscripts,
implicit products, !, a few functions, equations, intervals, sets, tuples, \\cup) in tens of
microseconds and raises ``Unsupported`` for anything else, which then goes to latex2sympy.
It follows latex2sympy's conventions ((a, b) is an open interval, a bare list is a set) so the
two parsers agree. Numeric powers too large to compute are refused (``TooLarge``); large
factorials stay unevaluated.
"""

from __future__ import annotations

import re

import sympy

#: e-notation in a larger answer (``2e3 \\cdot 2``, ``1.5e-3+1``) as the plain-number path
#: reads it, when an operator, a closing bracket or the end follows; ``3e-2x`` stays 3e - 2x
_E_NOTATION = r"(?:[eE][+-]?\d+(?=\s*(?:$|[-+*/)\]},=]|\\(?:cdot|times|div)(?![A-Za-z]))))?"
_TOKEN = re.compile(
    rf"\s*(\\[A-Za-z]+|\\[{{}}|]|(?:\d+(?:\.\d*)?|\.\d+){_E_NOTATION}|[A-Za-z]|[-+*/^_=(){{}}\[\],!|])"
)


def _log10(x: sympy.Expr) -> sympy.Expr:
    """``\\log`` without a base: base 10, as in school and contest mathematics and as
    latex2sympy2_extended (math-verify's parser) reads it; ``\\ln`` is the natural log."""
    return sympy.log(x, 10)


_FUNCS = {"\\sin": sympy.sin, "\\cos": sympy.cos, "\\tan": sympy.tan, "\\ln": sympy.log,
          "\\log": _log10, "\\exp": sympy.exp, "\\arcsin": sympy.asin, "\\arccos": sympy.acos,
          "\\arctan": sympy.atan}  # fmt: skip
_CONSTS = {"\\pi": sympy.pi, "\\infty": sympy.oo, "e": sympy.E}
_MUL = {"*", "\\cdot", "\\times"}
_ATOM_START = {"(", "{", "\\frac", "\\sqrt", "\\pi", "\\infty", "\\left"} | set(_FUNCS)
_SMALL_EXP = 1000
#: how many digits the e-notation numbers of one expression may add up to (1e9999 alone is
#: fine, as it is for a plain number; each of a product's factors multiplies the cost)
_E_DIGITS = 10_000
_SMALL_FACT = 20  # larger factorials stay symbolic, as in latex2sympy


class Unsupported(ValueError):
    """Outside this parser's subset: use the full grammar instead."""


class TooLarge(ValueError):
    """A power whose exact value is astronomically large. SymPy would compute it as soon as
    any arithmetic touched it (even an unevaluated Pow, once negated), so refuse it here."""


def _tokens(s: str) -> list[str]:
    out, pos = [], 0
    s = s.rstrip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            raise Unsupported(s[pos : pos + 10])
        out.append(m.group(1))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.t, self.i = tokens, 0
        self.e_digits = _E_DIGITS

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise Unsupported(f"expected {want!r}, got {tok!r}")
        self.i += 1
        return tok

    def relation(self) -> sympy.Basic:
        left = self.expr()
        if self.peek() == "=":
            self.take()
            return sympy.Eq(left, self.expr(), evaluate=False)
        return left

    def expr(self) -> sympy.Expr:
        terms = [self.term()]
        while self.peek() in ("+", "-"):
            sign = self.take()
            t = self.term()
            terms.append(-t if sign == "-" else t)
        return sympy.Add(*terms) if len(terms) > 1 else terms[0]

    def term(self) -> sympy.Expr:
        value = self.unary()
        while True:
            tok = self.peek()
            if tok in _MUL:
                self.take()
                value = value * self.unary()
            elif tok in ("/", "\\div"):
                self.take()
                value = value / self.unary()
            elif self._continues_product():
                value = value * self.power()
            else:
                return value

    def _continues_product(self) -> bool:
        """Whether the next token starts a factor of an implicit product (``2x``, ``x\\pi``)."""
        tok = self.peek()
        return tok is not None and (tok in _ATOM_START or tok[0].isalnum() or tok in _CONSTS)

    def unary(self) -> sympy.Expr:
        if self.peek() in ("-", "+"):
            sign = self.take()
            v = self.unary()
            return -v if sign == "-" else v
        return self.power()

    def power(self) -> sympy.Expr:
        base = self.postfix()
        if self.peek() != "^":
            return base
        self.take()
        exp = self.exponent()
        numeric = base.is_number and exp.is_Rational and abs(base) not in (0, 1)
        if numeric and not _cheap_power(base, exp):
            raise TooLarge("a power too large to evaluate")
        return base**exp

    def exponent(self) -> sympy.Expr:
        tok = self.peek()
        if tok == "{":
            return self.group()
        if tok == "(":
            return self.postfix()
        if tok in ("-",):
            self.take()
            return -self.exponent()
        tok = self.take()
        if tok.isdigit():  # x^23 reads as x^{23}, as latex2sympy reads it
            return sympy.Integer(tok)
        if tok.isalpha() and len(tok) == 1:
            return _letter(tok)
        if tok in _CONSTS:
            return _CONSTS[tok]
        raise Unsupported(f"exponent {tok!r}")

    def postfix(self) -> sympy.Expr:
        value = self.atom()
        while self.peek() == "!":
            self.take()
            if not (value.is_Integer and 0 <= int(value) <= _SMALL_FACT):
                value = sympy.factorial(value, evaluate=False)
            else:
                value = sympy.factorial(value)
        return value

    def group(self) -> sympy.Expr:
        self.take("{")
        inner = self.expr()
        self.take("}")
        return inner

    def atom(self) -> sympy.Expr:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            if "e" in tok or "E" in tok:
                self.e_digits -= abs(int(tok.replace("E", "e").partition("e")[2]))
                if self.e_digits < 0:  # a product of many 9e9999 takes seconds
                    raise TooLarge("numbers in e-notation too large to evaluate")
            return sympy.Rational(tok)
        if tok == "(" or tok == "\\left":
            if tok == "\\left":
                self.take("(")
            inner = self.expr()
            if self.peek() == "\\right":
                self.take()
            self.take(")")
            return inner
        if tok == "{":
            self.i -= 1
            return self.group()
        if tok == "\\frac":
            num = self.group()
            return num / self.group()
        if tok == "\\sqrt":
            if self.peek() == "[":
                self.take()
                n = self.expr()
                self.take("]")
                return sympy.root(self.group(), n)
            return sympy.sqrt(self.group())
        if tok in _FUNCS:
            if self.peek() == "(":  # \sin(x)^2 is sin(x)^2, the power applied to the value
                return _FUNCS[tok](self.atom())
            arg = self.power()  # \sin x^2 and \sin{x}^2 are sin(x^2)
            # \sin 2x is sin(2x) and \sin x \cos x is sin(x)cos(x): the grammar decides
            if self._continues_product() and self.peek() not in _FUNCS:
                raise Unsupported("function argument without parentheses")
            return _FUNCS[tok](arg)
        if tok in _CONSTS:
            return _CONSTS[tok]
        if len(tok) == 1 and tok.isalpha():
            if self.peek() == "_":
                self.take()
                sub = self.take()
                if sub == "{":
                    parts = []
                    while self.peek() not in ("}", None):
                        parts.append(self.take())
                    self.take("}")
                    sub = "".join(parts)
                if not sub.isalnum():
                    raise Unsupported(f"subscript {sub!r}")
                return sympy.Symbol(f"{tok}_{sub}")
            if tok in "fgh" and self.peek() == "(":
                raise Unsupported("function application")
            return _letter(tok)
        raise Unsupported(tok)


def _cheap_power(base: sympy.Expr, exp: sympy.Rational) -> bool:
    """Whether SymPy can compute base**exp exactly in little time and memory (under ~100k
    bits). SymPy folds (a^b)^c into a^(bc), so a base that holds a power counts as risky."""
    p, q = abs(exp.p), exp.q  # in integers: p / q overflows a float for 2^{3^{4^{5}}}
    if base.is_Rational:
        return max(abs(base.p).bit_length(), base.q.bit_length()) * p <= 100_000 * q
    if p <= 64 * q:
        return True
    return p <= _SMALL_EXP * q and not base.has(sympy.Pow)


def _letter(tok: str) -> sympy.Expr:
    return sympy.E if tok == "e" else sympy.Symbol(tok)


def split_top(s: str, sep: str) -> list[str]:
    """Split on ``sep`` outside (), [], {} (``\\{`` counts as a bracket)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        if s.startswith("\\{", i) or s.startswith("\\}", i):
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(s[start:])
    return parts


def _one(s: str) -> sympy.Basic:
    p = _Parser(_tokens(s))
    value = p.relation()
    if p.peek() is not None:
        raise Unsupported(f"trailing {p.peek()!r}")
    return value


def _no_interval(lo: sympy.Basic, hi: sympy.Basic, left_open: bool, right_open: bool) -> bool:
    """latex2sympy's rule: ``(a, b)`` with ``b <= a``, or ``[a, b]`` with ``b < a``, would be
    an empty interval, so it is a pair (every such pair would be equal to every other)."""
    try:
        if left_open and right_open:
            return bool(hi <= lo)
        if not left_open and not right_open:
            return bool(hi < lo)
    except TypeError:  # a comparison SymPy cannot decide: (x, 1)
        pass
    return False


def parse(s: str) -> sympy.Basic:
    """SymPy object for ``s``, or ``Unsupported``."""
    s = s.strip()
    if not s:
        raise Unsupported("empty")
    pieces = split_top(s, "\\cup")
    if len(pieces) > 1:
        return sympy.Union(*(parse(p) for p in pieces), evaluate=False)
    if s.startswith("\\{") and s.endswith("\\}"):
        return sympy.FiniteSet(*(_one(x) for x in split_top(s[2:-2], ",")))
    if s[0] in "([" and s[-1] in ")]":
        items = split_top(s[1:-1], ",")
        if len(items) == 2:
            lo, hi = _one(items[0]), _one(items[1])
            left_open, right_open = s[0] == "(", s[-1] == ")"
            if _no_interval(lo, hi, left_open, right_open):
                return sympy.Tuple(lo, hi)  # (2, 1) is a pair, not the empty set
            return sympy.Interval(lo, hi, left_open=left_open, right_open=right_open)
        if len(items) > 2 and s[0] == "(" and s[-1] == ")":
            return sympy.Tuple(*(_one(x) for x in items))
    items = split_top(s, ",")
    if len(items) > 1:
        return sympy.FiniteSet(*(_one(x) for x in items))
    return _one(s)
