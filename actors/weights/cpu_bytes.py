"""CPU transport: each bucket travels as safetensors bytes through Ray's object store.

The portable default: it needs no GPU and no shared filesystem, so it works across nodes. The
bucket is serialised once and ``ray.put`` once, then every worker receives the same object.
Tensors and numpy arrays cannot be handed to vLLM's ``collective_rpc`` directly (they arrive as
lists, see FACTS.md); bytes arrive intact.
"""

from __future__ import annotations

from typing import Any

import torch

from actors.weights.base import WeightTransport

KIND = "cpu_bytes"


def encode(bucket: list[tuple[str, torch.Tensor]]) -> bytes:
    from safetensors.torch import save

    return save({name: t.detach().cpu().contiguous() for name, t in bucket})


def decode(payload: bytes) -> tuple[list[tuple[str, torch.Tensor]], Any]:
    """Engine side: the bucket's tensors (owning their memory), and nothing to keep alive."""
    from safetensors.torch import load

    return list(load(payload).items()), None


class CpuBytesTransport(WeightTransport):
    kind = KIND

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], index: int) -> list[Any]:
        import ray

        ref = ray.put(encode(bucket))
        return [w.receive_weights.remote(KIND, ref, self.version) for w in self.workers]
