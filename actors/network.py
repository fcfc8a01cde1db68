"""Where the actors meet: this node's address as other nodes see it, free ports, and the
learner ranks' ``torch.distributed`` group."""

from __future__ import annotations

import os
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now ("" for every interface)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def node_ip() -> str:
    """This node's address as other nodes see it; 127.0.0.1 outside Ray (one machine)."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    return "127.0.0.1"


def join_process_group(
    device: str, rank: int, world_size: int, master_addr: str | None, master_port: int | None
) -> None:
    """Join the learner ranks' group (gloo on CPU, NCCL on GPU) and make DeepSpeed use it.

    With ``master_addr`` the rank meets the others there; without it, the group this process
    already holds is used as it is.
    """
    if device == "cpu":
        # DeepSpeed picks CUDA whenever it sees a GPU; a CPU learner must say so before import.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import torch

    if master_addr is not None:
        # Under Ray each rank sees only its own GPU (CUDA_VISIBLE_DEVICES), so local rank 0.
        os.environ.update(
            RANK=str(rank),
            LOCAL_RANK="0",
            WORLD_SIZE=str(world_size),
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(master_port),
        )
    gpu = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if device == "cuda" else None
    if gpu is not None:
        torch.cuda.set_device(gpu)
    if not torch.distributed.is_initialized():
        if gpu is not None:
            # Bound up front: unbound, NCCL guesses the device from the global rank at its
            # first collective, which can hang where ranks and GPUs do not line up.
            torch.distributed.init_process_group(backend="nccl", device_id=gpu)
        deepspeed.init_distributed(dist_backend="nccl" if gpu is not None else "gloo")
