"""CUDA-IPC transport: for engines colocated with the learner on the same GPU.

Each bucket is packed into one contiguous CUDA buffer; the engines open it through a CUDA IPC
handle and copy out of it, so no byte leaves the GPU. An engine has its copy (synchronized) when
its ``receive_weights`` returns, and the next bucket is sent only after that, so the learner
holds one bucket's buffer at a time, not a second copy of the whole model on a GPU it shares
with the engines. GPU only; covered by ``gpu``-marked tests.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch

from actors.weights.base import WeightTransport

KIND = "cuda_ipc"


def pack(bucket: list[tuple[str, torch.Tensor]]) -> tuple[torch.Tensor, list[tuple]]:
    """One contiguous uint8 CUDA buffer holding the bucket, and each tensor's place in it."""
    entries, offset = [], 0
    for name, t in bucket:
        n = t.numel() * t.element_size()
        entries.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), offset, n))
        offset += (n + 255) // 256 * 256
    device = bucket[0][1].device
    buf = torch.empty(max(offset, 1), dtype=torch.uint8, device=device)
    for (_, t), (_, _, _, off, n) in zip(bucket, entries, strict=True):
        if n:
            buf[off : off + n].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
    return buf, entries


def encode(buf: torch.Tensor, entries: list[tuple]) -> dict[str, Any]:
    from torch.multiprocessing.reductions import reduce_tensor

    # Pickled here, because vLLM's RPC encoder only carries plain data.
    return {"handle": pickle.dumps(reduce_tensor(buf)), "entries": entries}


def decode(payload: dict[str, Any]) -> tuple[list[tuple[str, torch.Tensor]], Any]:
    """Engine side: copies of the bucket's tensors on this process's current GPU."""
    from actors.weights.shm import _dtype

    rebuild, args = pickle.loads(payload["handle"])
    args = list(args)
    args[6] = torch.cuda.current_device()  # the device index as this process numbers it
    buf = rebuild(*args)
    out = []
    for name, dtype, shape, off, n in payload["entries"]:
        out.append((name, buf[off : off + n].view(_dtype(dtype)).reshape(shape).clone()))
    torch.cuda.synchronize()
    return out, None


class CudaIpcTransport(WeightTransport):
    kind = KIND

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._alive: list[torch.Tensor] = []

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], index: int) -> list[Any]:
        if bucket[0][1].device.type != "cuda":
            raise ValueError("cuda_ipc needs the learner's tensors on a CUDA device")
        # every engine has copied the previous bucket out (``push`` waited for it): let it go
        self._alive.clear()
        buf, entries = pack(bucket)
        torch.cuda.synchronize()
        self._alive.append(buf)
        payload = encode(buf, entries)
        return [w.receive_weights.remote(KIND, payload, self.version) for w in self.workers]

    def _cleanup(self) -> None:
        self._alive.clear()
