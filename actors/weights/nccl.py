"""NCCL transport: the learner (rank 0) broadcasts each bucket to every engine's GPU.

For learner and rollout on different GPUs or nodes. At the first push the learner and each
engine rank (one per tensor-parallel GPU of an engine) join one stateless NCCL group (vLLM's
``StatelessProcessGroup`` + ``PyNcclCommunicator``, as in vLLM's RLHF example), rank 0 being
the learner; later pushes reuse it, and a new one replaces it when the rollout group drops a
worker. Per bucket, the learner first sends the bucket's layout to each worker (one remote
call), then broadcasts one flat buffer that the engines receive and stage. GPU only; covered
by ``gpu``-marked tests (the group's reuse also on CPU, with its building stubbed).
"""

from __future__ import annotations

import uuid
from typing import Any

import torch

from actors.weights.base import WeightSyncError, WeightTransport
from actors.weights.cuda_ipc import pack

KIND = "nccl"


#: the NCCL groups this process pushes through, by transport id, with the workers they hold.
#: A transport reaches the learner pickled, once a push, without its communicator: the group
#: it joined stays here, so the next push reuses it instead of building (and leaking) another.
_GROUPS: dict[str, tuple[tuple[int, ...], Any]] = {}


def leave_group(comm: Any) -> None:
    """Tear down one side's communicator (vLLM's ``PyNcclCommunicator.destroy``)."""
    destroy = getattr(comm, "destroy", None)
    if destroy is not None:
        destroy()


class NcclTransport(WeightTransport):
    kind = KIND

    def __init__(
        self,
        *args: Any,
        master_address: str | None = None,
        master_port: int | None = None,
        engine_ranks_per_worker: int = 1,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.master_address, self.master_port = master_address, master_port
        self.engine_ranks_per_worker = engine_ranks_per_worker
        self.id = uuid.uuid4().hex[:12]
        self.comm = None

    def __getstate__(self) -> dict[str, Any]:
        # The group is joined by whichever process pushes (usually the learner actor).
        return {**self.__dict__, "comm": None}

    def _prepare(self) -> None:
        if self.comm is not None:
            return
        members = tuple(self.worker_ids)
        held = _GROUPS.get(self.id)
        if held is not None and held[0] == members:
            self.comm = held[1]
            return
        if held is not None:  # the rollout group changed: a group of the workers left
            self._leave()
        self._check_own_gpus()
        self.comm = self._build_group()
        _GROUPS[self.id] = (members, self.comm)

    def _build_group(self) -> Any:
        """Rank 0 of a new group whose other ranks are every engine rank of ``workers``."""
        import ray
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        port = self.master_port
        if port is None:
            from vllm.utils.network_utils import get_open_port

            port = get_open_port()
        # the group's store listens where this process (the pushing learner rank) runs, at an
        # address the engines on other nodes can reach
        host = self.master_address or ray.util.get_node_ip_address()
        ranks = group_ranks(self.workers, self.engine_ranks_per_worker)
        world = 1 + self.engine_ranks_per_worker * len(self.workers)
        joins = [w.init_weight_group.remote(KIND, host, port, first, world) for w, first in ranks]
        pg = StatelessProcessGroup.create(host=host, port=port, rank=0, world_size=world)
        comm = PyNcclCommunicator(pg, device=torch.cuda.current_device())
        self._wait(joins, "join the NCCL weight group")
        return comm

    def _leave(self) -> None:
        held = _GROUPS.pop(self.id, None)
        if held is not None:
            leave_group(held[1])
        self.comm = None

    def close(self) -> None:
        super().close()
        self._leave()

    def _check_own_gpus(self) -> None:
        """Refuse, before any rank joins, engines on the learner's own GPU: NCCL cannot hold
        two ranks of one group on one GPU, and the group's creation would hang instead of
        failing."""
        refs = [w.nccl_gpus.remote() for w in self.workers]
        engines = self._wait(refs, "name its GPUs for the NCCL group")
        mine = gpu_uuid()
        shared = [self.worker_ids[i] for i in shared_gpu_workers(mine, engines)]
        if shared:
            raise WeightSyncError(
                f"nccl: rollout worker(s) {shared} run on the learner's own GPU ({mine}), and "
                f"NCCL cannot hold two ranks on one GPU. Give the engines GPUs of their own, "
                f"or share the GPU with weight_sync: cuda_ipc."
            )

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], index: int) -> list[Any]:
        buf, entries = pack(bucket)
        meta = {"size": buf.numel(), "entries": entries}
        refs = [w.receive_weights.remote(KIND, meta, self.version) for w in self.workers]
        self.comm.broadcast(buf, src=0, stream=torch.cuda.current_stream())
        torch.cuda.synchronize()
        return refs


def group_ranks(workers: list[Any], ranks_per_worker: int) -> list[tuple[Any, int]]:
    """(worker, its first rank) for each worker: the learner is rank 0, and worker i's engine
    ranks (one per tensor-parallel GPU) are 1 + i * ranks_per_worker + tp_rank, so that each
    of the group's 1 + ranks_per_worker * len(workers) ranks is taken exactly once."""
    return [(w, 1 + i * ranks_per_worker) for i, w in enumerate(workers)]


def gpu_uuid(device: int | None = None) -> str:
    """The UUID of a CUDA device of this process (this process's current one by default): the
    same string in every process that sees that GPU, whatever its index there."""
    index = torch.cuda.current_device() if device is None else device
    return str(torch.cuda.get_device_properties(index).uuid)


def shared_gpu_workers(learner: str, engines: list[list[str]]) -> list[int]:
    """Indices of the workers one of whose engine ranks is on the learner's GPU."""
    return [i for i, uuids in enumerate(engines) if learner in uuids]


def join_group(master_address: str, master_port: int, rank: int, world_size: int):
    """Engine side: join the learner's NCCL group; returns the communicator."""
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup

    pg = StatelessProcessGroup.create(
        host=master_address, port=master_port, rank=rank, world_size=world_size
    )
    return PyNcclCommunicator(pg, device=torch.cuda.current_device())


def receive(comm, meta: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """Engine side: receive one broadcast bucket and split it into tensors."""
    from actors.weights.shm import _dtype

    buf = torch.empty(meta["size"], dtype=torch.uint8, device=torch.cuda.current_device())
    comm.broadcast(buf, src=0, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    return [
        (name, buf[off : off + n].view(_dtype(dtype)).reshape(shape))
        for name, dtype, shape, off, n in meta["entries"]
    ]
