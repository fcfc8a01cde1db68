"""A torch extension build lock left by a killed process would make every later CPU learner
wait for it forever; the learner removes such locks when they are old, and only then."""

from __future__ import annotations

import logging
import os
import time

from actors.network import STALE_BUILD_LOCK_S, clear_stale_build_locks


def test_only_locks_older_than_a_build_are_removed(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    stale = tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "lock"
    fresh = tmp_path / "py311_cpu" / "other_op" / "lock"
    flat = tmp_path / "flat_op" / "lock"  # an extensions dir without the per-Python level
    for lock in (stale, fresh, flat):
        lock.parent.mkdir(parents=True)
        lock.write_text("")
    old = time.time() - STALE_BUILD_LOCK_S - 60
    for lock in (stale, flat):
        os.utime(lock, (old, old))
    (tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_text("")

    with caplog.at_level(logging.WARNING, logger="actors.network"):
        removed = clear_stale_build_locks()

    assert sorted(removed) == sorted([stale, flat])
    assert not stale.exists() and not flat.exists()
    assert fresh.exists()  # a build may hold it right now
    assert (stale.parent / "deepspeed_shm_comm.so").exists()  # only the lock goes
    assert "never finished" in caplog.text and str(stale) in caplog.text
    assert clear_stale_build_locks() == []
