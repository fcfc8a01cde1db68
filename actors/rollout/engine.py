"""What a rollout engine takes and returns; the vLLM and HF engines both implement this.

The worker drives the think/answer passes; an engine only turns token prompts into sampled
tokens with their logprobs, so both engines produce the same trajectories. An engine that can
force tokens mid-generation (the HF engine) may instead take the worker's ``BudgetRule`` and
apply the same budgets in one pass: greedy rollouts are the same token for token, sampled ones
draw the tokens after the thinking budget from the request's generator instead of a second
pass's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class GenRequest:
    """One sampled sequence: a prompt (with images), tokens already decided, and a budget."""

    prompt_ids: list[int]
    max_tokens: int
    seed: int
    prompt_text: str = ""
    images: list[Any] = field(default_factory=list)
    mm_inputs: dict[str, Any] | None = None
    extra_ids: list[int] = field(default_factory=list)
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class GenResult:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    prompt_ids: list[int]
    #: set by an engine that applied the budgets itself: ``</think><answer>`` was forced
    forced_answer: bool = False
    #: where in ``token_ids`` the engine put tokens the budget chose (not sampled; logprob 0.0)
    forced_positions: list[int] = field(default_factory=list)


class Engine(Protocol):
    def encode(self, text: str, images: list[Any]) -> tuple[list[int], dict[str, Any] | None]:
        """Token ids of a rendered prompt (image placeholders expanded where the engine needs
        them), and the engine's multimodal inputs."""

    def generate(self, requests: list[GenRequest]) -> list[GenResult]: ...

    def stage_weights(self, kind: str, payload: Any, version: str) -> int: ...

    def commit_weights(self, version: str) -> dict[str, Any]: ...
