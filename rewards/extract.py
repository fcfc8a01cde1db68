"""The format gate: take the verifiable answer out of a response, or say why it cannot.

Three gates, chosen by the ``format`` option:
- ``glm`` (default): ``<think>…</think><answer>…</answer>`` with exactly one
  ``<|begin_of_box|>…<|end_of_box|>`` in the answer, as GLM-4.1V's released reward code requires;
- ``bare``: the response is the answer (for callers that already extracted it);
- ``boxed``: the content of the last ``\\boxed{…}``.

Everything here is a linear scan with ``str.find``: no backtracking regex, so a 1 MB response
costs about a millisecond in the calling process.
"""

from __future__ import annotations

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
BOX_OPEN, BOX_CLOSE = "<|begin_of_box|>", "<|end_of_box|>"
FORMATS = ("glm", "bare", "boxed")


class FormatError(ValueError):
    """The response does not have the required shape; the message says what is wrong."""


def extract(response: str, fmt: str = "glm") -> str:
    """Return the answer text, or raise ``FormatError`` with the reason."""
    if not isinstance(response, str):
        raise FormatError(f"response must be a string, got {type(response).__name__}")
    if fmt == "glm":
        return _glm(response)
    if fmt == "bare":
        return response.strip()
    if fmt == "boxed":
        found = last_boxed(response)
        if found is None:
            raise FormatError("no \\boxed{...} in the response")
        return found.strip()
    raise FormatError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _glm(response: str) -> str:
    text = response.strip()
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
    if ANSWER_OPEN in body or ANSWER_CLOSE in body:
        raise FormatError("nested or repeated <answer> tags")
    if "\\boxed{" in body:
        raise FormatError("\\boxed{ inside <answer>; use the box markers")
    opens, closes = body.count(BOX_OPEN), body.count(BOX_CLOSE)
    if opens == 0 and closes == 0:
        raise FormatError("no <|begin_of_box|>...<|end_of_box|> in the answer")
    if opens != 1 or closes != 1:
        raise FormatError("more than one box in the answer")
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
