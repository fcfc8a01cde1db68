"""One driver per run directory.

Two drivers in one run directory (a job submitted twice, a second terminal) would interleave
their checkpoints, metrics and curriculum snapshots, and a driver starting over a run that
stopped before its first step would remove what the other one just wrote. The driver holds an
exclusive ``flock`` on ``RUN_DIR/driver.lock`` from the moment it claims the directory until
the run ends; the kernel drops it when the process dies, so a killed run leaves no stale lock.
A driver that stops on an error removes the lock file, and the folders it made for the run
while they are empty.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = "driver.lock"

#: The open lock files of this process, by run directory, each with whether this process
#: created it.
_held: dict[Path, tuple[int, bool]] = {}


class RunDirBusy(RuntimeError):
    """Another driver holds the run directory."""


def lock_run_dir(run_dir: Path) -> None:
    """Take the run directory's lock, or raise RunDirBusy naming the driver that holds it.
    On a filesystem without ``flock`` (some network mounts) the run goes on unguarded, with a
    warning."""
    run_dir = run_dir.resolve()
    if run_dir in _held:
        raise RunDirBusy(f"{run_dir} is already in use by a run of this process")
    path = run_dir / LOCK_FILE
    while True:
        try:  # whether this launch made the file decides whether unlocking may remove it
            fd, created = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            try:
                fd, created = os.open(path, os.O_RDWR), False
            except FileNotFoundError:  # removed meanwhile by the driver that held it
                continue
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
            log.warning("cannot lock %s (%s): a second driver in this directory would go "
                        "unnoticed", path, e.strerror)  # fmt: skip
            return
        if _same_file(fd, path):
            break
        # the driver that held it removed the file as it ended (``unlock_run_dir`` with
        # ``remove_lock``) after this one opened it: a lock on the removed file guards nothing
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    _held[run_dir] = (fd, created)


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def new_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, deepest first: what creating
    ``folder`` now would make (for ``unlock_run_dir``'s ``made``)."""
    made = []
    folder = folder.absolute()
    for p in (folder, *folder.parents):
        if p.exists() or p.is_symlink():
            break
        made.append(p)
    return made


def unlock_run_dir(run_dir: Path, remove_lock: bool = False, made: Sequence[Path] = ()) -> None:
    """Release the lock taken by :func:`lock_run_dir` (nothing if this process holds none).

    ``remove_lock`` (a driver that stopped on an error): the lock file goes too when this
    process created it, removed while still locked, so that the directory does not look like a
    run about to start (one an earlier driver left is kept). ``made``: the
    folders this launch created for the run (``new_folders``, deepest first); each is removed
    if it is empty, and the first that is not stops that, so a folder holding anything (the
    run's ``data/``, a file of the user's) is left exactly as it is.
    """
    run_dir = run_dir.resolve()
    fd, created = _held.pop(run_dir, (None, False))
    if fd is None:
        return
    try:
        if remove_lock and created:
            (run_dir / LOCK_FILE).unlink(missing_ok=True)
        for folder in made:
            folder.rmdir()  # only ever an empty folder
    except OSError as e:  # a folder that holds something, or is not ours to remove
        log.debug("left %s as it is (%s)", e.filename, e.strerror)
    finally:
        os.close(fd)  # closing the only descriptor of the open file drops its flock
