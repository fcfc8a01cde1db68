"""``rlcs.report.write_report``: the stage report a run writes at its end."""

import pathlib

import pytest

from rlcs.report import write_report
from rlcs.runlog import RunLog


def test_the_report_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    with RunLog(tmp_path, tensorboard=False) as log:
        log.log(1, {"loss": 2.0}, stage="sft")
    (tmp_path / "report.md").write_text("the report before")
    real = pathlib.Path.write_text

    def torn(self, text, *a, **k):  # the run is stopped, or the disk fills, half-way
        real(self, text[:5], *a, **k)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", torn)
    with pytest.raises(OSError):
        write_report(tmp_path, title="tiny")
    monkeypatch.setattr(pathlib.Path, "write_text", real)
    assert (tmp_path / "report.md").read_text() == "the report before"
    assert write_report(tmp_path, title="tiny").read_text().startswith("# tiny")
    assert not list(tmp_path.glob("*.tmp"))
