"""One driver per run directory: a second one is refused, naming the first; a killed driver
leaves no stale lock."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cluster.run_lock import LOCK_FILE, RunDirBusy, lock_run_dir, new_folders, unlock_run_dir
from rlcs.config import load_config

ROOT = Path(__file__).resolve().parents[2]


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
    goes again, and so do the parents it made for it (run.root did not exist); a folder that
    held something else is left as it is, less the lock file this launch made in it."""
    from cluster.train import train

    data = tmp_path / "bad.jsonl"
    data.write_text('{"id": "a", "domain": "math", "prompt": "x", "answer": "1", '
                    '"difficulty": "bogus"}\n')  # fmt: skip
    sets = ["model.tiny=text", "data.synthetic=null", f"data.train=[{str(data)!r}]",
            f"run.root={tmp_path / 'runs' / 'new' / 'deeper'}", "run.name=r"]  # fmt: skip
    with pytest.raises(ValueError, match="unknown tier 'bogus'"):
        train(load_config(None, sets))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
    kept = tmp_path / "runs" / "new" / "deeper" / "r"
    kept.mkdir(parents=True)
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="unknown tier 'bogus'"):
        train(load_config(None, sets))
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]
    assert (kept / "notes.txt").read_text() == "mine"
    # a lock file an earlier driver left (a run killed, or one that finished) is not this
    # launch's to remove
    (kept / LOCK_FILE).write_text("pid 1 on elsewhere\n")
    with pytest.raises(ValueError, match="unknown tier 'bogus'"):
        train(load_config(None, sets))
    assert sorted(p.name for p in kept.iterdir()) == [LOCK_FILE, "notes.txt"]
    # the lock is free again
    lock_run_dir(kept)
    unlock_run_dir(kept)


def test_a_run_stopped_after_building_its_data_leaves_the_data_and_no_lock_file(tmp_path):
    """The synthetic data is built into RUN_DIR/data before a later check of it fails: the run
    directory stays (its data/ is kept for the next launch), its lock file does not."""
    from cluster.train import train

    cfg = load_config(
        ROOT / "configs" / "tiny-text.yaml",
        ["data.synthetic.sizes={rl_train: 2, heldout: 1, sft: 1, pretrain: 1}",
         "data.domain_weights={math: 1, grounding: 1}",
         f"run.root={tmp_path / 'a' / 'b'}", "run.name=r"],
    )  # fmt: skip
    with pytest.raises(ValueError, match="names 'grounding', which no RL item has"):
        train(cfg)
    run = tmp_path / "a" / "b" / "r"
    assert [p.name for p in run.iterdir()] == ["data"]
    assert (run / "data" / "done.json").is_file()


def test_unlocking_removes_only_empty_folders_and_a_lock_file_it_made(tmp_path):
    run = tmp_path / "x" / "y" / "run"
    made = new_folders(run)
    assert made == [run, run.parent, run.parent.parent]
    run.mkdir(parents=True)
    (tmp_path / "x" / "other.txt").write_text("someone's")
    lock_run_dir(run)
    assert (run / LOCK_FILE).is_file()
    unlock_run_dir(run, remove_lock=True, made=made)
    # the run's folder and y/ were empty, x/ is not: it stays, with what it held
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["other.txt", "x"]
    # a plain unlock (a run that ended well) keeps the file, and so does one that removes
    # only a lock file it made
    run.mkdir(parents=True)
    lock_run_dir(run)
    unlock_run_dir(run)
    assert (run / LOCK_FILE).is_file()
    lock_run_dir(run)
    unlock_run_dir(run, remove_lock=True)
    assert (run / LOCK_FILE).is_file()  # it was there before this lock


def test_a_lock_is_not_taken_on_a_file_its_last_holder_removed(tmp_path, monkeypatch):
    """A driver that opened the lock file just before its holder removed it (stopping on an
    error) would lock a file no longer in the folder, and a third driver would lock the new
    one: both would run. The lock is taken again on the file the folder holds."""
    import fcntl

    from cluster import run_lock

    (tmp_path / LOCK_FILE).write_text("pid 1 on elsewhere\n")
    real, calls = fcntl.flock, []

    def flock(fd, op):
        if not calls:  # the holder removes the file between this driver's open and its lock
            (tmp_path / LOCK_FILE).unlink()
        calls.append(fd)
        return real(fd, op)

    monkeypatch.setattr(run_lock.fcntl, "flock", flock)
    lock_run_dir(tmp_path)
    try:
        assert len(calls) == 2
        fd, _ = run_lock._held[tmp_path.resolve()]
        assert os.fstat(fd).st_ino == (tmp_path / LOCK_FILE).stat().st_ino
        monkeypatch.setattr(run_lock.fcntl, "flock", real)
        probe = subprocess.run(
            [sys.executable, "-c", f"from pathlib import Path; from cluster.run_lock import "
             f"lock_run_dir; lock_run_dir(Path({str(tmp_path)!r}))"],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        assert "RunDirBusy" in probe.stderr
    finally:
        unlock_run_dir(tmp_path)
