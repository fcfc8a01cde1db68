"""Weight sync from the learner to the rollout engines; see :mod:`actors.weights.base`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actors.weights.base import SyncReport, WeightSyncError, WeightTransport
from actors.weights.checksum import tensor_checksum

KINDS = ("cpu_bytes", "shm", "nccl", "cuda_ipc")


def make_transport(
    kind: str, workers: Sequence[Any], bucket_mb: float = 256, **kwargs: Any
) -> WeightTransport:
    """The transport named by ``ClusterConfig.weight_sync``, bound to these rollout workers."""
    if kind == "cpu_bytes":
        from actors.weights.cpu_bytes import CpuBytesTransport as cls
    elif kind == "shm":
        from actors.weights.shm import ShmTransport as cls
    elif kind == "nccl":
        from actors.weights.nccl import NcclTransport as cls
    elif kind == "cuda_ipc":
        from actors.weights.cuda_ipc import CudaIpcTransport as cls
    else:
        raise ValueError(f"unknown weight_sync {kind!r}; choose one of {', '.join(KINDS)}")
    return cls(workers, bucket_mb=bucket_mb, **kwargs)


__all__ = [
    "KINDS",
    "SyncReport",
    "WeightSyncError",
    "WeightTransport",
    "make_transport",
    "tensor_checksum",
]
