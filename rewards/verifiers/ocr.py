"""OCR: ``1 - edit_distance / max(len)`` with all whitespace removed; two empty strings score 1.

Both sides are put in Unicode NFC first, so an accent typed as a combining mark (``e`` +
U+0301) is the same character as the precomposed ``é``, and invisible format characters
(zero-width spaces and joiners, soft hyphens, byte-order marks, direction marks: category Cf)
are removed along with the whitespace. NFC only: NFKC would also fold ligatures, full-width
forms and superscripts (``x²`` into ``x2``), which are different transcriptions.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

import Levenshtein

from rewards.base import Verdict, Verifier, text_truth_problem

#: the format characters (Cf), for ``str.translate`` to delete. Unicode places them in planes
#: 0, 1 and 14 only (2 and 3 hold ideographs, 15 and 16 private use): scanning those takes
#: milliseconds, once, where a per-character check would cost that on every long answer
_FORMAT_CHARS = dict.fromkeys(
    c
    for span in (range(0x20000), range(0xE0000, 0xE1000))
    for c in span
    if unicodedata.category(chr(c)) == "Cf"
)


def _squash(text: str) -> str:
    if not text.isascii():
        text = unicodedata.normalize("NFC", text).translate(_FORMAT_CHARS)
    return "".join(text.split())


class OCRVerifier(Verifier):
    name = "ocr"

    def bounded(self, extracted: str, answer: Any) -> bool:
        return len(extracted) * len(str(answer)) <= 4_000_000

    def check_answer(self, answer: Any) -> str | None:
        return text_truth_problem(answer)

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        if problem := text_truth_problem(answer):
            return Verdict(0.0, "answer", problem)
        a, g = _squash(extracted), _squash(str(answer))
        longest = max(len(a), len(g))
        if longest == 0:
            return Verdict(1.0)
        return Verdict(1.0 - Levenshtein.distance(a, g) / longest)
