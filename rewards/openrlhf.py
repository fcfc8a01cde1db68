"""OpenRLHF's remote-reward requests (``POST /get_reward``) turned into scoring items: where the
response starts in each decoded query, and what its label says."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from rewards import registry
from rewards.base import ScoreResult
from rewards.extract import THINK_OPEN, opened_think

#: end-of-sequence and padding markers OpenRLHF leaves on decoded queries (GLM ends a turn with
#: ``<|user|>`` or ``<|observation|>``; an OpenRLHF that does not remove padding leaves pad
#: tokens after them); stripped before the format gate
EOS_MARKERS = ("<|endoftext|>", "<|user|>", "<|observation|>", "<|pad|>", "<|im_end|>",
               "<|eot_id|>", "<|end_of_text|>", "</s>", "<eos>", "<pad>")  # fmt: skip
#: the shortest tail of a prompt that locates it in a query that does not hold it verbatim
MIN_PROMPT_TAIL = 16


def _prompt_end(query: str, prompt: str) -> int | None:
    """Where the response starts in ``query``: after ``prompt``, or None if it is not there.

    The decoded query need not start with the prompt text: padding or a BOS token can precede
    it, and a VLM's image placeholder is expanded to one token per patch. So the prompt is
    looked for anywhere, then its longest tail that the query holds (the text after the last
    image), if that tail is long enough and occurs in the prompt only at its end."""
    at = query.find(prompt)
    if at >= 0:
        return at + len(prompt)
    lo, hi = 0, len(prompt)  # the longest k with prompt[-k:] in query (shorter tails are too)
    while lo < hi:
        k = (lo + hi + 1) // 2
        if prompt[-k:] in query:
            lo = k
        else:
            hi = k - 1
    tail = prompt[len(prompt) - lo :]
    if lo < MIN_PROMPT_TAIL or prompt.count(tail) != 1:
        return None
    return query.find(tail) + lo


def openrlhf_item(query: str, prompt: str, label: Any, domain: str) -> dict[str, Any]:
    """The ``score`` item of one OpenRLHF sample; ``problem`` says why it cannot be scored."""
    if isinstance(label, str) and label.lstrip().startswith("{"):
        with contextlib.suppress(ValueError, RecursionError):
            label = json.loads(label)
    if isinstance(label, dict) and "answer" in label:
        item = {
            "domain": label.get("domain", domain),
            "answer": label["answer"],
            "options": label.get("options") or {},
        }
    else:
        item = {"domain": domain, "answer": label}
    options = item.get("options")
    glm = not isinstance(options, dict) or options.get("format", "glm") == "glm"
    end = _prompt_end(query, prompt) if prompt else None
    if end is not None:
        response = opened_think(prompt) + query[end:]
    elif glm and THINK_OPEN in query:  # a GLM response starts at its (only) <think>
        response = query[query.rfind(THINK_OPEN) :]
    elif prompt:  # the whole query would let the prompt's text be taken for the answer
        item["problem"] = "the prompt is not in the query, so the response cannot be found"
        return item
    else:
        response = query
    response = response.rstrip()
    stripped = True
    while stripped:
        stripped = False
        for marker in EOS_MARKERS:
            if response.endswith(marker):
                response, stripped = response[: -len(marker)].rstrip(), True
    item["response"] = response
    return item


def unscorable(item: dict[str, Any], default_domain: str) -> ScoreResult:
    domain = item["domain"]
    known = isinstance(domain, str) and domain in registry.domains()
    return ScoreResult(0.0, False, None, "request", item["problem"],
                       domain if known else default_domain)  # fmt: skip
