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


def unlock_run_dir(run_dir: Path, tidy: bool = False, remove_dir: bool = False) -> None:
    """Release the lock taken by :func:`lock_run_dir` (nothing if this process holds none).

    With ``tidy``, a run that wrote nothing (it stopped at a check of its data or model) leaves
    no lock file behind: when the directory holds only the lock, the file is removed while still
    locked, and with ``remove_dir`` the directory too (the caller created it). A directory with
    anything else in it is left exactly as it is.
    """
    run_dir = run_dir.resolve()
    fd = _held.pop(run_dir, None)
    if fd is None:
        return
    try:
        if tidy and [p.name for p in run_dir.iterdir()] == [LOCK_FILE]:
            (run_dir / LOCK_FILE).unlink()
            if remove_dir:
                run_dir.rmdir()
    except OSError as e:  # a file appeared meanwhile, or the folder is not ours to remove
        log.debug("left %s as it is (%s)", run_dir, e)
    finally:
        os.close(fd)  # closing the only descriptor of the open file drops its flock
