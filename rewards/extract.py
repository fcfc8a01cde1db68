"""The format gate: take the verifiable answer out of a response, or say why it cannot.

Three gates, chosen by the ``format`` option:
- ``glm`` (default): ``<think>…</think><answer>…</answer>`` with exactly one
  ``<|begin_of_box|>…<|end_of_box|>`` in the answer, as GLM-4.1V's released reward code requires;
- ``bare``: the response is the answer (for callers that already extracted it);
- ``boxed``: the content of the last ``\\boxed{…}``.

Everything here is a linear scan with ``str.find``: no backtracking regex. Markers are located
by hopping between '<' characters, so a 1 MB response with a handful of markers costs tens of
microseconds; text with thousands of '<' falls back to whole-text counts (milliseconds per MB).
"""

from __future__ import annotations

import re

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
BOX_OPEN, BOX_CLOSE = "<|begin_of_box|>", "<|end_of_box|>"
FORMATS = ("glm", "bare", "boxed")
_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE, BOX_OPEN, BOX_CLOSE)
_MAX_HOPS = 4096
_SHORT = 4096
_SPACE = re.compile(r"\s*")
_BOX_COMMANDS = ("\\boxed", "\\fbox")


_OPEN_ENDED_BOX = "a box in the answer of an open-ended item, which has no verifiable answer"


class FormatError(ValueError):
    """The response does not have the required shape; the message says what is wrong."""


def opened_think(prompt: str) -> str:
    """The think block a chat template opens at the end of the prompt (``<think>`` to think,
    ``<think></think>`` in GLM's /nothink mode), which belongs to the response; else ''."""
    at = prompt.rfind(THINK_OPEN)
    rest = prompt[at + len(THINK_OPEN) :].replace(THINK_CLOSE, "", 1)
    return prompt[at:] if at >= 0 and "<" not in rest else ""


def extract(response: str, fmt: str = "glm", box: bool = True) -> str:
    """Return the answer text, or raise ``FormatError`` with the reason. ``box=False`` is for
    open-ended (non-verifiable) items: the answer is the whole text between the answer tags
    (``glm``) or the whole response (``boxed``, ``bare``), and a box in it is a format error
    (the recipe gives such a response the minimum reward: a box marks a verifiable answer,
    which the item has none of)."""
    if not isinstance(response, str):
        raise FormatError(f"response must be a string, got {type(response).__name__}")
    if fmt == "glm":
        return _glm(response, box)
    if fmt == "bare":
        return response.strip()
    if fmt == "boxed" and not box:
        if last_boxed(response) is not None:
            raise FormatError(_OPEN_ENDED_BOX)
        return response.strip()
    if fmt == "boxed":
        found = last_boxed(response)
        if found is None:
            raise FormatError("no \\boxed{...} in the response")
        return found.strip()
    raise FormatError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def cheap_to_gate(response: str, fmt: str = "glm", limit: int = 65_536) -> bool:
    """Whether the gate costs well under a millisecond here: short text, or GLM-format text
    whose markers can be found by hopping between its few '<' characters."""
    if len(response) <= limit or fmt == "bare":
        return True
    return fmt == "glm" and _markers(response) is not None


def _markers(text: str) -> dict[str, list[int]] | None:
    """Positions of the six markers, found by hopping from '<' to '<' (a memchr each: a
    megabyte without markers costs microseconds). Every marker holds exactly one '<', at its
    start, so these are exactly the occurrences ``str.count`` would count. None when '<' is
    too common for hopping to stay cheap."""
    found: dict[str, list[int]] = {tag: [] for tag in _TAGS}
    pos, hops = text.find("<"), 0
    while pos >= 0:
        hops += 1
        if hops > _MAX_HOPS:
            return None
        for tag in _TAGS:
            if text.startswith(tag, pos):
                found[tag].append(pos)
                break
        pos = text.find("<", pos + 1)
    return found


def _inside(positions: list[int], tag: str, start: int, end: int) -> list[int]:
    return [p for p in positions if start <= p and p + len(tag) <= end]


def _glm(response: str, box: bool = True) -> str:
    text = response.strip()
    if len(text) <= _SHORT:  # whole-text counts are quickest on short text
        return _glm_scan(text, box)
    return _glm_hop(text, box)


def _glm_hop(text: str, box: bool = True) -> str:
    """The gate from marker positions: cost grows with the number of '<', not the length."""
    marks = _markers(text)
    if marks is None:
        return _glm_scan(text, box)
    if not text.startswith(THINK_OPEN):
        raise FormatError("response must start with <think>")
    if not marks[THINK_CLOSE]:
        raise FormatError("no </think>")
    if len(marks[THINK_OPEN]) != 1 or len(marks[THINK_CLOSE]) != 1:
        raise FormatError("nested or repeated <think> tags")
    at = _SPACE.match(text, marks[THINK_CLOSE][0] + len(THINK_CLOSE)).end()
    if not text.startswith(ANSWER_OPEN, at):
        raise FormatError("</think> must be followed by <answer>")
    if not text.endswith(ANSWER_CLOSE):
        raise FormatError("response must end with </answer>")
    start, end = at + len(ANSWER_OPEN), len(text) - len(ANSWER_CLOSE)
    if len(marks[ANSWER_OPEN]) != 1 or len(marks[ANSWER_CLOSE]) != 1:  # in the thinking too
        raise FormatError("nested or repeated <answer> tags")
    if text.find("\\", start, end) >= 0 and (problem := _boxed_problem(text, start, end)):
        raise FormatError(problem if box else _OPEN_ENDED_BOX)
    opens = _inside(marks[BOX_OPEN], BOX_OPEN, start, end)
    closes = _inside(marks[BOX_CLOSE], BOX_CLOSE, start, end)
    if not box:
        if opens or closes:
            raise FormatError(_OPEN_ENDED_BOX)
        return text[start:end].strip()
    if not opens and not closes:
        raise FormatError("no <|begin_of_box|>...<|end_of_box|> in the answer")
    if len(opens) != 1 or len(closes) != 1:
        raise FormatError(_box_count_problem(len(opens), len(closes)))
    box_start, box_end = opens[0] + len(BOX_OPEN), closes[0]
    if box_end < box_start:
        raise FormatError("<|end_of_box|> before <|begin_of_box|>")
    return text[box_start:box_end].strip()


def _box_count_problem(opens: int, closes: int) -> str:
    """What is wrong with an answer's box markers, given that they are not one of each."""
    if opens > 1 or closes > 1:
        return "more than one box in the answer"
    if opens:
        return "<|begin_of_box|> without <|end_of_box|> in the answer"
    return "<|end_of_box|> without <|begin_of_box|> in the answer"


def _boxed_problem(text: str, start: int, end: int) -> str | None:
    """Why ``text[start:end]`` holds a TeX box, or None: ``\\boxed{`` or ``\\fbox{`` (which
    ``last_boxed`` reads as a box too), spaces before the brace allowed (TeX ignores them:
    ``\\boxed {1}`` is a box too), or the command with no brace, which boxes the token after
    it (``\\boxed 1``). ``\\boxedx`` is another command. Linear: each search starts past the
    last."""
    for command in _BOX_COMMANDS:
        at = text.find(command, start, end)
        while at >= 0:
            after = at + len(command)
            if after < end and text[after].isascii() and text[after].isalpha():
                at = text.find(command, after, end)
                continue
            brace = _SPACE.match(text, after, end).end()
            if brace < end and text[brace] == "{":
                return f"{command}{{ inside <answer>; use the box markers"
            return f"{command} inside <answer> (TeX boxes the token after it); use the box markers"
    return None


def _glm_scan(text: str, box: bool = True) -> str:
    """The same gate by whole-text counts: for text with very many '<'."""
    if not text.startswith(THINK_OPEN):
        raise FormatError("response must start with <think>")
    close = text.find(THINK_CLOSE)
    if close < 0:
        raise FormatError("no </think>")
    if text.count(THINK_OPEN) != 1 or text.count(THINK_CLOSE) != 1:
        raise FormatError("nested or repeated <think> tags")
    rest = text[close + len(THINK_CLOSE) :].lstrip()
    if not rest.startswith(ANSWER_OPEN):
        raise FormatError("</think> must be followed by <answer>")
    if not rest.endswith(ANSWER_CLOSE):
        raise FormatError("response must end with </answer>")
    body = rest[len(ANSWER_OPEN) : -len(ANSWER_CLOSE)]
    if text.count(ANSWER_OPEN) != 1 or text.count(ANSWER_CLOSE) != 1:  # in the thinking too
        raise FormatError("nested or repeated <answer> tags")
    if problem := _boxed_problem(body, 0, len(body)):
        raise FormatError(problem if box else _OPEN_ENDED_BOX)
    opens, closes = body.count(BOX_OPEN), body.count(BOX_CLOSE)
    if not box:
        if opens or closes:
            raise FormatError(_OPEN_ENDED_BOX)
        return body.strip()
    if opens == 0 and closes == 0:
        raise FormatError("no <|begin_of_box|>...<|end_of_box|> in the answer")
    if opens != 1 or closes != 1:
        raise FormatError(_box_count_problem(opens, closes))
    start = body.find(BOX_OPEN) + len(BOX_OPEN)
    end = body.find(BOX_CLOSE)
    if end < start:
        raise FormatError("<|end_of_box|> before <|begin_of_box|>")
    return body[start:end].strip()


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced."""
    at = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if at < 0:
        return None
    start = text.find("{", at) + 1
    depth = 1
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None
