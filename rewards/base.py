"""The verifier interface and the result types every domain shares.

A verifier sees only the answer already taken out of the response (the format gate runs first,
in the calling process) and the ground truth. It runs inside a killable worker process, so it
may be slow or even hang: the pool, not the verifier, enforces the time limit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, NamedTuple


class Verdict(NamedTuple):
    """What a verifier returns: a reward in [0, 1], and why it is not 1 when that is an error."""

    reward: float
    error: str | None = None
    detail: str | None = None


#: the errors that say the model's answer was wrong (no tags or box, an unreadable answer): a
#: failure like any other. Every other error (a timeout, a crash, a verifier's fault, a malformed
#: ground truth, ...) means the answer could not be scored; reports count those apart.
ANSWER_ERRORS = frozenset({"format", "parse"})


def is_unscorable(error: str | None) -> bool:
    """Whether a result's ``error`` says the answer could not be scored at all (as opposed to
    no error, or a wrong or unreadable answer): training and grading leave such answers out."""
    return error is not None and error not in ANSWER_ERRORS


@dataclass(slots=True)
class ScoreResult:
    """The result of scoring one response, as the Python API and the server return it."""

    reward: float
    format_ok: bool
    extracted: str | None
    error: str | None = None
    detail: str | None = None
    domain: str = ""
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Verifier(ABC):
    """One domain's rule. Subclasses live one per file under ``rewards/verifiers/``.

    ``cacheable`` verifiers are expensive enough that identical (normalised) answer and ground
    truth pairs are worth remembering; ``cache_key`` says what "identical" means for them.
    ``needs_answer``: an item with no ground truth (``answer`` null) is an ``answer`` error
    instead of a silent 0; a verifier that scores the response alone sets it False.
    ``answer_box``: the answer is boxed (a verifiable answer). A verifier of open-ended items
    (a reward model's client, for the recipe's non-verifiable data) sets it False: it is then
    given the whole text between the answer tags, and a response that boxes its answer is a
    format error, scored the minimum.
    """

    name: ClassVar[str] = ""
    cacheable: ClassVar[bool] = False
    needs_answer: ClassVar[bool] = True
    answer_box: ClassVar[bool] = True

    def cache_key(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Hashable:
        return (extracted, _freeze(answer))

    def bounded(self, extracted: str, answer: Any) -> bool:
        """True when this input provably takes microseconds (small fixed-cost work), so it
        may be verified in the calling process. Default: never; custom verifiers stay in
        the killable workers."""
        return False

    def check_answer(self, answer: Any) -> str | None:
        """Why ``answer``, an item's ground truth, could never be scored against, or None.
        Datasets are checked with it when they are loaded, before a run starts, so it must be
        cheap; the default checks nothing more than the scorer does for every domain (a null
        ground truth where one is needed, its size and depth)."""
        return None

    @abstractmethod
    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        """Score ``extracted`` against ``answer``; raise nothing the caller must handle."""


#: a NaN ground truth marks a missing value (a spreadsheet's empty cell), not an answer
NAN_TRUTH = (
    "ground truth: NaN is a missing value, not an answer; give the answer, or leave the item out"
)


def text_truth_problem(answer: Any, accepts_list: bool = False) -> str | None:
    """Why ``answer`` is no ground truth for a verifier that compares text: a string or a
    number is one (with ``accepts_list``, so is a non-empty list of them, the accepted
    answers); an object, a boolean or NaN (a missing value) would be compared as its
    ``str()``, a silent 0 at every draw (or a 1 for a model that writes ``True``)."""
    if accepts_list and isinstance(answer, (list, tuple)):
        if not answer:
            return "ground truth: an empty list of accepted answers"
        for a in answer:
            if problem := text_truth_problem(a):
                return problem.replace("expected", "expected in the list", 1)
        return None
    if isinstance(answer, float) and answer != answer:
        return NAN_TRUTH
    if isinstance(answer, str) or (
        isinstance(answer, (int, float)) and not isinstance(answer, bool)
    ):
        return None
    kind = "a boolean" if isinstance(answer, bool) else f"a {type(answer).__name__}"
    what = "a string or a number" + (", or a list of them," if accepts_list else "")
    return f"ground truth: {what} is expected, got {kind}"


def _freeze(value: Any) -> Hashable:
    """A hashable, order-stable stand-in for JSON-like ground truth (lists, dicts)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value
