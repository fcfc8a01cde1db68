"""Math answers as values: a guarded LaTeX -> SymPy parse that builds objects from a parse
tree (latex2sympy2_extended). The text normalisation, answer forms and the exact fast path for
plain numbers that come before it are in ``math_text``.

No string is ever handed to Python's expression evaluator: SymPy objects come only from the
ANTLR parse tree. Guards reject inputs whose parse or evaluation would blow up (deep nesting,
towers of powers, huge factorials) before SymPy sees them; the worker-process timeout is the
last line of defence, not the first.

Conditions (inequalities, "or"-joined conditions, set-builder notation) and the degree guard on
solving them are in ``math_conditions``, whose readers ``to_sympy`` tries first.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import sympy
from latex2sympy2_extended import latex2sympy

from rewards.verifiers import latex_fast
from rewards.verifiers.math_text import HUGE_E

MAX_CHARS = 2000
MAX_DEPTH = 40
MAX_DIGITS = 4000
HUGE_EXPONENT = 10_000
#: a power or exponential whose value needs more bits than this is too large to compare
HUGE_BITS = 100_000
#: entries of a matrix that ``\\operatorname{zeros}``, ``ones`` or ``eye`` may build (100 x 100)
MAX_MATRIX_ENTRIES = 10_000


class MathParseError(ValueError):
    """The text is not a math expression we can read, or it is too big to evaluate safely."""


#: a superscript that another follows at once (``a^b^c``, ``9^9^9``, ``x^{2}^{3}``). A superscript
#: is one number, letter, command or group, as both parsers read it: ``x^2y^2`` is x^2 times
#: y^2, no double superscript
_DOUBLE_SUPERSCRIPT = re.compile(r"\^\s*(?:\d+(?:\.\d*)?|[A-Za-z]|\\[A-Za-z]+|\{[^{}]*\})\s*\^")
_MATRIX_MAKER = re.compile(r"\\operatorname\{(?:zeros|ones|eye)\}")
_MATRIX_SIZE = re.compile(r"\((\d+)(?:,(\d+))?\)|\{(\d+)\}|(\d+)")
_SQRT_CALL = re.compile(r"\bsqrt\s*\(")
_PLAIN_WORDS = (
    (re.compile(r"(?<!\\)\bpi\b"), "\\pi"),
    (re.compile(r"\b(?:inf|infinity)\b"), "\\infty"),
)


def check_size(s: str) -> None:
    """Refuse text that would make the parser or SymPy itself take unbounded time or stack."""
    if len(s) > MAX_CHARS:
        raise MathParseError(f"answer longer than {MAX_CHARS} characters")
    depth = worst = 0
    run = longest = 0
    for c in s:
        if c in "({[":
            depth += 1
            worst = max(worst, depth)
        elif c in ")}]":
            depth -= 1
        if c.isdigit():
            run += 1
            longest = max(longest, run)
        else:
            run = 0
    if worst > MAX_DEPTH:
        raise MathParseError(f"nesting deeper than {MAX_DEPTH}")
    if longest > MAX_DIGITS:
        raise MathParseError(f"a number with more than {MAX_DIGITS} digits")
    if HUGE_E.search(s):
        raise MathParseError("a power too large to evaluate (e-notation exponent)")
    _check_matrix_sizes(s)


def _check_matrix_sizes(s: str) -> None:
    """``\\operatorname{zeros}(40000, 40000)`` would build its matrix while being parsed: the
    size of such a matrix must be written as one or two plain integers, and be small."""
    packed = "".join(s.split())  # the grammar skips spaces: (4 0000, 1) is 40000 rows
    for m in _MATRIX_MAKER.finditer(packed):
        size = _MATRIX_SIZE.match(packed, m.end())
        if not size:
            raise MathParseError("a matrix size must be written as plain integers")
        rows = int(size.group(1) or size.group(3) or size.group(4))
        cols = int(size.group(2) or rows)
        if rows * cols > MAX_MATRIX_ENTRIES:
            raise MathParseError(f"a matrix too large (over {MAX_MATRIX_ENTRIES} entries)")


def plain_to_latex(s: str) -> str:
    """Let plain-text answers (``sqrt(2)/2``, ``x**2``, ``pi``) through the LaTeX grammar."""
    s = s.replace("**", "^")
    for pattern, repl in _PLAIN_WORDS:
        s = pattern.sub(lambda _m, r=repl: r, s)
    while True:
        m = _SQRT_CALL.search(s)
        if not m or (m.start() > 0 and s[m.start() - 1] == "\\"):
            break
        open_at = m.end() - 1
        depth = 0
        for i in range(open_at, len(s)):
            depth += (s[i] == "(") - (s[i] == ")")
            if depth == 0:
                s = s[: m.start()] + "\\sqrt{" + s[open_at + 1 : i] + "}" + s[i + 1 :]
                break
        else:
            break
    return s


@lru_cache(maxsize=8192)
def to_sympy(s: str) -> sympy.Basic:
    """Parse normalised answer text into a SymPy object, after the size guards. The small
    fast parser handles most answers; the full LaTeX grammar takes the rest. Cached per
    process: a GRPO group repeats its ground truth and many of its answers."""
    check_size(s)
    # imported here, not at the top: math_conditions imports this module (to parse each
    # condition), and this is its only use here
    from rewards.verifiers import math_conditions

    built = math_conditions.set_builder(s)
    if built is not None:
        return built
    joined = math_conditions.joined_conditions(s)
    if joined is not None:
        return joined
    latex = plain_to_latex(s)
    if _DOUBLE_SUPERSCRIPT.search(latex):
        # a^b^c: LaTeX refuses it, the grammar would read (a^b)^c, Python's a**b**c is a^(b^c)
        raise MathParseError("a double superscript (a^b^c) is ambiguous: brace the exponent")
    try:
        return latex_fast.parse(latex)
    except latex_fast.TooLarge as e:
        raise MathParseError(str(e)) from None
    except OverflowError:  # a value too large even for a float estimate of its size
        raise MathParseError("a power too large to evaluate") from None
    except (latex_fast.Unsupported, RecursionError, ValueError, TypeError, ZeroDivisionError):
        pass
    try:
        expr = latex2sympy(latex)
    except RecursionError:
        raise MathParseError("expression too deeply nested") from None
    except Exception as e:
        raise MathParseError(_grammar_failure(e)) from None
    if isinstance(expr, list):
        expr = sympy.FiniteSet(*expr) if len(expr) > 1 else expr[0]
    if isinstance(expr, sympy.MatrixBase):
        expr = sympy.ImmutableMatrix(expr)
    if not isinstance(expr, sympy.Basic):
        raise MathParseError(f"parsed to {type(expr).__name__}, not a SymPy object")
    # the grammar gives \gcd(12, 18) as 6 wrapped in an UnevaluatedExpr, which SymPy cannot
    # compare with a number
    if expr.has(sympy.UnevaluatedExpr):
        expr = expr.replace(lambda e: isinstance(e, sympy.UnevaluatedExpr), lambda e: e.args[0])
    return expr


def _grammar_failure(e: Exception) -> str:
    """One line from the LaTeX grammar's error, which is three: what it expected, the text it
    read and a caret under where it stopped. Shown as that message and the text from the caret
    on, so that an API user sees where their answer went wrong."""
    lines = str(e).splitlines()
    if len(lines) == 3 and lines[2].endswith("^"):
        at = len(lines[2]) - 1
        rest = lines[1][at : at + 24]
        where = f"near {rest!r}" if rest else "at the end"
        return f"cannot parse {where}: {lines[0].strip()}"[:200]
    return f"cannot parse: {type(e).__name__}: {lines[0].strip() if lines else ''}"[:200]


def is_huge(expr: sympy.Basic) -> bool:
    """True when evaluating ``expr`` numerically could need astronomically many digits.

    Inner nodes are checked first, so an exponent is only ever evaluated (to 15 digits) once
    everything inside it is known to be of a size that evaluates in microseconds: a tower
    such as ``e^{e^{e^{e^{10}}}}`` is refused at its first level that is too large, while
    ``2^{\\sqrt{2}}`` or ``\\pi^{\\sqrt{2}}`` are ordinary numbers."""
    for node in sympy.postorder_traversal(expr):
        if isinstance(node, (sympy.Pow, sympy.exp)):
            base, exp = node.args if isinstance(node, sympy.Pow) else (sympy.E, node.args[0])
            if not (base.is_number and exp.is_number):
                continue
            if exp.is_Integer:
                if abs(int(exp)) > HUGE_EXPONENT and abs(base) not in (0, 1):
                    return True
            elif _bits(base, exp) > HUGE_BITS:
                return True
        elif isinstance(node, (sympy.factorial, sympy.gamma)):
            arg = node.args[0]
            if arg.is_Integer:
                if int(arg) > HUGE_EXPONENT:
                    return True
            elif arg.is_number and _estimate(arg) > HUGE_EXPONENT:
                return True
    return False


def _estimate(value: sympy.Expr) -> float:
    """``|value|`` to 15 digits (inf when it is not a finite number); only for values whose
    every inner power ``is_huge`` has already passed."""
    v = sympy.N(value, 15)
    if not v.is_number or v.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        return float("inf")
    try:
        return float(abs(v))
    except (TypeError, OverflowError):
        return float("inf")


def _bits(base: sympy.Expr, exp: sympy.Expr) -> float:
    """About how many bits ``|base ** exp|`` (or its reciprocal) takes: ``|exp| * log2|base|``."""
    b, e = _estimate(base), _estimate(exp)
    if b in (0.0, float("inf")) or e == float("inf"):
        return float("inf") if e == float("inf") or b == float("inf") else 0.0
    return e * abs(math.log2(b))
