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

    def refuse_mismatches(self, expected: dict[str, tuple[int, ...]], engine: str) -> None:
        """Raise ``ValueError``, and drop this push, if a staged tensor has a name that is not
        in ``expected`` (name -> shape: what the engine's loader takes) or another shape than
        it has there; called before anything is loaded, so the engine keeps its weights.

        The error names the first offending tensors in push order, with the shape the model
        expects, or for an unknown name the names the model has under its longest known
        prefix."""
        unknown, wrong = [], []
        for name, shape in self.shapes():
            if name not in expected:
                unknown.append(name)
            elif shape != tuple(expected[name]):
                wrong.append(f"{name!r}: {shape} where the model has {tuple(expected[name])}")
        if not unknown and not wrong:
            return
        self.clear()
        problems = []
        if unknown:
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            named = "; ".join(f"{n!r} ({_nearest(n, expected)})" for n in unknown[:3])
            problems.append(f"Tensors the model does not have: {named}{more}")
        if wrong:
            more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
            problems.append(f"Tensors of the wrong shape: {'; '.join(wrong[:3])}{more}")
        raise ValueError(
            f"{engine}: push refused, nothing was loaded (the engine keeps its previous "
            f"weights). {'. '.join(problems)}"
        )

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


def _nearest(name: str, known: dict[str, Any]) -> str:
    """What ``known`` holds near ``name``: up to three names under the longest dotted prefix
    they share with it."""
    parts = name.split(".")
    for k in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:k]) + "."
        near = sorted(n for n in known if n.startswith(prefix))
        if near:
            more = ", ..." if len(near) > 3 else ""
            return f"under {prefix!r} the model has {', '.join(near[:3])}{more}"
    return f"the model has no name starting {parts[0] + '.'!r}"
