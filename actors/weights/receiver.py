"""Engine side of weight sync: stage received buckets, then load them all and checksum.

Used inside vLLM's engine process (through :mod:`actors.weights.vllm_ext`) and inside the HF
engine. No Ray here: the vLLM engine core is not a Ray worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from actors.weights.checksum import for_transport, tensor_checksum


def decode(kind: str, payload: Any) -> tuple[list[tuple[str, torch.Tensor]], Any]:
    """Turn one bucket's payload into ``(name, tensor)`` pairs, plus anything to keep alive."""
    if kind == "cpu_bytes":
        from actors.weights.cpu_bytes import decode as dec
    elif kind == "shm":
        from actors.weights.shm import decode as dec
    elif kind == "cuda_ipc":
        from actors.weights.cuda_ipc import decode as dec
    else:
        raise ValueError(f"unknown weight payload kind {kind!r}")
    return dec(payload)


class StagedWeights:
    """Buckets of one push, held until the engine loads them all in a single pass.

    Checksums are taken when a bucket arrives, so they overlap with the learner preparing the
    next one, except for tensors the engine can read back from its live parameters after the
    load (``readable``): those are checksummed from the engine itself, which proves more.
    ``consume`` feeds the engine's loader and records what it actually took. Every checksum of a
    push uses its transport's algorithm (``algorithm``), as the learner's do.
    """

    def __init__(self, readable: Callable[[str, torch.Tensor], bool] | None = None) -> None:
        self.readable = readable or (lambda name, t: False)
        self.version: str | None = None
        self._tensors: list[tuple[str, torch.Tensor]] = []
        self._keepalive: list[Any] = []
        self.checksums: dict[str, str] = {}
        self.consumed: set[str] = set()
        self.checksum_seconds = 0.0
        self.algorithm = "xxh3"

    def _start(self, version: str, kind: str) -> None:
        if self.version != version:
            self.clear()
            self.version = version
            self.algorithm = for_transport(kind)

    def stage(self, kind: str, payload: Any, version: str) -> int:
        tensors, keep = decode(kind, payload)
        self._keepalive.append(keep)
        self.add(tensors, version, kind)
        return len(tensors)

    def add(self, tensors: list[tuple[str, torch.Tensor]], version: str, kind: str) -> None:
        self._start(version, kind)
        t0 = time.perf_counter()
        for name, t in tensors:
            if not self.readable(name, t):
                self.checksums[name] = tensor_checksum(t, self.algorithm)
        self.checksum_seconds += time.perf_counter() - t0
        self._tensors.extend(tensors)

    def consume(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, t in self._tensors:
            self.consumed.add(name)
            yield name, t

    def check_consumed(self) -> None:
        left = [n for n, _ in self._tensors if n not in self.consumed]
        if left:
            raise RuntimeError(f"the engine's loader did not take {len(left)} tensors: {left[:5]}")

    def names(self) -> list[str]:
        return [n for n, _ in self._tensors]

    def shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [(n, tuple(t.shape)) for n, t in self._tensors]

    def checksum(self, t: torch.Tensor) -> str:
        """A live parameter's checksum after the load, with this push's algorithm."""
        return tensor_checksum(t, self.algorithm)

    def clear(self) -> None:
        self._tensors.clear()
        self._keepalive.clear()
        self.checksums = {}
        self.consumed = set()
        self.checksum_seconds = 0.0
        self.version = None
