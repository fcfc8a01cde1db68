"""Answer extraction, domain verifiers, the killable process pool and the reward server.

Imports nothing of the rest of the project, nor Ray, torch or vLLM.

    >>> import rewards
    >>> rewards.score("math", "<think>…</think><answer><|begin_of_box|>1/2<|end_of_box|></answer>", "0.5").reward
    1.0

The module-level functions share one lazily started ``RewardScorer`` (a pool of one worker
process per core); ``configure`` replaces it.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable
from typing import Any

from rewards.base import ScoreResult, Verdict, Verifier
from rewards.extract import FormatError, extract
from rewards.registry import UnknownDomain, domains, register
from rewards.scoring import DEFAULT_TIMEOUT_S, RewardScorer, answer_problem

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FormatError",
    "RewardScorer",
    "ScoreResult",
    "UnknownDomain",
    "Verdict",
    "Verifier",
    "answer_problem",
    "configure",
    "counters",
    "domains",
    "extract",
    "get_scorer",
    "register",
    "score",
    "score_batch",
]

_default: RewardScorer | None = None
_lock = threading.Lock()


def get_scorer() -> RewardScorer:
    global _default
    with _lock:
        if _default is None:
            _default = RewardScorer()
        return _default


def configure(**kwargs: Any) -> RewardScorer:
    """Replace the shared scorer, e.g. ``configure(workers=4, timeout_s=2.0)``."""
    global _default
    with _lock:
        old, _default = _default, RewardScorer(**kwargs)
    if old is not None:
        old.close()
    return _default


def score(domain: str, response: str, answer: Any, **options: Any) -> ScoreResult:
    """Score one response. Options: ``format`` (glm|bare|boxed), ``rel_tol``,
    ``iou_threshold``, ``partial_credit``, ``timeout_s``, and any a custom verifier reads."""
    return get_scorer().score(domain, response, answer, **options)


def score_batch(items: Iterable[Any], timeout_s: float | None = None) -> list[ScoreResult]:
    """Score ``{domain, response, answer, options?}`` items (or tuples) in parallel."""
    return get_scorer().score_batch(items, timeout_s=timeout_s)


def counters() -> dict[str, dict[str, int]]:
    return get_scorer().counters()


@atexit.register
def _shutdown() -> None:
    if _default is not None:
        _default.close()
