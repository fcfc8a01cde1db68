"""Prompt rendering and the think/answer budget logic shared by every rollout engine.

Pure functions, no Ray and no engine: the rollout worker renders an item once, and both
engines (vLLM and transformers) get the same text and the same token ids. The force-answer
decision is also here, so the vLLM and HF engines cannot drift apart on it.

Images stay *one* ``<|image|>`` placeholder per image in the rendered text. Expanding it to
the image's token count is the job of exactly one component downstream (our processor for the
HF engine, vLLM's own processor for vLLM); expanding here as well is the double-expansion bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlcs.data import Item

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
IMAGE_PLACEHOLDER = "<|image|>"
#: Appended to a rollout whose thinking budget ran out before it closed ``</think>``.
FORCE_ANSWER_TEXT = THINK_CLOSE + ANSWER_OPEN


def build_messages(item: Item | dict[str, Any], system: str | None = None) -> list[dict[str, Any]]:
    """Chat messages for an item: one image part per image, then the prompt text."""
    prompt = item["prompt"] if isinstance(item, dict) else item.prompt
    images = (item.get("images") or []) if isinstance(item, dict) else item.images
    if IMAGE_PLACEHOLDER in prompt:
        raise ValueError(
            f"item prompt already contains {IMAGE_PLACEHOLDER}; images are given in 'images' "
            "and placed by the chat template"
        )
    content: list[dict[str, Any]] = [{"type": "image"} for _ in images]
    content.append({"type": "text", "text": prompt})
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": content})
    return messages


def render_prompt(
    item: Item | dict[str, Any], tokenizer: Any, nothink: bool = False, system: str | None = None
) -> str:
    """The chat-template text of an item, ending with the assistant turn's opening.

    ``nothink`` renders GLM's ``/nothink`` mode: the template appends ``/nothink`` to the user
    turn and pre-fills an empty ``<think></think>``, so the model answers directly.
    """
    messages = build_messages(item, system)
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
    if nothink:
        kwargs["enable_thinking"] = False
    text = tokenizer.apply_chat_template(messages, **kwargs)
    n_images = len(messages[-1]["content"]) - 1
    if text.count(IMAGE_PLACEHOLDER) != n_images:
        raise ValueError(
            f"chat template produced {text.count(IMAGE_PLACEHOLDER)} {IMAGE_PLACEHOLDER} "
            f"placeholders for {n_images} images"
        )
    return text


@dataclass(frozen=True)
class Budget:
    """Token budgets of one rollout. ``nothink`` rollouts have only the answer budget."""

    max_think_tokens: int
    max_answer_tokens: int
    force_answer: bool = True
    nothink: bool = False

    @property
    def first_pass_tokens(self) -> int:
        """Tokens of the first generation pass: the thinking budget (the answer budget if
        ``nothink``, since the think block is already closed in the prompt)."""
        return self.max_answer_tokens if self.nothink else self.max_think_tokens


@dataclass(frozen=True)
class Continuation:
    """A second pass: append ``append_ids`` to what was generated, then generate up to
    ``max_tokens`` more. ``forced`` is True when ``append_ids`` is the force-answer text."""

    append_ids: tuple[int, ...]
    max_tokens: int
    forced: bool


def plan_continuation(
    generated: Sequence[int],
    finish_reason: str,
    budget: Budget,
    think_close_id: int,
    force_ids: Sequence[int],
) -> Continuation | None:
    """Decide whether a first-pass rollout needs a second pass.

    - It stopped on its own (``finish_reason != "length"``), or ran in ``nothink`` mode: done.
    - It closed ``</think>`` and ran out of tokens while answering: continue the answer for
      what is left of the answer budget (tokens after ``</think>`` count against it).
    - It never closed ``</think>``: with ``force_answer``, append ``</think><answer>`` and give
      it the full answer budget; without, it stays truncated.
    """
    if finish_reason != "length" or budget.nothink:
        return None
    if think_close_id in generated:
        close_at = list(generated).index(think_close_id)
        answered = len(generated) - close_at - 1
        left = budget.max_answer_tokens - answered
        return Continuation((), left, forced=False) if left > 0 else None
    if not budget.force_answer:
        return None
    return Continuation(tuple(force_ids), budget.max_answer_tokens, forced=True)


@dataclass(frozen=True)
class BudgetRule:
    """The same budgets as ``plan_continuation``, applied token by token inside one pass.

    An engine that can force tokens mid-generation (the HF engine) asks ``next_action`` before
    every token of a row and so needs no second pass: no second prefill of the prompt and its
    images. The rollouts it allows are exactly the two-pass ones: ``max_think_tokens`` in the
    first stretch, whatever they hold; if the model wrote ``</think>`` in it, more tokens until
    ``max_answer_tokens`` follow the close; if not, ``</think><answer>`` forced (or a stop
    without ``force_answer``) and then ``max_answer_tokens``.
    """

    budget: Budget
    think_close: int
    force_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.force_ids) != 2 or self.force_ids[0] != self.think_close:
            raise ValueError(
                f"force ids must be </think> ({self.think_close}) then <answer>, got {self.force_ids}"
            )

    @property
    def max_tokens(self) -> int:
        """The longest rollout the rule allows (the forced markers included)."""
        b = self.budget
        return b.max_answer_tokens if b.nothink else b.max_think_tokens + 2 + b.max_answer_tokens

    def next_action(self, generated: Sequence[int]) -> tuple[str, int | None]:
        """What a row that has ``generated`` these tokens does next: ``("sample", None)``,
        ``("force", token_id)`` or ``("stop", None)`` (the budget is spent; the row ends with
        finish reason ``length``)."""
        b, n = self.budget, len(generated)
        if b.nothink:
            return ("stop", None) if n >= b.max_answer_tokens else ("sample", None)
        think = b.max_think_tokens
        # A close the model wrote sits before the thinking budget; the forced one exactly at it.
        close = next(
            (i for i in range(min(n, think + 1)) if generated[i] == self.think_close), None
        )
        if close is None:
            if n < think:
                return ("sample", None)
            return ("force", self.think_close) if b.force_answer else ("stop", None)
        if close == think:  # forced: <answer> next, then the whole answer budget
            if n == think + 1:
                return ("force", self.force_ids[1])
            answered = n - think - 2
        else:
            if n < think:  # the first pass's tokens, whatever they are
                return ("sample", None)
            answered = n - close - 1
        return ("stop", None) if answered >= b.max_answer_tokens else ("sample", None)


def force_answer_ids(tokenizer: Any) -> list[int]:
    """Token ids of ``</think><answer>``; they must be single tokens so the model sees the
    exact markers it was trained on."""
    ids = tokenizer.encode(FORCE_ANSWER_TEXT, add_special_tokens=False)
    if len(ids) != 2:
        raise ValueError(f"{FORCE_ANSWER_TEXT!r} must be two tokens in this tokenizer, got {ids}")
    return list(ids)


def think_close_id(tokenizer: Any) -> int:
    ids = tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"{THINK_CLOSE!r} must be a single token in this tokenizer, got {ids}")
    return ids[0]


def expected_cost(item: Item | dict[str, Any], image_tokens: int = 256) -> float:
    """A cheap guess of a prompt's work, used to balance items across rollout workers."""
    prompt = item["prompt"] if isinstance(item, dict) else item.prompt
    images = (item.get("images") or []) if isinstance(item, dict) else item.images
    return float(len(prompt) + image_tokens * len(images))


def balance(costs: Sequence[float], k: int) -> list[list[int]]:
    """Split indices into ``k`` groups of near-equal total cost (longest first, greedy)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    groups: list[list[int]] = [[] for _ in range(k)]
    loads = [0.0] * k
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        j = min(range(k), key=lambda j: (loads[j], len(groups[j])))
        groups[j].append(i)
        loads[j] += costs[i]
    return [sorted(g) for g in groups]
