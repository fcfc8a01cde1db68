"""``score`` and ``score_batch``: the format gate and the cache in the calling process, the
verifiers in the killable worker pool, and counters for every kind of failure.

Small batches of items whose verifier declares them ``bounded`` (short OCR strings, a few
boxes, one small action: work with a proven small upper bound) are verified right here, which
saves a process round-trip on the single-item latency path; everything else, and every custom
verifier, goes to the killable workers.

Responses over ``gate_in_caller_max`` characters (64 Ki) whose gate would not be cheap here
(thousands of '<' to hop over, or a ``\\boxed{}`` to brace-match) are gated in a worker
instead, so a megabyte of text never holds up the caller's thread (the server's event loop).

An answer (the box content) over ``max_answer_chars`` (64 Ki characters; a dense page of OCR
is about 10 Ki) is a parse error before any verifier sees it, and is not echoed back.

The cache key is (verifier, normalised answer, normalised ground truth, options). GRPO scores
groups of rollouts of one prompt, so identical answers are common; within one batch each
distinct key is verified once. Only deterministic outcomes are cached: a timeout or a crash
may depend on load, so those are always recomputed.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from rewards import degenerate, registry
from rewards.base import ScoreResult
from rewards.extract import FORMATS, FormatError, cheap_to_gate, extract
from rewards.pool import WorkerPool
from rewards.pool_worker import Outcome, run_one

DEFAULT_TIMEOUT_S = 5.0
_CACHEABLE_ERRORS = (None, "parse", "answer")
#: counter name for each error kind; anything else counts as ``errors``
_ERROR_COUNTERS = {
    "timeout": "timeouts",
    "parse": "parse_errors",
    "format": "format_failures",
    "crash": "crashes",
}


_UNCACHED = "<uncached>"


def _resolve(future: asyncio.Future, result: Any) -> None:
    if not future.done():
        future.set_result(result)


class _Plan:
    """One batch on its way: results so far, and the distinct tasks still to verify."""

    __slots__ = ("results", "waiting", "info", "tasks", "bounded", "inline", "pooled")

    def __init__(self) -> None:
        self.results: list[ScoreResult | None] = []
        self.waiting: dict[Hashable, list[int]] = {}  # one task per key, in task order
        self.info: dict[Hashable, tuple[str, str]] = {}
        self.tasks: list[tuple] = []
        self.bounded: list[bool] = []
        self.inline: dict[int, Outcome] = {}
        self.pooled: list[tuple] = []


#: how deep a ground truth may nest (a list of boxes is 2; an action object 2 or 3)
MAX_TRUTH_DEPTH = 16


def _truth_problem(answer: Any, max_chars: int) -> str | None:
    """Why a ground truth cannot be used (too long, nested too deep), or None."""
    stack, seen = [(answer, 1)], 0
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, tuple, dict)):
            if depth > MAX_TRUTH_DEPTH:
                return f"ground truth nested deeper than {MAX_TRUTH_DEPTH}"
            children = node.values() if isinstance(node, dict) else node
            stack.extend((c, depth + 1) for c in children)
        elif isinstance(node, str):
            seen += len(node)
        if seen > max_chars:
            return f"ground truth longer than {max_chars} characters"
    return None


def answer_problem(domain: str, answer: Any, max_chars: int = 65_536) -> str | None:
    """Why an item's ground truth could never be scored by its domain's verifier (none, too
    long or deep, malformed for the domain: ``Verifier.check_answer``), or None. Cheap: for
    checking datasets when they are loaded, so that a bad item stops the run before it starts
    instead of being left out of training as unscorable at every draw."""
    try:
        verifier = registry.load(registry.path_for(domain))
    except registry.UnknownDomain:
        return f"no verifier for domain {_short(domain)}; known: {', '.join(registry.domains())}"
    if answer is None:
        return "no ground truth (answer is null)" if verifier.needs_answer else None
    return _truth_problem(answer, max_chars) or verifier.check_answer(answer)


#: the built-in options: (smallest, largest or None, whether the largest is excluded)
_NUMBER_OPTIONS = {
    "rel_tol": (0.0, None, False),
    "iou_threshold": (0.0, 1.0, True),  # IoU > 1 never holds, IoU > -0.1 always
    "point_radius": (0.0, None, False),
    "max_repetition": (0.0, 1.0, False),
    "max_language_mix": (0.0, 1.0, False),
    "position_shaping": (0.0, 1.0, True),
}
_BOOL_OPTIONS = ("partial_credit", "penalize_extra_boxes")


def option_problem(options: Mapping[str, Any]) -> str | None:
    """What is wrong with a built-in option's value (``iou_threshold=None``, ``rel_tol="x"``,
    ``partial_credit="false"``, an unknown ``format``), or None. Such an item is a ``request``
    error: a verifier would raise on it, or worse, read ``"false"`` as true."""
    fmt = options.get("format", "glm")
    if fmt not in FORMATS:
        return f"option 'format' must be one of {', '.join(FORMATS)}, got {_short(fmt)}"
    for name, (low, high, high_open) in _NUMBER_OPTIONS.items():
        if name not in options:
            continue
        value = options[name]
        number = _as_number(value)
        if (
            number is None
            or number < low
            or (high is not None and (number >= high if high_open else number > high))
        ):
            if high is None:
                above = f"of at least {low:g}"
            else:
                above = f"from {low:g} to {'below ' if high_open else ''}{high:g}"
            return f"option {name!r} must be a number {above}, got {_short(value)}"
    for name in _BOOL_OPTIONS:
        if name in options and not isinstance(options[name], bool):
            return f"option {name!r} must be true or false, got {_short(options[name])}"
    if options.get("partial_credit") is True and _as_number(options.get("position_shaping", 0)):
        return "options 'partial_credit' and 'position_shaping' do not go together: choose one"
    if "timeout_s" in options:
        return timeout_problem(options["timeout_s"])
    return None


def timeout_problem(timeout_s: Any) -> str | None:
    """What is wrong with a ``timeout_s`` (not a number, 0 or less, NaN, inf), or None: the
    pool would time out every item at once, or wait for ever on a hung verifier."""
    number = _as_number(timeout_s)
    if number is None or number <= 0:
        return (
            f"option 'timeout_s' must be a finite number of seconds above 0, got "
            f"{_short(timeout_s)}"
        )
    return None


def _as_number(value: Any) -> float | None:
    """A finite number, or a string of one (as ``float`` reads it); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _item_fields(item: Any) -> tuple[str, str, Any, Mapping[str, Any]]:
    if isinstance(item, Mapping):
        return item["domain"], item["response"], item["answer"], item.get("options") or {}
    domain, response, answer, *rest = item
    return domain, response, answer, (rest[0] if rest else {}) or {}


def counted_domain(result: ScoreResult) -> str:
    """The domain a result is counted under: a name a client made up counts as ``unknown``,
    so that counters and metric labels stay as few as the registered domains, and an item
    whose fields cannot be read (no ``domain`` key, too short a tuple, options that are no
    mapping, not an item at all) counts as ``?``, its result's ``domain`` left empty."""
    if result.error == "domain":
        return "unknown"
    return result.domain or "?"


class RewardScorer:
    """Owns one worker pool, one cache and one set of counters. Thread-safe."""

    def __init__(
        self,
        workers: int | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        defaults: Mapping[str, Any] | None = None,
        cache_size: int = 200_000,
        memory_limit_mb: int = 4096,
        custom_domains: Mapping[str, str] | None = None,
        inline_max: int = 16,
        max_answer_chars: int = 65_536,
        gate_in_caller_max: int = 65_536,
        max_timeout_s: float | None = None,
    ) -> None:
        for domain, path in (custom_domains or {}).items():
            registry.register(domain, path)
        if problem := timeout_problem(timeout_s):
            raise ValueError(f"RewardScorer: {problem}")
        self.timeout_s = float(timeout_s)
        if max_timeout_s is not None and (problem := timeout_problem(max_timeout_s)):
            raise ValueError(f"RewardScorer max_timeout_s: {problem}")
        #: the most any item may take, whatever its own or its batch's timeout_s asks (a
        #: server's callers cannot hold its workers longer than it allows)
        self.max_timeout_s = None if max_timeout_s is None else float(max_timeout_s)
        self.inline_max = inline_max
        self.max_answer_chars = max_answer_chars
        self.gate_in_caller_max = gate_in_caller_max
        self.defaults = {"format": "glm", **(defaults or {})}
        problem = option_problem(self.defaults)
        if problem:
            raise ValueError(f"RewardScorer defaults: {problem}")
        self.pool = WorkerPool(workers, memory_limit_mb=memory_limit_mb)
        self._cache: OrderedDict[Hashable, Outcome] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def score(self, domain: str, response: str, answer: Any, **options: Any) -> ScoreResult:
        timeout_s = options.pop("timeout_s", None)
        return self.score_batch([(domain, response, answer, options)], timeout_s=timeout_s)[0]

    def score_batch(
        self, items: Iterable[Any], timeout_s: float | None = None
    ) -> list[ScoreResult]:
        """Score many items in parallel; each gets at most ``timeout_s`` in a worker."""
        plan = self._plan(items, timeout_problem(timeout_s) if timeout_s is not None else None)
        outcomes = self.pool.run(plan.pooled, self._limits(plan, timeout_s)) if plan.pooled else []
        return self._complete(plan, outcomes)

    async def score_batch_async(
        self, items: Iterable[Any], timeout_s: float | None = None
    ) -> list[ScoreResult]:
        """As ``score_batch``, awaiting the pool without holding a thread (for the server)."""
        plan = self._plan(items, timeout_problem(timeout_s) if timeout_s is not None else None)
        outcomes: list[Outcome] = []
        if plan.pooled:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[list[Outcome]] = loop.create_future()

            def done(result: list[Outcome]) -> None:
                loop.call_soon_threadsafe(_resolve, future, result)

            self.pool.submit(plan.pooled, self._limits(plan, timeout_s), done)
            outcomes = await future
        return self._complete(plan, outcomes)

    def _limits(self, plan: _Plan, timeout_s: float | None) -> list[float]:
        """Each pooled task's time limit: its item's own ``timeout_s`` option, else the
        batch's, else the scorer's; never above ``max_timeout_s``."""
        default = self.timeout_s if timeout_s is None else float(timeout_s)
        limits = [float(task[3].get("timeout_s", default)) for task in plan.pooled]
        if self.max_timeout_s is None:
            return limits
        return [min(t, self.max_timeout_s) for t in limits]

    def _plan(self, items: Iterable[Any], refused: str | None = None) -> _Plan:
        """Gate, extract and look up the cache in this process; say what remains to verify.
        ``refused``: what is wrong with the batch's own options, a ``request`` error for each
        item."""
        plan = _Plan()
        for i, item in enumerate(items):
            plan.results.append(None)
            try:
                domain, response, answer, item_opts = _item_fields(item)
                opts = {**self.defaults, **item_opts}
                hash(domain)
            except (KeyError, TypeError, ValueError) as e:
                detail = f"bad item ({type(e).__name__}: {e}); expected domain, response, answer, options"
                self._set(plan, i, ScoreResult(0.0, False, None, "request", detail[:200]))
                continue
            try:
                path = registry.path_for(domain)
                verifier = registry.load(path)
            except registry.UnknownDomain:
                detail = f"unknown domain {_short(domain)}; known: {', '.join(registry.domains())}"
                self._set(plan, i, ScoreResult(0.0, False, None, "domain", detail, str(domain)))
                continue
            problem = refused or option_problem(opts)
            if problem:
                self._set(plan, i, ScoreResult(0.0, False, None, "request", problem, domain))
                continue
            fmt = opts.pop("format")
            limits = {k: opts.pop(k) for k in degenerate.OPTIONS if k in opts}
            if answer is None and verifier.needs_answer:
                problem = "no ground truth (answer is null)"
            else:
                problem = _truth_problem(answer, self.max_answer_chars)
            if problem:
                self._set(plan, i, ScoreResult(0.0, False, None, "answer", problem, domain))
                continue
            if isinstance(response, str) and not cheap_to_gate(
                response, fmt, self.gate_in_caller_max
            ):
                key = (_UNCACHED, i)  # gated in a worker: off this thread and under the limit
                plan.waiting[key] = [i]
                plan.info[key] = (domain, None)
                plan.tasks.append(
                    (path, None, answer, opts, (response, fmt, self.max_answer_chars, limits))
                )
                plan.bounded.append(False)
                continue
            try:
                extracted = extract(response, fmt, verifier.answer_box)
            except FormatError as e:
                self._set(plan, i, ScoreResult(0.0, False, None, "format", str(e), domain))
                continue
            if len(extracted) > self.max_answer_chars:
                detail = f"answer longer than {self.max_answer_chars} characters"
                self._set(plan, i, ScoreResult(0.0, True, None, "parse", detail, domain))
                continue
            if fmt == "glm" and (detail := degenerate.problem(response, limits)):
                self._set(plan, i, ScoreResult(0.0, False, extracted, "format", detail, domain))
                continue
            key: Hashable = (_UNCACHED, i)
            if verifier.cacheable:
                try:
                    key = (
                        path,
                        verifier.cache_key(extracted, answer, opts),
                        tuple(sorted(opts.items())),
                    )
                    hash(key)
                except TypeError:
                    key = (_UNCACHED, i)
                else:
                    with self._lock:
                        hit = self._cache.get(key)
                        if hit is not None:
                            self._cache.move_to_end(key)
                    if hit is not None:
                        res = ScoreResult(hit[0], True, extracted, hit[1], hit[2], domain, True)
                        self._set(plan, i, res, cache_hit=True)
                        continue
            if key in plan.waiting:
                plan.waiting[key].append(i)
                continue
            plan.waiting[key] = [i]
            plan.info[key] = (domain, extracted)
            plan.tasks.append((path, extracted, answer, opts))
            plan.bounded.append(verifier.bounded(extracted, answer))
        if len(plan.tasks) <= self.inline_max:
            plan.inline = {
                n: run_one(*task)
                for n, (task, ok) in enumerate(zip(plan.tasks, plan.bounded, strict=True))
                if ok
            }
        plan.pooled = [t for n, t in enumerate(plan.tasks) if n not in plan.inline]
        return plan

    def _complete(self, plan: _Plan, pooled: list[Outcome]) -> list[ScoreResult]:
        from_pool = iter(pooled)
        for n, key in enumerate(plan.waiting):
            outcome = plan.inline[n] if n in plan.inline else next(from_pool)
            domain, extracted = plan.info[key]
            format_ok = True
            if len(outcome) > 3:  # the worker ran the format gate
                extracted, format_ok = outcome[3], outcome[1] != "format"
            if outcome[1] in _CACHEABLE_ERRORS and key[0] != _UNCACHED:
                self._remember(key, outcome)
            for k, i in enumerate(plan.waiting[key]):
                res = ScoreResult(
                    outcome[0], format_ok, extracted, outcome[1], outcome[2], domain, k > 0
                )
                self._set(plan, i, res, cache_hit=k > 0)
        return plan.results  # type: ignore[return-value]

    def _set(self, plan: _Plan, i: int, result: ScoreResult, cache_hit: bool = False) -> None:
        plan.results[i] = result
        self._count(counted_domain(result), result, cache_hit)

    def counters(self) -> dict[str, dict[str, int]]:
        """Per domain: items, cache_hits, timeouts, parse_errors, format_failures, crashes,
        errors (any other error kind)."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for (domain, name), n in self._counts.items():
                out.setdefault(domain, {})[name] = n
        return out

    def close(self) -> None:
        self.pool.close()

    def _remember(self, key: Hashable, outcome: Outcome) -> None:
        with self._lock:
            self._cache[key] = outcome
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _count(self, domain: str, result: ScoreResult, cache_hit: bool = False) -> None:
        with self._lock:
            self._counts[domain, "items"] += 1
            if cache_hit:
                self._counts[domain, "cache_hits"] += 1
            if result.error is not None:
                self._counts[domain, _ERROR_COUNTERS.get(result.error, "errors")] += 1
