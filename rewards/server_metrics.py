"""The reward server's Prometheus metrics: per request and per scored item, and the verifier
pool's workers (killed, crashed, started, running) read when ``/metrics`` is scraped."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rewards.base import ScoreResult
from rewards.scoring import counted_domain


class Metrics:
    """The server's Prometheus registry: requests, items, rewards, errors and the verifier
    pool's own counts (``PoolCollector``, read when scraped)."""

    def __init__(self, pool: Any) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "rlcs_reward_requests", "HTTP requests", ["path", "code"], registry=r
        )
        self.latency = Histogram(
            "rlcs_reward_request_seconds", "Request latency", ["path"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )  # fmt: skip
        self.items = Counter("rlcs_reward_items", "Items scored", ["domain"], registry=r)
        self.rewards = Histogram(
            "rlcs_reward_value", "Rewards given", ["domain"], registry=r,
            buckets=(0.0, 0.25, 0.5, 0.75, 0.999, 1.0),
        )  # fmt: skip
        self.errors = Counter(
            "rlcs_reward_errors", "Items with an error", ["domain", "error"], registry=r
        )
        self.timeouts = Counter(
            "rlcs_reward_timeouts", "Items over the time limit", ["domain"], registry=r
        )
        self.cache_hits = Counter(
            "rlcs_reward_cache_hits", "Items answered from the cache", ["domain"], registry=r
        )
        r.register(PoolCollector(pool))

    def observe(self, results: list[ScoreResult]) -> None:
        for res in results:
            domain = counted_domain(res)  # a made-up domain does not become a label of its own
            self.items.labels(domain).inc()
            self.rewards.labels(domain).observe(res.reward)
            if res.cached:
                self.cache_hits.labels(domain).inc()
            if res.error is not None:
                self.errors.labels(domain, res.error).inc()
                if res.error == "timeout":
                    self.timeouts.labels(domain).inc()


class PoolCollector:
    """The verifier pool's own counts, read when scraped: counters of the workers killed on
    an overrun, those that died on their own (a segfault, the memory limit) and all started
    (replacements and spares included), and a gauge of the workers alive."""

    _COUNTS = (
        ("killed", "Verifier workers killed for running over an item's time limit"),
        ("crashed", "Verifier workers that died on their own (a segfault, the memory limit)"),
        ("started", "Verifier workers started, replacements and spares included"),
    )

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def collect(self) -> Any:
        stats = dict(self.pool.stats)
        for key, doc in self._COUNTS:
            yield CounterMetricFamily(f"rlcs_reward_workers_{key}", doc, value=stats[key])
        alive = len(self.pool.worker_pids)
        yield GaugeMetricFamily("rlcs_reward_workers", "Verifier workers running", value=alive)
