"""A torch extension build lock left by a killed process would make every later CPU learner
wait for it forever; the learner removes such locks when they are old, and only then. And two
Python environments of one machine build their extensions apart."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from actors.network import STALE_BUILD_LOCK_S, clear_stale_build_locks

WHERE = "from actors.network import use_own_extension_dir as u; print(u())"


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


def test_each_python_environment_builds_its_extensions_in_a_folder_of_its_own(tmp_path):
    """torch's extensions folder is keyed by the Python version alone, and a build records the
    include paths of the environment that made it: two venvs of one machine rebuilt DeepSpeed's
    CPU collective op over each other's (45 s at a learner's start). Each has its own now."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    env["HOME"] = str(tmp_path)  # torch's default root is under ~/.cache
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    ours = subprocess.run([sys.executable, "-c", WHERE], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    other = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    theirs = subprocess.run([str(other / "bin" / "python"), "-c", WHERE], env=env,
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    root = tmp_path / ".cache" / "torch_extensions"
    assert os.path.dirname(ours) == os.path.dirname(theirs) == str(root)
    assert ours != theirs and os.path.basename(ours).startswith("env-")
    # the same environment, the same folder; a folder named by the user is kept
    again = subprocess.run([sys.executable, "-c", WHERE], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()  # fmt: skip
    assert again == ours
    named = subprocess.run([sys.executable, "-c", WHERE], capture_output=True, text=True,
                           env={**env, "TORCH_EXTENSIONS_DIR": str(tmp_path / "mine")},
                           check=True).stdout.strip()  # fmt: skip
    assert named == str(tmp_path / "mine")
