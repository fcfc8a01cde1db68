"""Checkpoint retention, the optional Hugging Face export beside each checkpoint, and a save
that cannot be written (cluster.checkpointing). The learner here is a stand-in that writes what
the real one would name; the real learner's checkpoints are covered by
tests/cluster/test_train.py."""

from pathlib import Path
from types import SimpleNamespace

from cluster.checkpointing import Checkpointer, tag_of
from rlcs.config import load_config


class FakeLearner:
    def __init__(self):
        self.exported: list[Path] = []

    def save_checkpoint(self, root: Path, tag: str, client_state: dict) -> None:
        (root / tag).mkdir(parents=True)
        (root / tag / "state.txt").write_text(str(client_state["step"]))
        (root / "latest").write_text(tag)

    def export_hf(self, out_dir: Path) -> str:
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        self.exported.append(out_dir)
        return str(out_dir)


def _saved(tmp_path, *sets: str) -> tuple[Checkpointer, FakeLearner]:
    cfg = load_config("configs/tiny-text.yaml", ["stage=sft", "learner.steps=10", *sets])
    ckpt = Checkpointer(tmp_path, cfg)
    roles = SimpleNamespace(learner=FakeLearner(), sampler=None)
    for step in range(1, 11):
        ckpt.maybe_save(roles, step)
    return ckpt, roles.learner


def test_the_newest_checkpoints_are_kept_and_resume_takes_the_last(tmp_path):
    ckpt, learner = _saved(tmp_path, "run.save_every=2")
    assert ckpt.steps() == [8, 10]  # the default keeps two
    assert ckpt.resume_point() == 10
    assert learner.exported == []  # no Hugging Face export unless asked

    ckpt, _ = _saved(tmp_path / "three", "run.save_every=2", "run.keep_checkpoints=3")
    assert ckpt.steps() == [6, 8, 10]
    ckpt, _ = _saved(tmp_path / "all", "run.save_every=3", "run.keep_checkpoints=0")
    assert ckpt.steps() == [3, 6, 9, 10]  # every one, and the last step always


def test_hf_export_beside_each_checkpoint_goes_with_it(tmp_path):
    ckpt, learner = _saved(tmp_path, "run.save_every=5", "run.keep_checkpoints=1",
                           "run.export_hf_checkpoints=true")  # fmt: skip
    assert learner.exported == [tmp_path / "checkpoints" / tag_of(s) / "hf" for s in (5, 10)]
    assert ckpt.steps() == [10]
    assert (tmp_path / "checkpoints" / tag_of(10) / "hf" / "config.json").is_file()
    assert not (tmp_path / "checkpoints" / tag_of(5)).exists()


def test_a_checkpoint_an_earlier_attempt_left_unfinished_is_dropped_not_kept(tmp_path):
    """RL saves the learner's checkpoint, then the curriculum's snapshot, which resume
    follows. Killed between the two at step 20, the run resumes from step 10; when it then
    saves an earlier step (a time limit, fewer iterations), the orphan of step 20 counted as
    the newest checkpoint and pruning deleted the step just saved: nothing left to resume."""
    cfg = load_config("configs/tiny-text.yaml", ["learner.steps=30", "run.keep_checkpoints=1"])
    ckpt = Checkpointer(tmp_path, cfg)
    roles = SimpleNamespace(learner=FakeLearner(), sampler=None)
    ckpt.save(roles, 10)
    roles.learner.save_checkpoint(ckpt.root, tag_of(20), {"step": 20})  # the orphan
    ckpt.save(roles, 15)
    assert ckpt.steps() == [15]
    ckpt.save(roles, 16)
    assert ckpt.steps() == [16]


def test_a_checkpoint_that_cannot_be_written_stops_the_run_saying_where_and_why(tmp_path):
    """A save that fails for want of space (or permission) on every rank reaches the driver as
    the rank's OSError inside Ray's task error: it becomes ``SaveFailed`` with the step, the
    folder and the cause, and the run's message says how to go on. Other errors pass as they
    are. The checkpoints before it stay the ones resume takes."""
    import pytest
    import ray

    from cluster.checkpointing import SaveFailed
    from cluster.train import stopped_by

    class FailingLearner(FakeLearner):
        def __init__(self, error: Exception):
            super().__init__()
            self.error = error

        def save_checkpoint(self, root: Path, tag: str, client_state: dict) -> None:
            if client_state["step"] == 4:
                raise ray.exceptions.RayTaskError(
                    "Learner.save_checkpoint", "Traceback ...", self.error
                ).as_instanceof_cause()
            super().save_checkpoint(root, tag, client_state)

    cfg = load_config("configs/tiny-text.yaml", ["stage=sft", "learner.steps=10",
                                                  "run.save_every=2"])  # fmt: skip
    ckpt = Checkpointer(tmp_path, cfg)
    roles = SimpleNamespace(learner=FailingLearner(OSError(28, "No space left on device")),
                            sampler=None)  # fmt: skip
    with pytest.raises(SaveFailed) as e:
        for step in range(1, 5):
            ckpt.maybe_save(roles, step)
    root = tmp_path / "checkpoints"
    assert str(e.value) == (
        f"the checkpoint of step 4 could not be written in {root} "
        "(OSError: [Errno 28] No space left on device)"
    )
    assert ckpt.resume_point() == 2
    assert stopped_by(e.value, 2, root).endswith(
        f"up to step 2 are intact in {root}: make room there (or fix the folder's "
        "permissions) and continue with --resume"
    )
    # a rank's full disk that left the other ranks stuck in the save's barrier is one too
    from actors.rank_calls import RanksStuck

    class StuckLearner(FakeLearner):
        def save_checkpoint(self, root: Path, tag: str, client_state: dict) -> None:
            err = OSError(28, "No space left on device")
            raise RanksStuck("learner rank 1 failed in save_checkpoint ...") from (
                ray.exceptions.RayTaskError("save_checkpoint", "...", err).as_instanceof_cause()
            )

    roles.learner = StuckLearner()
    with pytest.raises(SaveFailed, match=r"step 4 could not be written .*\(OSError: \[Errno 28\]"):
        ckpt.save(roles, 4)
    roles.learner = FailingLearner(ValueError("a bug"))
    with pytest.raises(ValueError) as other:
        ckpt.save(roles, 4)
    assert not isinstance(other.value, SaveFailed) and str(other.value.cause) == "a bug"
