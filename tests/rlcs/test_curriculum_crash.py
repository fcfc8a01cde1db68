"""Crash safety: a writer killed in the middle of a save leaves the previous state readable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rlcs.config import CurriculumConfig
from rlcs.curriculum import Curriculum

WRITER = r"""
import sys, time
import numpy as np
from rlcs.config import CurriculumConfig
from rlcs.curriculum import Curriculum, snapshot

run_dir, slow = sys.argv[1], float(sys.argv[2])
original = snapshot._write_file

def slow_write(path, write):  # widen the window so that the kill lands inside a save
    original(path, write)
    time.sleep(slow)

snapshot._write_file = slow_write
rng = np.random.default_rng(0)
cur = Curriculum(rng.integers(0, 3, 20000), CurriculumConfig(seed=3))
while True:
    idx = cur.next_batch(256)
    cur.report(idx, rng.random((len(idx), 8)) < 0.4)
    cur.end_iteration()
    print(f"saving {cur.iteration}", flush=True)
    cur.save(run_dir)
    print(f"saved {cur.iteration}", flush=True)
"""


def replay(iterations: int) -> Curriculum:
    """The writer's sampler, rebuilt in-process up to ``iterations``."""
    rng = np.random.default_rng(0)
    cur = Curriculum(rng.integers(0, 3, 20000), CurriculumConfig(seed=3))
    for _ in range(iterations):
        idx = cur.next_batch(256)
        cur.report(idx, rng.random((len(idx), 8)) < 0.4)
        cur.end_iteration()
    return cur


@pytest.mark.slow
def test_kill_during_save_then_restore_gives_the_last_complete_state(tmp_path: Path):
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), "0.1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        saved = 0
        for line in proc.stdout:
            kind, it = line.split()
            if kind == "saved":
                saved = int(it)
            elif saved >= 2:  # "saving N+1": kill it mid-write
                time.sleep(0.3)  # the save now runs for 2 s (20 files, 0.1 s each)
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait(timeout=30)
    folder = tmp_path / "curriculum"
    assert list(folder.glob(".tmp-state-*")), "the kill should have landed inside a save"
    restored = Curriculum.restore(tmp_path, attach=False)
    assert restored.iteration == saved
    expected = replay(saved)
    assert np.array_equal(restored.attempts, expected.attempts)
    assert np.array_equal(restored.next_batch(300), expected.next_batch(300))
    restored.save(tmp_path)  # the next save clears the half-written leftovers
    assert not list(folder.glob(".tmp-state-*"))
