"""One driver per run directory: a second one is refused, naming the first; a killed driver
leaves no stale lock."""

import subprocess
import sys
import textwrap

import pytest

from cluster.run_lock import LOCK_FILE, RunDirBusy, lock_run_dir, unlock_run_dir
from rlcs.config import load_config


def _hold(run_dir):
    """Another process that takes the lock and keeps it until killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from cluster.run_lock import lock_run_dir
        lock_run_dir(Path({str(run_dir)!r}))
        print("locked", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_driver_is_refused_and_a_killed_one_leaves_no_lock(tmp_path):
    proc = _hold(tmp_path)
    try:
        with pytest.raises(
            RunDirBusy, match=rf"in use by another rlcs driver \(pid {proc.pid} on "
        ):
            lock_run_dir(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    lock_run_dir(tmp_path)  # the kernel dropped the dead driver's lock
    try:
        with pytest.raises(RunDirBusy, match="already in use by a run of this process"):
            lock_run_dir(tmp_path)
    finally:
        unlock_run_dir(tmp_path)
    lock_run_dir(tmp_path)
    unlock_run_dir(tmp_path)
    assert (tmp_path / LOCK_FILE).is_file()


def test_train_refuses_a_run_directory_another_driver_holds(tmp_path):
    """Even a run that stopped before its first step, which the same command would start over,
    is left alone while another driver holds its directory."""
    from cluster.train import train

    cfg = load_config(None, ["model.tiny=text", f"run.root={tmp_path}", "run.name=r"])
    run = cfg.run_dir
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("stage: rl\n")
    proc = _hold(run)
    try:
        with pytest.raises(RunDirBusy, match=f"pid {proc.pid}"):
            train(cfg)
    finally:
        proc.kill()
        proc.wait()
    assert (run / "config.yaml").read_text() == "stage: rl\n"
    assert (run / "checkpoints").is_dir()


def test_a_run_stopped_by_its_data_leaves_no_lock_file_nor_empty_folder(tmp_path):
    """A bad dataset stops `train` before it writes anything: the folder it made for the run
    goes again; a folder that held something else is left as it is (with the lock file, which
    only marks where the lock is taken)."""
    from cluster.train import train

    data = tmp_path / "bad.jsonl"
    data.write_text('{"id": "a", "domain": "math", "prompt": "x", "answer": "1", '
                    '"difficulty": "bogus"}\n')  # fmt: skip
    sets = ["model.tiny=text", "data.synthetic=null", f"data.train=[{str(data)!r}]",
            f"run.root={tmp_path / 'runs'}", "run.name=r"]  # fmt: skip
    with pytest.raises(ValueError, match="unknown tier 'bogus'"):
        train(load_config(None, sets))
    assert list((tmp_path / "runs").iterdir()) == []
    kept = tmp_path / "runs" / "r"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="unknown tier 'bogus'"):
        train(load_config(None, sets))
    assert sorted(p.name for p in kept.iterdir()) == [LOCK_FILE, "notes.txt"]
    assert (kept / "notes.txt").read_text() == "mine"
    # the lock is free again
    lock_run_dir(kept)
    unlock_run_dir(kept)
