"""The weight-sync interface: the learner pushes its weights to every rollout engine.

One interface, one file per transport (NeMo-RL's ``weight_sync`` layout):

- ``cpu_bytes``: each bucket is serialised to safetensors bytes and shipped through Ray's
  object store (works across nodes, no GPU);
- ``shm``: each bucket is written once into a ``/dev/shm`` file that every engine on the same
  node maps without copying; only a small descriptor travels through Ray;
- ``nccl``: a broadcast from learner rank 0 to the engines' GPUs;
- ``cuda_ipc``: CUDA IPC handles, for engines colocated with the learner on the same GPU.

Every transport follows the same protocol per push: the learner's ``(hf_name, tensor)`` stream
is cut into buckets of about ``bucket_mb``; each bucket is one remote call per rollout worker
(``RolloutWorker.receive_weights``), which the engine stages; a final ``commit_weights`` call
loads everything into the live engine at once (so a push that fails while sending never
reaches the live engine; one naming a tensor the engine's model does not have, or of another
shape, is refused there before anything loads) and returns one checksum per tensor, taken
engine-side. Any difference from the learner's checksums raises ``WeightSyncError`` naming the
first mismatching tensor.
Both sides hash with the transport's algorithm (:mod:`actors.weights.checksum`): on the GPU for
``cuda_ipc`` and ``nccl``, in host memory for the others.

Names are HF names end to end: the engines map them to their own layout (vLLM fuses q/k/v and
gate/up, and renames multimodal towers, inside its loader). A tensor that shares storage with one
already sent (tied embeddings) is sent once; the engine ties it again.
"""

from __future__ import annotations

import time
import uuid
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from actors.weights.checksum import for_transport, tensor_checksum


class WeightSyncError(RuntimeError):
    """A push that did not leave every engine holding exactly the learner's weights."""


@dataclass
class SyncReport:
    """What one ``push`` did. ``seconds`` covers everything, verification included."""

    seconds: float
    bytes: int
    buckets: int
    tensors: int
    checksum_ok: bool
    workers: int = 1
    skipped_tied: list[str] = field(default_factory=list)
    verified_readback: int = 0
    verified_on_load: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")


def dedupe_tied(
    named_tensors: Iterable[tuple[str, torch.Tensor]], skipped: list[str]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Drop tensors that alias one already yielded (tied embeddings); record their names.

    An alias is a tensor over the same, still living storage at the same place. The address
    alone is not enough: a stream of fresh copies (ZeRO-3 gathers a module, copies it and lets
    it go once its bucket is sent) gets a freed copy's memory back for the next one of the
    same size, which is a different weight."""
    seen: dict[tuple[int, tuple[int, ...], tuple[int, ...], torch.dtype], weakref.ref] = {}
    for name, t in named_tensors:
        storage = t.untyped_storage()
        key = (storage.data_ptr() + t.storage_offset() * t.element_size(),
               tuple(t.shape), tuple(t.stride()), t.dtype)  # fmt: skip
        earlier = seen.get(key)
        if t.numel() and earlier is not None and earlier() is storage:
            skipped.append(name)
            continue
        seen[key] = weakref.ref(storage)
        yield name, t


def iter_buckets(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group a stream into buckets of at most ``bucket_bytes`` (a larger tensor is alone)."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in named_tensors:
        n = t.numel() * t.element_size()
        if bucket and size + n > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += n
    if bucket:
        yield bucket


def compare_checksums(
    expected: dict[str, str], got: dict[str, str], worker: str, order: Sequence[str]
) -> None:
    """Raise ``WeightSyncError`` naming the first tensor (in push order) that differs."""
    for name in order:
        if name not in got:
            raise WeightSyncError(f"{worker}: engine did not load tensor {name!r}")
        if got[name] != expected[name]:
            raise WeightSyncError(
                f"{worker}: checksum mismatch on tensor {name!r}: "
                f"learner {expected[name]}, engine {got[name]}"
            )
    extra = sorted(set(got) - set(expected))
    if extra:
        raise WeightSyncError(
            f"{worker}: engine reports tensors the learner did not send: {extra[:5]}"
        )


class WeightTransport(ABC):
    """Pushes a learner's weights into the engines of a set of rollout workers.

    ``workers`` are ``RolloutWorker`` actor handles (anything with ``receive_weights`` and
    ``commit_weights`` remote methods). A transport is made once, by the learner or the driver,
    and pushed after every optimizer step.
    """

    kind: str = ""

    def __init__(self, workers: Sequence[Any], bucket_mb: float = 256, timeout_s: float = 600):
        if not workers:
            raise ValueError("a weight transport needs at least one rollout worker")
        self.workers = list(workers)
        #: the number each worker goes by in errors: its place in the rollout group, which
        #: stays when the group drops a dead worker and the driver pushes to the rest
        self.worker_ids = list(range(len(self.workers)))
        self.bucket_bytes = max(1, int(bucket_mb * 2**20))
        self.timeout_s = timeout_s
        self.version = ""

    def push(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> SyncReport:
        """Send every tensor, load them into each engine, verify; raise on any difference."""

        t0 = time.perf_counter()
        # A fresh id per push: the transport is often pickled into the learner actor, so a
        # counter would restart, and stale buckets of a failed push must never be committed.
        self.version = uuid.uuid4().hex
        self._prepare()
        skipped: list[str] = []
        expected: dict[str, str] = {}
        order: list[str] = []
        nbytes = nbuckets = 0
        t_checksum = 0.0
        algorithm = for_transport(self.kind)
        pending: list[Any] = []
        try:
            for bucket in iter_buckets(dedupe_tied(named_tensors, skipped), self.bucket_bytes):
                for name, _ in bucket:
                    if name in expected:
                        raise WeightSyncError(f"tensor {name!r} pushed twice in one sync")
                    expected[name] = ""
                # Wait for the previous bucket before sending the next: bounds memory to ~2 buckets.
                self._wait(pending, "receive a bucket")
                pending = self._send_bucket(bucket, nbuckets)
                nbuckets += 1
                # Checksum while the engines take the bucket in.
                tc = time.perf_counter()
                for name, t in bucket:
                    expected[name] = tensor_checksum(t, algorithm)
                    order.append(name)
                    nbytes += t.numel() * t.element_size()
                t_checksum += time.perf_counter() - tc
            self._wait(pending, "receive a bucket")
            t_sent = time.perf_counter()
            results = self._wait(
                [w.commit_weights.remote(self.version) for w in self.workers], "load the weights"
            )
        finally:
            self._cleanup()
        t_commit = time.perf_counter()
        readback = on_load = 0
        engine_phases: dict[str, float] = {}
        for i, res in enumerate(results):
            worker = f"rollout worker {self.worker_ids[i]}"
            if res.get("missing"):
                raise WeightSyncError(
                    f"{worker}: engine parameters not covered by the push: {res['missing'][:5]}"
                )
            compare_checksums(expected, res["checksums"], worker, order)
            readback += res.get("readback", 0)
            for k, v in res.get("timings", {}).items():
                engine_phases[f"engine_{k}"] = max(engine_phases.get(f"engine_{k}", 0.0), v)
            on_load += len(res["checksums"]) - res.get("readback", 0)
        return SyncReport(
            seconds=time.perf_counter() - t0,
            bytes=nbytes,
            buckets=nbuckets,
            tensors=len(order),
            checksum_ok=True,
            workers=len(self.workers),
            skipped_tied=skipped,
            verified_readback=readback,
            verified_on_load=on_load,
            phase_seconds={
                "learner_checksum": t_checksum,
                "send": t_sent - t0 - t_checksum,
                "load_and_verify": t_commit - t_sent,
                **engine_phases,
            },
        )

    def _wait(self, refs: list[Any], what: str) -> list[Any]:
        """``ray.get`` that names the rollout worker which failed, as a ``WeightSyncError``."""
        import ray

        from actors.rank_calls import own_error

        try:
            return ray.get(refs, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise WeightSyncError(
                f"rollout workers did not {what} within {self.timeout_s} s"
            ) from e
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            index = "?"
            for i, ref in enumerate(refs):  # one ref a worker, in the order of self.workers
                try:
                    ray.get(ref, timeout=0)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                    index = str(self.worker_ids[i])
                    break
                except ray.exceptions.GetTimeoutError:
                    continue
            cause = own_error(e)
            raise WeightSyncError(f"rollout worker {index} failed to {what}: {cause}") from e

    def use_workers(self, workers: Sequence[Any], ids: Sequence[int]) -> None:
        """Push to ``workers`` from now on, named in errors by ``ids`` (their places in the
        rollout group)."""
        if len(workers) != len(ids):
            raise ValueError(f"{len(workers)} workers with {len(ids)} ids; need one id each")
        self.workers, self.worker_ids = list(workers), list(ids)

    @abstractmethod
    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], index: int) -> list[Any]:
        """Ship one bucket to every worker; return the Ray refs of those calls."""

    def _prepare(self) -> None:  # noqa: B027 - optional hook
        """Set up anything that must live in the pushing process (e.g. a NCCL group)."""

    def _cleanup(self) -> None:  # noqa: B027 - optional hook, most transports hold nothing
        """Release per-push resources (shared-memory files, staging buffers)."""

    def close(self) -> None:
        self._cleanup()
