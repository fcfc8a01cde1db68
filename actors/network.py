"""Where the actors meet: this node's address as other nodes see it, free ports, and the
learner ranks' ``torch.distributed`` group."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: A torch C++ extension build lock older than this belongs to a process that was killed while
#: it held it: loading a built extension holds it for a second or two, building DeepSpeed's
#: CPU collective op about a minute on two cores.
STALE_BUILD_LOCK_S = 300.0


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


def clear_stale_build_locks(max_age_s: float = STALE_BUILD_LOCK_S) -> list[Path]:
    """Remove the build locks of torch C++ extensions that killed processes left behind.

    torch takes an extension's ``lock`` file while it checks or builds it (DeepSpeed's CPU
    collective op, loaded by every CPU learner rank), and any other process waits for that
    file to go, forever and without a word: a learner stopped at that moment (Ctrl-C, a killed
    run) leaves every later learner of the machine hanging at start. A lock older than
    ``max_age_s`` is removed with a warning; younger ones are left to their builds."""
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    removed = []
    for lock in [*root.glob("*/lock"), *root.glob("*/*/lock")]:
        try:
            age = time.time() - lock.stat().st_mtime
            if age > max_age_s:
                lock.unlink()
                removed.append(lock)
                log.warning("removed %s, left %.0f min ago by a build that never finished "
                            "(a killed process); the extension is checked again", lock, age / 60)  # fmt: skip
        except FileNotFoundError:  # released meanwhile
            continue
    return removed


def use_own_extension_dir() -> Path:
    """Build torch C++ extensions in a folder of this Python environment's own, and return it.

    torch keys its extensions folder (``~/.cache/torch_extensions``) by the Python version
    alone, and a build records the include paths of the environment that made it: two virtual
    environments of one machine (two checkouts, a CI clone beside a working one) rebuilt
    DeepSpeed's CPU collective op over each other's, about 45 s on two cores at the first
    learner start after the other had run. Each environment (``sys.prefix``) now has a folder
    of its own inside torch's; ``$TORCH_EXTENSIONS_DIR``, when set, is used as it is."""
    if not os.environ.get("TORCH_EXTENSIONS_DIR"):
        from torch.utils.cpp_extension import get_default_build_root

        env = hashlib.sha256(os.path.realpath(sys.prefix).encode()).hexdigest()[:12]
        os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(get_default_build_root()) / f"env-{env}")
    return Path(os.environ["TORCH_EXTENSIONS_DIR"])


def deepspeed_on_cpu() -> None:
    """Ready this process for DeepSpeed on CPU, before it is imported: the CPU accelerator
    (DeepSpeed picks CUDA whenever it sees a GPU), the environment's own extensions folder,
    where its CPU collective op is built and loaded from, and no stale lock there."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    use_own_extension_dir()
    clear_stale_build_locks()


def build_cpu_collective_op() -> None:
    """Build (or check) DeepSpeed's CPU shared-memory collective op where a CPU learner rank
    loads it from: ``make install`` runs this, so that the first run does not wait for it."""
    deepspeed_on_cpu()
    from deepspeed.accelerator import get_accelerator

    get_accelerator().create_op_builder("ShareMemCommBuilder").load()


def join_process_group(
    device: str, rank: int, world_size: int, master_addr: str | None, master_port: int | None
) -> None:
    """Join the learner ranks' group (gloo on CPU, NCCL on GPU) and make DeepSpeed use it.

    With ``master_addr`` the rank meets the others there; without it, the group this process
    already holds is used as it is.
    """
    if device == "cpu":
        deepspeed_on_cpu()
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
