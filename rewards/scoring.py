"""``score`` and ``score_batch``: the format gate and the cache in the calling process, the
verifiers in the killable worker pool, and counters for every kind of failure.

The cache key is (verifier, normalised answer, normalised ground truth, options). GRPO scores
groups of rollouts of one prompt, so identical answers are common; within one batch each
distinct key is verified once. Only deterministic outcomes are cached: a timeout or a crash
may depend on load, so those are always recomputed.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from rewards import registry
from rewards.base import ScoreResult
from rewards.extract import FormatError, extract
from rewards.pool import Outcome, WorkerPool

DEFAULT_TIMEOUT_S = 5.0
_CACHEABLE_ERRORS = (None, "parse", "answer")
#: counter name for each error kind; anything else counts as ``errors``
_ERROR_COUNTERS = {
    "timeout": "timeouts",
    "parse": "parse_errors",
    "format": "format_failures",
    "crash": "crashes",
}


def _item_fields(item: Any) -> tuple[str, str, Any, Mapping[str, Any]]:
    if isinstance(item, Mapping):
        return item["domain"], item["response"], item["answer"], item.get("options") or {}
    domain, response, answer, *rest = item
    return domain, response, answer, (rest[0] if rest else {}) or {}


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
    ) -> None:
        for domain, path in (custom_domains or {}).items():
            registry.register(domain, path)
        self.timeout_s = timeout_s
        self.defaults = {"format": "glm", **(defaults or {})}
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
        timeout_s = self.timeout_s if timeout_s is None else float(timeout_s)
        results: list[ScoreResult | None] = []
        tasks: list[tuple] = []
        waiting: dict[Hashable, list[int]] = {}  # cache key (or a unique stand-in) -> indices
        meta: list[tuple[str, str, Hashable | None]] = []
        for i, item in enumerate(items):
            results.append(None)
            try:
                domain, response, answer, item_opts = _item_fields(item)
            except (KeyError, TypeError, ValueError) as e:
                results[i] = ScoreResult(0.0, False, None, "request", f"bad item: {e}")
                self._count("?", results[i])
                continue
            opts = {**self.defaults, **item_opts}
            fmt = opts.pop("format")
            try:
                path = registry.path_for(domain)
                verifier = registry.load(path)
            except registry.UnknownDomain:
                known = ", ".join(registry.domains())
                results[i] = ScoreResult(
                    0.0,
                    False,
                    None,
                    "domain",
                    f"unknown domain {domain!r}; known: {known}",
                    str(domain),
                )
                self._count(str(domain), results[i])
                continue
            try:
                extracted = extract(response, fmt)
            except FormatError as e:
                results[i] = ScoreResult(0.0, False, None, "format", str(e), domain)
                self._count(domain, results[i])
                continue
            key: Hashable = ("uncached", i)
            if verifier.cacheable:
                try:
                    key = (
                        path,
                        verifier.cache_key(extracted, answer, opts),
                        tuple(sorted(opts.items())),
                    )
                    hash(key)
                except TypeError:
                    key = ("uncached", i)
                else:
                    with self._lock:
                        hit = self._cache.get(key)
                        if hit is not None:
                            self._cache.move_to_end(key)
                    if hit is not None:
                        results[i] = ScoreResult(
                            hit[0], True, extracted, hit[1], hit[2], domain, True
                        )
                        self._count(domain, results[i], cache_hit=True)
                        continue
            if key in waiting:
                waiting[key].append(i)
            else:
                waiting[key] = [i]
                tasks.append((path, extracted, answer, opts))
            meta.append((domain, extracted, key))
        outcomes = self.pool.run(tasks, timeout_s) if tasks else []
        info = {key: (d, x) for d, x, key in meta}
        for key, outcome in zip(waiting, outcomes, strict=True):
            domain, extracted = info[key]
            if outcome[1] in _CACHEABLE_ERRORS and not (
                isinstance(key, tuple) and key[0] == "uncached"
            ):
                self._remember(key, outcome)
            for n, i in enumerate(waiting[key]):
                results[i] = ScoreResult(
                    outcome[0], True, extracted, outcome[1], outcome[2], domain, n > 0
                )
                self._count(domain, results[i], cache_hit=n > 0)
        return results  # type: ignore[return-value]

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
