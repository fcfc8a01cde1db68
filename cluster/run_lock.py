"""One driver per run directory.

Two drivers in one run directory (a job submitted twice, a second terminal) would interleave
their checkpoints, metrics and curriculum snapshots, and a driver starting over a run that
stopped before its first step would remove what the other one just wrote. The driver holds an
exclusive ``flock`` on ``RUN_DIR/driver.lock`` from the moment it claims the directory until
the run ends; the kernel drops it when the process dies, so a killed run leaves no stale lock.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = "driver.lock"

#: The open lock files of this process, by run directory.
_held: dict[Path, int] = {}


class RunDirBusy(RuntimeError):
    """Another driver holds the run directory."""


def lock_run_dir(run_dir: Path) -> None:
    """Take the run directory's lock, or raise RunDirBusy naming the driver that holds it.
    On a filesystem without ``flock`` (some network mounts) the run goes on unguarded, with a
    warning."""
    run_dir = run_dir.resolve()
    if run_dir in _held:
        raise RunDirBusy(f"{run_dir} is already in use by a run of this process")
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RunDirBusy(
            f"{run_dir} is in use by another rlcs driver ({holder}); wait for it to end, or "
            "give this run another directory (--set run.name=<new name>)"
        ) from None
    except OSError as e:
        os.close(fd)
        log.warning("cannot lock %s (%s): a second driver in this directory would go unnoticed",
                    run_dir / LOCK_FILE, e.strerror)  # fmt: skip
        return
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    _held[run_dir] = fd


def unlock_run_dir(run_dir: Path) -> None:
    """Release the lock taken by :func:`lock_run_dir` (nothing if this process holds none)."""
    fd = _held.pop(run_dir.resolve(), None)
    if fd is not None:
        os.close(fd)  # closing the only descriptor of the open file drops its flock
