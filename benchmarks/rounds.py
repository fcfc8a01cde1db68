"""Timing variants against each other on a shared machine: rounds alternate between them.

A benchmark that times variant A's steps and then variant B's lets whatever else the machine
does in between (another process, a CPU that throttles, a cache that warms) fall on one side
only. ``alternate`` runs one call of every variant a round, in turn, so that drift reaches all
of them alike, and keeps each call's wall-clock and process CPU time (the latter disturbed far
less by other processes) and what it returned.

    from rounds import alternate
    t = alternate({"plain": lambda r: step(False), "shared": lambda r: step(True)}, rounds=5)
    t.median("plain"), t.median_cpu("shared"), t.results["plain"][0]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from rewards.argtypes import int_at_least


@dataclass
class Timings:
    """Per variant, in the order of the timed rounds: seconds of wall clock and of this
    process's CPU time, and each call's return value."""

    wall: dict[Hashable, list[float]]
    cpu: dict[Hashable, list[float]]
    results: dict[Hashable, list[Any]]

    def median(self, key: Hashable) -> float:
        return statistics.median(self.wall[key])

    def median_cpu(self, key: Hashable) -> float:
        return statistics.median(self.cpu[key])

    def line(self, key: Hashable) -> str:
        """``key`` and its timed calls' wall-clock seconds, for a benchmark's log."""
        return f"{key} " + " ".join(f"{x:.2f}" for x in self.wall[key])


def alternate(
    fns: Mapping[Hashable, Callable[[int], Any]],
    rounds: int,
    warmup: int = 1,
    on_call: Callable[[int, Hashable, float, Any], None] | None = None,
) -> Timings:
    """Call every function of ``fns`` once a round, in ``fns``' order, for ``warmup`` rounds
    that are not kept and then ``rounds`` that are. Each call gets its round's index (warm-up
    rounds first, from 0), e.g. to seed its work. ``on_call(round, key, seconds, result)``
    follows every call, warm-up ones included: a long benchmark's progress."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: time at least one round")
    if warmup < 0:
        raise ValueError(f"warmup={warmup}: the warm-up rounds cannot be negative")
    out = Timings({k: [] for k in fns}, {k: [] for k in fns}, {k: [] for k in fns})
    for r in range(warmup + rounds):
        for key, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            result = fn(r)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if r >= warmup:
                out.wall[key].append(wall)
                out.cpu[key].append(cpu)
                out.results[key].append(result)
            if on_call is not None:
                on_call(r, key, wall, result)
    return out


def count(least: int) -> Callable[[str], int]:
    """An argparse ``type`` for a number of rounds or steps: an integer of at least ``least``,
    so that a bad ``--steps`` stops with a usage error before any model is loaded (the
    ``rlcs`` command's own check, ``rewards.argtypes.int_at_least``)."""
    return int_at_least(least)
