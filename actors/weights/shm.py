"""Shared-memory transport: each bucket is written once into a ``/dev/shm`` file.

For engines on the learner's node. The learner copies each tensor into the file once; every
engine maps the same file and reads the tensors in place, so the only copy on the engine side
is the load into the model itself. Only a small descriptor (path, names, offsets) goes through
Ray. The files are removed after the push, whether it succeeded or not.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any

import torch

from actors.weights.base import WeightTransport

KIND = "shm"
_ALIGN = 64


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in shared-memory descriptor")
    return dt


def encode(bucket: list[tuple[str, torch.Tensor]], path: str) -> dict[str, Any]:
    """Write a bucket into ``path``; return the descriptor engines need to map it."""
    entries, offset = [], 0
    for name, t in bucket:
        n = t.numel() * t.element_size()
        entries.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), offset, n))
        offset += (n + _ALIGN - 1) // _ALIGN * _ALIGN
    total = max(offset, 1)
    with open(path, "wb") as f:
        f.truncate(total)
    buf = torch.from_file(path, shared=True, size=total, dtype=torch.uint8)
    for (_name, t), (_, _, _, off, n) in zip(bucket, entries, strict=True):
        if n:
            src = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            buf[off : off + n].copy_(src)
    del buf
    return {"path": path, "size": total, "entries": entries}


def decode(payload: dict[str, Any]) -> tuple[list[tuple[str, torch.Tensor]], Any]:
    """Engine side: zero-copy views into the mapped file, and the mapping to keep alive."""
    buf = torch.from_file(payload["path"], shared=True, size=payload["size"], dtype=torch.uint8)
    out = []
    for name, dtype, shape, off, n in payload["entries"]:
        out.append((name, buf[off : off + n].view(_dtype(dtype)).reshape(shape)))
    return out, buf


class ShmTransport(WeightTransport):
    kind = KIND

    def __init__(self, *args: Any, shm_dir: str = "/dev/shm", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.shm_dir = shm_dir
        self._files: list[str] = []

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], index: int) -> list[Any]:
        path = os.path.join(self.shm_dir, f"rlcs-weights-{uuid.uuid4().hex[:12]}-{index}")
        self._files.append(path)
        desc = encode(bucket, path)
        return [w.receive_weights.remote(KIND, desc, self.version) for w in self.workers]

    def _cleanup(self) -> None:
        for path in self._files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._files.clear()
