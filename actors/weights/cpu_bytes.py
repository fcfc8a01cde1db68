"""CPU transport: each bucket travels as safetensors bytes through Ray's object store.

The portable default: it needs no GPU and no shared filesystem, so it works across nodes. The
bucket is serialised once and ``ray.put`` once, as a numpy byte array so that every worker on
a node reads the same object-store copy without copying it. A vLLM engine lives in its own
process beside the worker; the worker hands the bytes over through a ``/dev/shm`` file that the
engine maps, because pushing hundreds of MB through ``collective_rpc``'s message encoding is
several times slower (and tensors or arrays cannot go that way at all, see FACTS.md).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import torch

from actors.weights.base import WeightTransport

KIND = "cpu_bytes"

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}  # fmt: skip


def encode(bucket: list[tuple[str, torch.Tensor]]) -> bytes:
    from safetensors.torch import save

    return save({name: t.detach().cpu().contiguous() for name, t in bucket})


def parse(buf: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Zero-copy views of the tensors in a safetensors blob held by a uint8 tensor, in order."""
    (n,) = struct.unpack("<Q", bytes(buf[:8].tolist()))
    header = json.loads(bytes(buf[8 : 8 + n].numpy()).decode())
    header.pop("__metadata__", None)
    base = 8 + n
    out = []
    for name, meta in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        start, end = meta["data_offsets"]
        raw = buf[base + start : base + end]
        out.append((name, raw.view(_DTYPES[meta["dtype"]]).reshape(meta["shape"])))
    return out


def decode(payload: Any) -> tuple[list[tuple[str, torch.Tensor]], Any]:
    """Engine side: tensors viewing ``payload`` (bytes, a byte array, or ``{"file": path}``
    written by the worker), and the buffer they view, to keep alive until the load."""
    if isinstance(payload, dict):
        size = payload["size"]
        buf = torch.from_file(payload["file"], shared=True, size=size, dtype=torch.uint8)
    else:
        arr = np.frombuffer(payload, dtype=np.uint8) if isinstance(payload, bytes) else payload
        if not arr.flags.writeable:  # an object-store view: read only, and torch wants writable
            arr = arr.copy()
        buf = torch.from_numpy(arr)
    return parse(buf), buf


def to_local_file(payload: Any, directory: str = "/dev/shm") -> dict[str, Any]:
    """Worker side: put the bucket where the engine process can map it."""
    import os
    import uuid

    path = os.path.join(directory, f"rlcs-bucket-{uuid.uuid4().hex[:12]}")
    data = memoryview(payload).cast("B")
    with open(path, "wb") as f:
        f.write(data)
    return {"file": path, "size": len(data)}


class CpuBytesTransport(WeightTransport):
    kind = KIND

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], index: int) -> list[Any]:
        import ray

        ref = ray.put(np.frombuffer(encode(bucket), dtype=np.uint8))
        return [w.receive_weights.remote(KIND, ref, self.version) for w in self.workers]
