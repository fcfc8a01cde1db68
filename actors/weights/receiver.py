"""Engine side of weight sync: stage received buckets, then load them all and checksum.

Used inside vLLM's engine process (through :mod:`actors.weights.vllm_ext`) and inside the HF
engine. No Ray here: the vLLM engine core is not a Ray worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from actors.weights.base import tensor_checksum


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
    """Buckets of one push, held until ``commit`` loads them in a single pass."""

    def __init__(self) -> None:
        self.version: str | None = None
        self._tensors: list[tuple[str, torch.Tensor]] = []
        self._keepalive: list[Any] = []
        self.checksums: dict[str, str] = {}

    def stage(self, kind: str, payload: Any, version: str) -> int:
        if self.version != version:
            self.clear()
            self.version = version
        tensors, keep = decode(kind, payload)
        self._tensors.extend(tensors)
        self._keepalive.append(keep)
        return len(tensors)

    def add(self, tensors: list[tuple[str, torch.Tensor]], version: str) -> None:
        if self.version != version:
            self.clear()
            self.version = version
        self._tensors.extend(tensors)

    def consume(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield staged tensors, checksumming each as the engine's loader takes it."""
        for name, t in self._tensors:
            self.checksums[name] = tensor_checksum(t)
            yield name, t

    def names(self) -> list[str]:
        return [n for n, _ in self._tensors]

    def clear(self) -> None:
        self._tensors.clear()
        self._keepalive.clear()
        self.checksums = {}
        self.version = None
