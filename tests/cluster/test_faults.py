"""Roles killed mid-run: the run carries on and scores every item exactly once."""

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rlcs.runlog import read_metrics

ROOT = Path(__file__).resolve().parents[2]
RLCS = str(Path(sys.executable).with_name("rlcs"))
FAST = [
    "data.synthetic.sizes={rl_train: 6, heldout: 2, sft: 2, pretrain: 2}",
    "rollout.max_think_tokens=12",
    "rollout.max_answer_tokens=6",
    "run.prompts_per_iteration=3",
]

pytestmark = pytest.mark.slow


def _role_processes(driver: int, role: str) -> list[psutil.Process]:
    procs = []
    for p in psutil.Process(driver).children(recursive=True):
        try:
            if f"ray::{role}" in " ".join(p.cmdline()):
                procs.append(p)
        except psutil.NoSuchProcess:
            continue
    return procs


def test_killed_rollout_worker_and_reward_actor_are_restarted(tmp_path):
    n = 2
    sets = [*FAST, f"rollout.n={n}", "rollout.engine=hf", "run.iterations=4", "run.save_every=1",
            f"run.root={tmp_path}"]  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    proc = subprocess.Popen([RLCS, "train", "configs/tiny-text.yaml", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    first = tmp_path / "tiny-text" / "checkpoints" / "step_00000001"
    deadline = time.monotonic() + 600
    while not first.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    killed = [_role_processes(proc.pid, role) for role in ("RolloutWorker", "RewardActor")]
    assert all(killed), f"role processes not found: {killed}"
    for procs in killed:
        procs[0].kill()
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]

    recs = read_metrics(tmp_path / "tiny-text")
    assert [r["step"] for r in recs] == [1, 2, 3, 4]
    assert recs[-1]["errors/rollout_restarts"] >= 1
    # every rollout was reported to the curriculum exactly once: attempts = groups x n
    from rlcs.curriculum.persistence import load_curriculum

    cur = load_curriculum(tmp_path / "tiny-text", attach=False)
    assert int(cur.attempts.sum()) == n * int(sum(r["curriculum/groups"] for r in recs))
    assert "restarted" in err
