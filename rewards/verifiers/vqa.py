"""VQA and counting: normalised exact match; a counting answer compares as an integer.

The ground truth may be a list of accepted answers. Normalisation drops case, articles,
surrounding punctuation and extra spaces, and reads number words ("three") as digits; a truth
that is only an article ("A" as an option letter) keeps its articles, and an answer that
normalises to nothing matches nothing. A truth that is an integer is matched by an answer
that states that integer, alone or followed by a few words that name what it counts
(``3 apples``).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from typing import Any

from rewards.base import Verdict, Verifier, text_truth_problem

_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}
_ARTICLES = {"a", "an", "the"}
_PUNCT = re.compile(r"[^\w\s.%-]|(?<!\d)\.|\.(?!\d)")
_INTEGER = re.compile(r"^[+-]?\d+(?:\.0+)?$")
_THOUSANDS_SEP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # 3,000 -> 3000; 1,2 stays two numbers
MAX_CHARS = 10_000


def normalize_text(text: str, keep_articles: bool = False) -> str:
    """Lower-case words, no articles or punctuation, number words as digits, no thousands
    separators."""
    text = _THOUSANDS_SEP.sub("", text.lower().replace("\\text{", " "))
    words = _PUNCT.sub(" ", text).split()
    drop = set() if keep_articles else _ARTICLES
    return " ".join(_NUMBER_WORDS.get(w, w) for w in words if w not in drop)


def normalize_pair(pred: str, gt: str) -> tuple[str, str]:
    """The answer and the truth normalised alike; articles are kept when the truth is nothing
    but one (the option letter ``A``, or ``The``), which would otherwise be matched by an empty
    answer."""
    g = normalize_text(gt)
    if g:
        return normalize_text(pred), g
    return normalize_text(pred, keep_articles=True), normalize_text(gt, keep_articles=True)


def as_integer(text: str) -> int | None:
    """The integer a counting answer states, or None if it is not one integer."""
    t = normalize_text(text)
    if _INTEGER.match(t):
        return int(float(t)) if "." in t else int(t)
    return None


#: a count and the words that name what it counts, normalised: ``3 apples``, ``3 red cars``
_COUNTED = re.compile(r"^([+-]?\d+(?:\.0+)?)((?: [a-z]{2,}){1,3})$")
#: words after a count that change what it states, or hedge it: ``3 or more``, ``3 at least``,
#: ``3 dozen``, ``3 thousand``, ``3 halves``, ``3 other cars``; then it is no count of
#: the things named
_NOT_COUNTED = frozenset({
    "or", "and", "nor", "but", "not", "no", "than", "more", "less", "fewer", "least", "most",
    "over", "under", "above", "below", "about", "around", "approximately", "approx", "roughly",
    "nearly", "almost", "maybe", "perhaps", "possibly", "probably", "likely", "ish", "plus",
    "minus", "to", "up", "per", "other", "others", "another", "additional", "extra", "else",
    "dozen", "dozens", "score", "grand", "hundred", "hundreds", "thousand", "thousands",
    "million", "millions", "billion", "billions", "trillion", "trillions", "percent",
    "percentage", "half", "halves", "quarter", "quarters", "third", "thirds", "fourth",
    "fourths", "fifth", "fifths", "tenth", "tenths", "thirty", "forty", "fifty", "sixty",
    "seventy", "eighty", "ninety",
})  # fmt: skip


def counted_integer(text: str) -> int | None:
    """The integer a counting answer states with the name of what it counts (``3 apples``,
    ``three red cars``): one integer first, then one to three plain words (letters only, two
    or more each) that neither hedge nor scale it. None for anything else: ``3 apples and 2
    pears``, ``3 or more``, ``3 dozen``, ``about 3``."""
    m = _COUNTED.match(normalize_text(text))
    if m is None or any(w in _NOT_COUNTED for w in m.group(2).split()):
        return None
    return as_integer(m.group(1))


def truth_problem(answer: Any) -> str | None:
    """Why ``answer`` is no VQA ground truth, or None: not text (``text_truth_problem``), or
    text that no answer can match, since an answer that normalises to nothing matches nothing
    (``""``, ``"."``: an empty cell exported as text)."""
    if problem := text_truth_problem(answer, accepts_list=True):
        return problem
    if not any(normalize_text(a, keep_articles=True) for a in _accepted(answer)):
        return "ground truth: no words, so no answer can match it (an empty cell?)"
    return None


def _accepted(answer: Any) -> list[str]:
    if isinstance(answer, (list, tuple)):
        return [str(a) for a in answer]
    return [str(answer)]


class VQAVerifier(Verifier):
    name = "vqa"
    cacheable = True

    def cache_key(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Hashable:
        # the length limit applies to the text as written, and normalising can shorten it
        # ("a a a ... yes" is "yes"): without the flag, a refused answer's verdict would be
        # served to the short answer it normalises to, and the other way round
        too_long = len(extracted) > MAX_CHARS
        # articles kept: a truth that is one ("A") is compared with them
        return (
            too_long,
            normalize_text(extracted, keep_articles=True),
            tuple(normalize_text(a, keep_articles=True) for a in _accepted(answer)),
        )

    def bounded(self, extracted: str, answer: Any) -> bool:
        return len(extracted) <= 1024 and len(str(answer)) <= 2048

    def check_answer(self, answer: Any) -> str | None:
        return truth_problem(answer)

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        if problem := truth_problem(answer):
            return Verdict(0.0, "answer", problem)
        if len(extracted) > MAX_CHARS:
            return Verdict(0.0, "parse", f"answer longer than {MAX_CHARS} characters")
        for gt in _accepted(answer):
            g_int = as_integer(gt)
            if g_int is not None:
                # the truth 3 is matched by 3, three, 3.0, and 3 apples
                if g_int in (as_integer(extracted), counted_integer(extracted)):
                    return Verdict(1.0)
                continue
            pred, g = normalize_pair(extracted, gt)
            if pred and pred == g:  # an answer that is no words at all matches nothing
                return Verdict(1.0)
        return Verdict(0.0)
