"""`rlcs demo`'s own report.md, from a demo-shaped run directory (no training)."""

import pytest

import rlcs.report
from cluster.demo_report import domain_rewards, result_line, write_demo_report
from rlcs.runlog import RunLog, read_metrics


def _demo_root(tmp_path):
    """An RL run of 4 iterations with live evaluations at 2 and 4, and the demo's summary."""
    with RunLog(tmp_path / "rl", tensorboard=False) as log:
        for it in range(1, 5):
            m = {"reward/mean": 0.5, "reward/math": 0.1 * it, "pass_rate/math": 0.1 * it,
                 "reward/ocr": 0.9, "pass_rate/ocr": 0.9}  # fmt: skip
            if it % 2 == 0:
                m |= {"eval/pass_rate/math": 0.5 + 0.05 * it, "eval/pass_rate/ocr": 1.0,
                      "eval/pass_rate/all": 0.75 + 0.025 * it}  # fmt: skip
            log.log(it, m)
    (tmp_path / "rl" / "report.md").write_text("# rl")
    before = {"math": {"pass_rate": 0.5}, "ocr": {"pass_rate": 1.0}, "all": {"pass_rate": 0.75}}
    after = {"math": {"pass_rate": 0.7}, "ocr": {"pass_rate": 1.0}, "all": {"pass_rate": 0.85}}
    rewards = domain_rewards(read_metrics(tmp_path / "rl"))
    summary = {"sft_pass_rate": 0.75, "rl_pass_rate": 0.85, "gain_points": 10.0,
               "min_domain_rl_reward": min(rewards.values()), "wall_s": 321.0,
               "before": before, "after": after, "rl_reward": rewards, "heldout_items": 256,
               "stage_wall_s": {"data": 20.0, "pretrain": 100.0, "sft": 80.0, "rl": 121.0}}  # fmt: skip
    return summary


def test_the_demo_report_has_the_table_the_stage_times_and_the_plots(tmp_path):
    summary = _demo_root(tmp_path)
    text = write_demo_report(tmp_path, summary).read_text()
    assert text.startswith("# rlcs demo")
    assert result_line(summary) in text
    assert "| math | 50.0% | 70.0% | +20.0 | 0.250 |" in text  # mean of 0.1..0.4
    assert "| ocr | 100.0% | 100.0% | +0.0 | 0.900 |" in text
    assert "| all | 75.0% | 85.0% | +10.0 |  |" in text
    assert "| pretrain | 100 |" in text and "| total | 321 |" in text
    for png in ("held-out_pass_rate.png", "reward.png"):
        assert f"(report/{png})" in text
        assert (tmp_path / "report" / png).stat().st_size > 2000
    # links only to the stage reports that exist
    assert "[rl](rl/report.md)" in text and "pretrain/report.md" not in text


def test_the_held_out_curve_starts_at_the_sft_checkpoint(tmp_path, monkeypatch):
    summary = _demo_root(tmp_path)
    drawn = {}
    monkeypatch.setattr(rlcs.report, "line_plot",
                        lambda path, title, series, xlabel="": drawn.update({path.name: series}))  # fmt: skip
    write_demo_report(tmp_path, summary)
    curve = drawn["held-out_pass_rate.png"]
    assert curve["math"] == ([0, 2, 4], [0.5, 0.6, 0.7])
    assert curve["all"] == ([0, 2, 4], [0.75, 0.8, 0.85])
    assert drawn["reward.png"]["ocr"] == ([1, 2, 3, 4], [0.9] * 4)


def test_the_report_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    import pathlib

    summary = _demo_root(tmp_path)
    (tmp_path / "report.md").write_text("the earlier attempt's report")
    real = pathlib.Path.write_text

    def torn(self, text, *a, **k):  # the disk fills half-way
        real(self, text[:10], *a, **k)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", torn)
    with pytest.raises(OSError):
        write_demo_report(tmp_path, summary)
    monkeypatch.setattr(pathlib.Path, "write_text", real)
    assert (tmp_path / "report.md").read_text() == "the earlier attempt's report"


def test_the_table_shows_no_reward_for_a_domain_rl_did_not_draw(tmp_path):
    from rich.console import Console

    from cluster.demo_report import result_table

    summary = _demo_root(tmp_path)
    summary["rl_reward"] = {"math": 0.25}  # no OCR item drawn (data.domain_weights)
    console = Console(width=100, record=True)
    console.print(result_table(summary))
    text = console.export_text()
    assert "nan" not in text and "change (points)" in text
    row = next(line for line in text.splitlines() if "ocr" in line)
    assert [c.strip() for c in row.split("│")[1:-1]] == ["ocr", "100.0%", "100.0%", "+0.0", ""]
