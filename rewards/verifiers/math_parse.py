"""Math answers as values: text normalisation, an exact fast path for plain numbers, and a
guarded LaTeX -> SymPy parse that builds objects from a parse tree (latex2sympy2_extended).

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
from fractions import Fraction
from functools import lru_cache

import sympy
from latex2sympy2_extended import latex2sympy

from rewards.verifiers import latex_fast

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


#: a degree sign in its spellings, longest first: ``normalize`` drops it (``30^\\circ`` is
#: ``30``), and ``has_degrees`` says an answer had one
_DEGREE_SIGNS = ("^{\\circ}", "^\\circ", "°", "\\circ", "^{\\degree}", "^\\degree",
                 "\\textdegree", "\\degree")  # fmt: skip
#: dropped before degree marks are read (so that ``\\sin\\left(30^\\circ\\right)`` is seen as a
#: function of an angle in degrees); the degree signs themselves are dropped after that
_DROP = (
    "\\displaystyle", "\\left", "\\right", "\\!", "\\,", "\\;", "\\:",
    "\\(", "\\)", "\\[", "\\]", "\\$", "$",
    "\\bigl", "\\bigr", "\\Bigl", "\\Bigr",
)  # fmt: skip
_DEGREE = "|".join(re.escape(sign) for sign in _DEGREE_SIGNS)
#: a trigonometric function, whose argument is an angle; its power (``\\sin^2``, ``\\cos^{2}``)
_TRIG = re.compile(
    r"\\(?:sin|cos|tan|sec|csc|cot)(?![A-Za-z])(?:\s*\^\s*(?:\{[^{}]*\}|-?\d|[A-Za-z]))?"
)
#: a number with a degree sign: in a trigonometric function's argument it is converted
_DEGREE_NUMBER = re.compile(rf"(?<![\d.])(\d+(?:\.\d*)?|\.\d+)\s*(?:{_DEGREE})")
#: an argument without brackets that is a number in degrees (``\\sin 30^\\circ``, ``\\cos 60°``)
_BARE_DEGREE_ARGUMENT = re.compile(rf"((?:[+-]\s*)?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:{_DEGREE})")
#: a repeating decimal: ``0.\\overline{3}`` is 1/3, ``0.1\\overline{6}`` is 1/6 (digits only)
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\s*\\overline\s*\{\s*(\d+)\s*\}")
#: digits a repeating decimal may have in all: past that it is left as written (and unread)
_REPEATING_DIGITS = 200
#: ``\\mathrm{e}``: Euler's number written upright (as ISO 80000 writes it), read as ``e``
_RENAME = (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\le ", "\\leq "), ("\\ge ", "\\geq "),
           ("\\varnothing", "\\emptyset"), ("∅", "\\emptyset"), ("\\mathrm{e}", "e"))  # fmt: skip
#: a unit after the answer, dropped: ``\\text{ cm}^2``, ``\\mathrm{~cm}`` (a TeX tie before it),
#: ``\\text{m/s}``, ``\\mathrm{cm^2}``; a scale word (``\\text{ million}``) is kept as a word
_UNIT_TAIL = re.compile(
    r"\s*\\(?:text|mbox|mathrm|textrm)\{[\s~]*(?P<unit>[A-Za-z][A-Za-z .~/]*)"
    r"(?P<inner>\^\{?-?\d\}?)?\}(?P<outer>\^\{?-?\d\}?)?$"
)
#: text before a trailing ``\\text{...}``: then that is a word of the answer, not its unit
_TEXT_BEFORE = re.compile(r"\\(?:text|mbox|mathrm|textrm)\{")
#: the unit is looked for in the answer's last characters only: a search over the whole text
#: backtracks quadratically on a long answer with an unclosed ``\text{``
_UNIT_TAIL_WINDOW = 256
#: a superscript that another follows at once (``a^b^c``, ``9^9^9``, ``x^{2}^{3}``). A superscript
#: is one number, letter, command or group, as both parsers read it: ``x^2y^2`` is x^2 times
#: y^2, no double superscript
_DOUBLE_SUPERSCRIPT = re.compile(r"\^\s*(?:\d+(?:\.\d*)?|[A-Za-z]|\\[A-Za-z]+|\{[^{}]*\})\s*\^")
_WRAPPED = re.compile(r"^\\(?:text|textbf|mathrm|mbox|boxed|mathbf)\{(.*)\}$", re.S)
_IN_SET = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*\\in\s*")
_CHOICE = re.compile(r"^\(?([A-J])\)?[.:]?$")
_CHOICE_PRED = re.compile(r"^(?:\\text\{)?\(?([A-J])\)?(?:[.:)\s}]|$)")
#: an answer that starts with a parenthesised option letter, upper or lower case: ``(B) I and
#: III``, ``(b) 42``; its text may hold capitals that are no choice letters
_CHOICE_PAREN = re.compile(r"^(?:\\text\{)?\(([A-Ja-j])\)(?:[.:\s}]|$)")
#: a second choice letter after the first ("A or B", "(A) (B)", "A B C D"): a hedge
_ANOTHER_CHOICE = re.compile(r"(?<![A-Za-z\\])[A-J](?![A-Za-z])")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_FRAC = re.compile(r"^([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}$")
_SLASH = re.compile(r"^([+-]?\d+)/([+-]?\d+)$")
_MIXED = re.compile(r"^([+-]?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}$")  # 1\frac{1}{2} = 3/2
_UNIT_WORDS = re.compile(r"^(\S+)\s+([A-Za-z]+)(?:\^?\d)?(?:\s*/\s*[A-Za-z]+)?\.?$")  # 5 cm, 3 m/s
#: words after a number that scale it (``2.5 million`` is 2500000): no unit to drop
_SCALE_WORDS = {"hundred": 10**2, "thousand": 10**3, "million": 10**6, "billion": 10**9,
                "trillion": 10**12}  # fmt: skip
#: letters after a number that are variables, never units: ``3 x`` is not ``3``
_VARIABLES = frozenset("xyz")
#: e-notation whose exponent has five or more digits (10^10000 and up): ``Fraction`` would
#: compute the power exactly, which takes minutes for ``1e999999999``
_HUGE_E = re.compile(r"\d\.?[eE][+-]?0*\d{5}")
_SCI = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:\\times|\\cdot|\*|x)\s*10\^\{?([+-]?\d+)\}?$"
)
_MATRIX_MAKER = re.compile(r"\\operatorname\{(?:zeros|ones|eye)\}")
_MATRIX_SIZE = re.compile(r"\((\d+)(?:,(\d+))?\)|\{(\d+)\}|(\d+)")
_SQRT_CALL = re.compile(r"\bsqrt\s*\(")
#: ``\\frac12``, ``\\frac1i``, ``\\frac ab``: TeX takes one token (a digit or a letter) or one
#: group for each argument (``\\fracab`` would be a command of its own)
_SHORT_FRAC = re.compile(
    r"\\frac(?![A-Za-z])\s*(\d|[A-Za-z]|\{[^{}]*\})\s*(\d|[A-Za-z]|\{[^{}]*\})"
)
_SHORT_SQRT = re.compile(r"\\sqrt\s*(\d|[A-Za-z](?![A-Za-z]))")
#: ``\\log_2 8``, ``\\log_e x``, ``\\log_10 100``, ``\\log_\\pi x``: a base without braces is one
#: letter, number (all its digits, as ``x^23`` is ``x^{23}`` to both parsers, and as
#: latex2sympy2_extended reads ``\\log_10``) or command without an argument, braced: the
#: grammar has no rule for ``\\log_e`` (``e`` is its constant)
_SHORT_LOG_BASE = re.compile(
    r"\\log\s*_\s*(\d+(?:\.\d+)?|[A-Za-z]|\\[A-Za-z]+(?![A-Za-z])(?!\s*[{\[]))"
)
_ESCAPED_SPACE = re.compile(r"(?<!\\)\\ ")
_PLAIN_WORDS = (
    (re.compile(r"(?<!\\)\bpi\b"), "\\pi"),
    (re.compile(r"\b(?:inf|infinity)\b"), "\\infty"),
)


def has_degrees(text: str) -> bool:
    """Whether the answer is an angle in degrees: a degree sign, which ``normalize`` drops,
    other than on a trigonometric function's argument (``\\sin 30^\\circ`` is the number 1/2,
    no angle), which ``normalize`` converts to radians."""
    if not any(sign in text for sign in _DEGREE_SIGNS):
        return False
    marked = _marked(text)
    return any(sign in marked for sign in _DEGREE_SIGNS)


def _marked(text: str) -> str:
    """``text`` renamed and without its layout commands, a trigonometric function's argument
    in degrees converted to radians; its other degree signs still there."""
    s = text.strip()
    for old, new in _RENAME:
        s = s.replace(old, new)
    for tok in _DROP:
        if tok in s:
            s = s.replace(tok, "")
    return trig_degrees(s)


def trig_degrees(s: str) -> str:
    """A trigonometric function's argument with degree signs, in radians: ``\\sin 30^\\circ``
    -> ``\\sin(\\frac{30\\pi}{180})``, and in a bracketed argument each number with a sign
    (``\\cos(90^\\circ - 30^\\circ)``). Elsewhere a degree sign is left for ``normalize`` to
    drop: an answer ``30^\\circ`` is the number 30."""
    if not any(sign in s for sign in _DEGREE_SIGNS):
        return s
    out, pos = [], 0
    while (m := _TRIG.search(s, pos)) is not None:
        out.append(s[pos : m.end()])
        pos = at = m.end()
        while at < len(s) and s[at].isspace():
            at += 1
        if at < len(s) and s[at] in "({":
            close = closing_bracket(s, at)
            if close is None:
                break
            out.append(s[at] + _DEGREE_NUMBER.sub(_in_radians, s[at + 1 : close]) + s[close])
            pos = close + 1
        elif bare := _BARE_DEGREE_ARGUMENT.match(s, at):
            out.append("(" + _in_radians(bare) + ")")
            pos = bare.end()
    out.append(s[pos:])
    return "".join(out)


def _in_radians(m: re.Match) -> str:
    return f"\\frac{{{m.group(1).replace(' ', '')}\\pi}}{{180}}"


def closing_bracket(s: str, start: int) -> int | None:
    """Where the bracket that opens at ``start`` closes (brackets of any kind counted)."""
    depth = 0
    for i in range(start, len(s)):
        depth += (s[i] in "([{") - (s[i] in ")]}")
        if depth == 0:
            return i
    return None


def repeating_decimals(s: str) -> str:
    """``0.\\overline{3}`` -> ``\\frac{1}{3}``, ``1.2\\overline{45}`` -> ``\\frac{137}{110}``: the
    digits under the bar repeat forever. A bar over anything but digits after a decimal point
    (``\\overline{AB}``, a segment) is left as it is."""
    if "\\overline" not in s:
        return s
    return _REPEATING.sub(_repeating_value, s)


def _repeating_value(m: re.Match) -> str:
    whole, fixed, cycle = m.groups()
    if len(whole) + len(fixed) + len(cycle) > _REPEATING_DIGITS:
        return m.group(0)
    # 0.1(6) = (16 - 1) / 90: the digits through one cycle, less those before it, over as many
    # nines as the cycle has digits followed by as many zeros as the digits before it
    value = int(whole or "0") + Fraction(
        int(fixed + cycle) - int(fixed or "0"), (10 ** len(cycle) - 1) * 10 ** len(fixed)
    )
    if value.denominator == 1:
        return str(value.numerator)
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def normalize(text: str) -> str:
    """Cheap textual normalisation: also the cache key, so it must not change the meaning."""
    s = _marked(text)
    for tok in _DEGREE_SIGNS:
        if tok in s:
            s = s.replace(tok, "")
    s = repeating_decimals(s)
    s = _SHORT_FRAC.sub(_braced_frac, s)
    s = _SHORT_SQRT.sub(lambda m: "\\sqrt{" + m.group(1) + "}", s)
    s = _SHORT_LOG_BASE.sub(lambda m: "\\log_{" + m.group(1) + "}", s)
    s = _ESCAPED_SPACE.sub(" ", s)
    s = s.replace("\\%", "%").replace("−", "-").replace("\\infin", "\\infty")
    s = s.strip().rstrip(".").strip()
    for _ in range(3):
        m = _WRAPPED.match(s)
        if not m or not _balanced(m.group(1)):
            break
        s = m.group(1).strip()
    window = s[-_UNIT_TAIL_WINDOW:]
    tail = _UNIT_TAIL.search(window)
    if tail and len(s) - len(window) + tail.start() > 0:
        head = s[: len(s) - len(window) + tail.start()].strip()
        if not _TEXT_BEFORE.search(head):  # \text{A} \text{B} keeps its B
            s = head
            word = tail.group("unit").replace("~", " ").strip()
            scale = word.lower().removesuffix("s") in _SCALE_WORDS
            if scale and not (tail.group("inner") or tail.group("outer")):
                s = f"{head} {word}"  # 2.5 \text{ million} is 2.5 million, not 2.5
    s = _IN_SET.sub("", s)
    return " ".join(s.split())


#: the text-mode commands among those ``normalize`` unwraps: their letters are words
_TEXT_MODE = ("\\text{", "\\textbf{", "\\mbox{")


def in_text_mode(text: str) -> bool:
    """Whether the answer is written in a text-mode command, ``\\text{yes}``: then its letters
    are words, not a product of variables (``\\mathrm{}`` and ``\\mathbf{}`` are math fonts,
    of variables as well). ``normalize`` drops the command, so the verdict is keyed on this."""
    if "\\" not in text:
        return False
    s = _marked(text).strip().rstrip(".").strip()
    for _ in range(3):
        m = _WRAPPED.match(s)
        if not m or not _balanced(m.group(1)):
            return False
        if s.startswith(_TEXT_MODE):
            return True
        s = m.group(1).strip()
    return False


def _braced_frac(m: re.Match) -> str:
    a, b = (g if g.startswith("{") else "{" + g + "}" for g in m.groups())
    return "\\frac" + a + b


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += (c == "{") - (c == "}")
        if depth < 0:
            return False
    return depth == 0


def choice_letter(gt: str) -> str | None:
    """The letter when the ground truth is a multiple-choice answer such as ``B`` or ``(B)``."""
    m = _CHOICE.match(gt.strip())
    return m.group(1) if m else None


def pred_choice_letter(pred: str) -> str | None:
    """The letter the answer chooses; None when it names none, or more than one. After a
    parenthesised letter, only another parenthesised letter of the same case (``(A) (B)``)
    is a second choice: ``(B) I and III`` chooses B."""
    m = _CHOICE_PAREN.match(pred.strip())
    if m:
        letter = m.group(1)
        other = r"\(\s*[A-J]\s*\)" if letter.isupper() else r"\(\s*[a-j]\s*\)"
        return None if re.search(other, pred.strip()[m.end() :]) else letter.upper()
    m = _CHOICE_PRED.match(pred.strip())
    if m:
        return None if _ANOTHER_CHOICE.search(pred.strip(), m.end()) else m.group(1)
    m = re.match(r"^(?:option|answer|choice)\s*:?\s*\(?([A-J])\)?\.?$", pred.strip(), re.I)
    return m.group(1).upper() if m else None


def fast_number(s: str) -> tuple[Fraction, bool] | None:
    """Exact value of a plain number (int, decimal, e-notation, a/b, \\frac{a}{b}, a x 10^b),
    and whether it carried a percent sign. None when the text is anything else."""
    if len(s) > 200:
        return None
    pct = s.endswith("%")
    if pct:
        s = s[:-1].strip()
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    spaced, s = " " in s, s.replace(" ", "")
    try:
        if _PLAIN_NUMBER.match(s):
            if _HUGE_E.search(s) or (spaced and "e" in s.lower()):
                return None  # 3e - 2 is 3e minus 2: e-notation is written without spaces
            return Fraction(s), pct
        m = _FRAC.match(s)
        if m:
            value = Fraction(int(m.group(2)), int(m.group(3)))
            return (-value if m.group(1) == "-" else value), pct
        m = _SLASH.match(s)
        if m:
            return Fraction(int(m.group(1)), int(m.group(2))), pct
        m = _MIXED.match(s)
        if m and int(m.group(3)) < int(m.group(4)):
            value = int(m.group(2)) + Fraction(int(m.group(3)), int(m.group(4)))
            return (-value if m.group(1) == "-" else value), pct
        m = _SCI.match(s)
        if m:
            exp = int(m.group(2))
            if abs(exp) > 400:
                return None
            return Fraction(m.group(1)) * Fraction(10) ** exp, pct
    except (ValueError, ZeroDivisionError):
        return None
    return None


def drop_thousands(s: str) -> str:
    """A number written with thousands separators (``1,000``, ``-12,345.5``, ``1,000%``)
    without them; any other text as it is. For the parse: the grammar would read ``1,000`` as
    the list ``1, 0`` (so ``0, 1`` would match it, and ``10^3`` would not)."""
    body = s[:-1].rstrip() if s.endswith("%") else s
    return s.replace(",", "") if _THOUSANDS.match(body) else s


_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
         "eighteen", "nineteen")  # fmt: skip
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
#: a number from zero to ninety-nine in words at the start of an answer, alone or before a
#: unit or scale word (``five``, ``Twenty-one``, ``five million``, ``three cm``)
_NUMBER_WORD = re.compile(
    rf"^(?:({'|'.join(_TENS)})(?:[- ]({'|'.join(_ONES[1:10])}))?|({'|'.join(_ONES)}))(?![\w-])",
    re.IGNORECASE,
)


def number_words(text: str) -> str:
    """An answer that starts with a number from zero to ninety-nine in words, with that number
    in digits (``twenty-one`` -> ``21``, ``five million`` -> ``5 million``); other text as it
    is. Only the whole first word or hyphenated pair: ``oneself``, ``ninety-nines`` are kept."""
    m = _NUMBER_WORD.match(text)
    if m is None:
        return text
    tens, ones, alone = m.groups()
    if alone is not None:
        value = _ONES.index(alone.lower())
    else:
        value = 20 + 10 * _TENS.index(tens.lower()) + (_ONES.index(ones.lower()) if ones else 0)
    return f"{value}{text[m.end() :]}"


def scale_words(text: str) -> str:
    """``2.5 million`` -> ``2500000``; any other text as it is (for ground truths, whose
    other words are kept)."""
    m = _UNIT_WORDS.match(text)
    if m and m.group(2).lower().removesuffix("s") in _SCALE_WORDS:
        return strip_unit_words(text)
    return text


def strip_unit_words(pred: str) -> str:
    """``5 cm`` -> ``5`` when what precedes the words is a plain number; a scale word
    multiplies instead (``2.5 million`` -> ``2500000``, ``3 thousand`` -> ``3000``), and a
    lone ``x``, ``y`` or ``z`` is a variable, kept (``3 x`` stays a product)."""
    m = _UNIT_WORDS.match(pred)
    if not m or m.group(2) in _VARIABLES:
        return pred
    number = fast_number(m.group(1))
    if number is None:
        return pred
    word = m.group(2).lower()
    scale = _SCALE_WORDS.get(word, _SCALE_WORDS.get(word.removesuffix("s")))
    if scale is None:
        return m.group(1)
    value, percent = number
    if percent or m.end(2) != len(pred):
        return pred  # 5% million, 2 million^2, 2 million/s: no plain number
    value *= scale
    return (
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
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
    if _HUGE_E.search(s):
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
