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


def test_a_sampler_restored_from_an_earlier_snapshot_drops_the_rows_it_replays(tmp_path):
    """A run killed at iteration 7 whose last snapshot is at 4 resumes from 4: until it has
    replayed 5 to 7, the store (and the dashboard drawn from it) must not show the killed
    attempt's rows for them: its header would say iteration 7 and, those rows being older,
    "finished or idle" while the resumed run is live."""
    from actors.sampler import LocalCurriculumSampler
    from rlcs.curriculum import read_store
    from rlcs.dashboard.reader import RunReader
    from rlcs.data import Item

    rng = np.random.default_rng(0)

    def iteration(sampler, batch):
        ids = sampler.next_batch(batch)
        sampler.report({i: (rng.random(4) < 0.5).tolist() for i in ids})
        sampler.end_iteration()
        return len(ids)

    items = [Item(id=f"m{i}", domain="math", prompt="?") for i in range(100)]
    first = LocalCurriculumSampler(tmp_path, items=items, config={"seed": 0})
    for _ in range(4):
        iteration(first, 8)
    first.save()
    for _ in range(3):
        iteration(first, 8)
    first.cur.store.close()
    store = tmp_path / "curriculum" / "aggregates.sqlite"
    assert [r["iteration"] for r in read_store(store)["iterations"]] == [1, 2, 3, 4, 5, 6, 7]

    resumed = LocalCurriculumSampler(tmp_path, resume=True)
    assert resumed.cur.iteration == 4
    kept = read_store(store)
    assert [r["iteration"] for r in kept["iterations"]] == [1, 2, 3, 4]
    assert {r["iteration"] for r in kept["tiers"]} == {1, 2, 3, 4}
    drawn = iteration(resumed, 3)  # the replayed iteration 5, smaller than the first's
    rows = read_store(store)["iterations"]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[-1]["sampled"] == drawn
    summary = RunReader(tmp_path).summary()
    assert summary["iteration"] == 5 and summary["updated"] == rows[-1]["time"]
    # the actor's restore() goes back to the saved state the same way
    iteration(resumed, 3)
    assert resumed.restore() == 4
    assert [r["iteration"] for r in read_store(store)["iterations"]] == [1, 2, 3, 4]


def test_a_sampler_started_over_in_a_run_directory_drops_the_earlier_attempts_rows(tmp_path):
    """`rlcs train --resume` on a run killed before its first snapshot starts its sampler
    afresh in the same directory: the killed attempt's rows are not this run's."""
    from actors.sampler import LocalCurriculumSampler
    from rlcs.curriculum import read_store
    from rlcs.dashboard.reader import RunReader
    from rlcs.data import Item

    items = [Item(id=f"m{i}", domain="math", prompt="?") for i in range(50)]
    killed = LocalCurriculumSampler(tmp_path, items=items, config={"seed": 0})
    for _ in range(3):
        ids = killed.next_batch(4)
        killed.report({i: [1.0, 0.0] for i in ids})
        killed.end_iteration()
    killed.cur.store.close()
    store = tmp_path / "curriculum" / "aggregates.sqlite"
    assert len(read_store(store)["iterations"]) == 3

    again = LocalCurriculumSampler(tmp_path, items=items, config={"seed": 0})
    assert read_store(store)["iterations"] == [] and read_store(store)["tiers"] == []
    assert RunReader(tmp_path).summary()["iteration"] == 0
    again.next_batch(4)
    again.end_iteration()
    assert [r["iteration"] for r in read_store(store)["iterations"]] == [1]
