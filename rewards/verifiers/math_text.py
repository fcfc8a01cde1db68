"""Math answers as text: the normalisation both sides of a comparison get (degree signs,
spacing commands, wrappers, repeating decimals, short LaTeX forms), the answer forms read
before any parse (choice letters, number words, scale and unit words, thousands separators),
and the exact fast path for plain numbers (integers, decimals, fractions, scientific notation)
that needs no SymPy. ``math_parse`` turns what is left into SymPy objects, with its guards.
"""

from __future__ import annotations

import re
from fractions import Fraction

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
HUGE_E = re.compile(r"\d\.?[eE][+-]?0*\d{5}")
_SCI = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:\\times|\\cdot|\*|x)\s*10\^\{?([+-]?\d+)\}?$"
)
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
            if HUGE_E.search(s) or (spaced and "e" in s.lower()):
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
