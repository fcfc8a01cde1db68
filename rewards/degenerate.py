"""Degenerate thinking: a repetition loop, or heavy mixing of languages.

The recipe's format rule: such responses get a low reward whatever their answer (a model
rewarded for a right answer after a loop learns to loop). Applied to the thinking of the
``glm`` format only, the part a loop fills and where languages mix; the answer is the task's
(an OCR transcription may repeat a cell a hundred times, or be in another language than the
reasoning). The score is then 0 with ``error="format"`` and the measured share in ``detail``.

Repetition is measured on whitespace-separated words, a run of over 16 characters counting
as pieces of 8 (so ``ababab…`` and Chinese, Japanese or Korean text, written without spaces,
repeat too); the language mix on runs of letters, LaTeX commands and single CJK characters.

- **Repetition**: the share of the thinking's 4-word phrases that repeat one earlier in it.
  Natural text stays under 0.1, a loop goes to 0.9 and above; thinking of under 48 phrases
  is not judged. Over ``max_repetition`` (0.5 by default) it is degenerate.
- **Language mix**: the share of the thinking's words written in other scripts than its main
  one (Latin, CJK, Hangul, Cyrillic, Arabic, ...). Single letters (variables), LaTeX commands,
  digits and Greek (mathematics) are not counted; thinking of under 24 counted words is not
  judged. Over ``max_language_mix`` (0.3 by default) it is degenerate.

Either limit at 1 turns its check off. Only the last 32 KiB of the thinking is read, so the
check costs a few milliseconds at most, whatever the response's size.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Mapping
from typing import Any

from rewards.extract import THINK_CLOSE, THINK_OPEN

DEFAULT_MAX_REPETITION = 0.5
DEFAULT_MAX_LANGUAGE_MIX = 0.3
OPTIONS = {"max_repetition": DEFAULT_MAX_REPETITION, "max_language_mix": DEFAULT_MAX_LANGUAGE_MIX}
PHRASE = 4
MIN_PHRASES = 48
MIN_MIX_WORDS = 24
WINDOW = 32 * 1024

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_WORD = re.compile(rf"[{_CJK}]|\\[A-Za-z]+|[^\W\d_{_CJK}]+|\d+")
_CJK_CHAR = re.compile(rf"[{_CJK}]")
_LONG, _PIECE = 16, 8
#: scripts that count as one: Japanese writes kanji and kana together
_SAME_SCRIPT = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "CJK": "CJK"}


def thinking(response: str) -> str:
    """The text between ``<think>`` and ``</think>`` of a response the glm gate passed."""
    text = response.strip()
    start = len(THINK_OPEN) if text.startswith(THINK_OPEN) else 0
    end = text.find(THINK_CLOSE, start)
    return text[start : end if end >= 0 else len(text)]


def _words(text: str) -> list[str]:
    """Whitespace-separated words, a run of over 16 characters as pieces of 8 (text without
    spaces: CJK, or a loop of one token). ``str.split`` keeps this a few microseconds a KB."""
    words = text[-WINDOW:].split()
    if not words or max(map(len, words)) <= _LONG:
        return words
    out: list[str] = []
    for w in words:
        if len(w) > _LONG:
            out.extend(w[i : i + _PIECE] for i in range(0, len(w), _PIECE))
        else:
            out.append(w)
    return out


def repetition(words: list[str]) -> float | None:
    """The share of 4-word phrases that repeat an earlier one; None when too few to judge."""
    total = len(words) - PHRASE + 1
    if total < MIN_PHRASES:
        return None
    distinct = len(set(zip(*(words[k:] for k in range(PHRASE)), strict=False)))
    return 1.0 - distinct / total


def _script(word: str) -> str | None:
    if word.isascii():
        return "LATIN" if word.isalpha() and len(word) > 1 else None
    if word[0] == "\\" or word.isdigit() or (len(word) == 1 and not _CJK_CHAR.match(word)):
        return None
    name = unicodedata.name(word[0], "").split(" ", 1)[0]
    if name == "GREEK" or not name:
        return None
    return _SAME_SCRIPT.get(name, name)


def language_mix(text: str) -> tuple[float, str] | None:
    """The share of ``text``'s counted words outside its main script, and that script; None
    when too few words count to judge. Words here are runs of letters, LaTeX commands and
    single CJK characters; text of ASCII only is one script, at no cost."""
    if text.isascii():
        return None
    words = _WORD.findall(text[-WINDOW:])
    scripts = Counter(s for w in words if (s := _script(w)) is not None)
    total = sum(scripts.values())
    if total < MIN_MIX_WORDS:
        return None
    main, count = scripts.most_common(1)[0]
    return 1.0 - count / total, main


_REPETITIVE, _MIXED = "repetitive thinking: ", "mixed-language thinking: "


def is_degenerate(detail: str | None) -> bool:
    """Whether a result's ``detail`` is this check's (a format error for degenerate thinking,
    not for missing tags or a missing box)."""
    return detail is not None and detail.startswith((_REPETITIVE, _MIXED))


def problem(response: str, limits: Mapping[str, Any]) -> str | None:
    """Why the thinking of a glm-format response is degenerate, or None. ``limits`` holds
    ``max_repetition`` and ``max_language_mix``."""
    max_rep = float(limits.get("max_repetition", DEFAULT_MAX_REPETITION))
    max_mix = float(limits.get("max_language_mix", DEFAULT_MAX_LANGUAGE_MIX))
    if max_rep >= 1.0 and max_mix >= 1.0:
        return None
    think = thinking(response)
    if max_rep < 1.0 and (share := repetition(_words(think))) is not None and share > max_rep:
        return (
            f"{_REPETITIVE}{share:.0%} of its {PHRASE}-word phrases repeat earlier "
            f"ones (max_repetition {max_rep:g})"
        )
    if max_mix < 1.0 and (mix := language_mix(think)) is not None and mix[0] > max_mix:
        return (
            f"{_MIXED}{mix[0]:.0%} of its words are not in its main script, "
            f"{mix[1].title()} (max_language_mix {max_mix:g})"
        )
    return None
