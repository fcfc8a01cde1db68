"""Crash-safe snapshots of the sampler's state in ``RUN_DIR/curriculum/``.

A snapshot is a folder of ``.npy`` arrays plus ``meta.json``. It is written under a temporary
name, every file fsynced, then renamed into place, and only then does the ``LATEST`` pointer
(itself written tmp + fsync + rename) move to it. A kill at any moment leaves ``LATEST``
naming a complete snapshot. The ``.npy`` files can be memory-mapped, which is how the
dashboard reads 10M items without loading them.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

LATEST = "LATEST"
PREFIX = "state-"


class SnapshotError(RuntimeError):
    """No readable snapshot in a run directory."""


class CorruptSnapshotError(RuntimeError):
    """The latest snapshot exists but cannot be read back (a damaged or edited file).

    Deliberately not a ``SnapshotError``: callers take that one to mean "nothing saved yet"
    and start afresh, which would let the next saves prune the run's older snapshots.
    """


def corrupt(snap: Path, problem: str) -> CorruptSnapshotError:
    """The error for a damaged snapshot: which one, what is wrong, and what to do about it."""
    older = sorted(p.name for p in snap.parent.glob(f"{PREFIX}*") if p != snap)
    hint = (
        f"older snapshots: {', '.join(older)}; write one's name to {snap.parent / LATEST} to "
        "resume from it"
        if older
        else "no older snapshot is kept"
    )
    return CorruptSnapshotError(
        f"curriculum snapshot {snap} is damaged ({problem}); nothing was changed or removed; "
        + hint
    )


def fsync_path(path: str | Path) -> None:
    """Flush a file, or a folder's entries, to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, write) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def write_snapshot(
    folder: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any], keep: int = 2
) -> Path:
    """Write one snapshot atomically and point ``LATEST`` at it; keep the newest ``keep``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    name = f"{PREFIX}{int(meta['iteration']):08d}-{time.time_ns()}"
    tmp = folder / f".tmp-{name}"
    tmp.mkdir()
    for key, value in arrays.items():
        _write_file(tmp / f"{key}.npy", lambda f, v=value: np.save(f, v, allow_pickle=False))
    _write_file(tmp / "meta.json", lambda f: f.write(json.dumps(meta).encode()))
    fsync_path(tmp)
    final = folder / name
    os.rename(tmp, final)
    fsync_path(folder)
    pointer = folder / f".{LATEST}.tmp"
    _write_file(pointer, lambda f: f.write(name.encode()))
    os.replace(pointer, folder / LATEST)
    fsync_path(folder)
    for old in sorted(folder.glob(f"{PREFIX}*"))[:-keep]:
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_snapshot(folder: str | Path) -> Path:
    """The snapshot ``LATEST`` names, or else the newest complete one."""
    folder = Path(folder)
    pointer = folder / LATEST
    if pointer.is_file():
        target = folder / pointer.read_text().strip()
        if (target / "meta.json").is_file():
            return target
    candidates = sorted(p for p in folder.glob(f"{PREFIX}*") if (p / "meta.json").is_file())
    if not candidates:
        raise SnapshotError(f"no saved curriculum state in {folder}")
    return candidates[-1]


def _meta_of(snap: Path) -> dict[str, Any]:
    try:
        meta = json.loads((snap / "meta.json").read_text())
    except ValueError as e:  # not JSON, or not UTF-8
        raise corrupt(snap, f"meta.json: {e}") from None
    if not isinstance(meta, dict) or "iteration" not in meta:
        raise corrupt(snap, "meta.json holds no iteration")
    return meta


def read_meta(folder: str | Path) -> dict[str, Any]:
    """The latest snapshot's meta alone (iteration, config, ...), without its arrays."""
    return _meta_of(latest_snapshot(folder))


def read_snapshot(
    folder: str | Path, mmap: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Load the latest snapshot's arrays (memory-mapped, read-only, if ``mmap``) and meta."""
    return read_snapshot_at(latest_snapshot(folder), mmap)


def read_snapshot_at(
    snap: str | Path, mmap: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Load one snapshot folder; a file that cannot be read raises ``CorruptSnapshotError``."""
    snap = Path(snap)
    meta = _meta_of(snap)
    mode = "r" if mmap else None
    arrays = {}
    for p in snap.glob("*.npy"):
        try:
            arrays[p.stem] = np.load(p, mmap_mode=mode, allow_pickle=False)
        except (ValueError, EOFError) as e:  # truncated or overwritten
            raise corrupt(snap, f"{p.name}: {e}") from None
    return arrays, meta
