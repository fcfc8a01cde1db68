"""Progress bars: a bar in a terminal, plain lines in a log."""

from __future__ import annotations

import io

import pytest

from rlcs.progress import LOG_INTERVAL_S, LineWriter, log_interval_s, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_gets_lines_without_carriage_returns(monkeypatch):
    monkeypatch.delenv("RLCS_PROGRESS_INTERVAL", raising=False)
    log = io.StringIO()
    for _ in progress_bar(range(50), desc="rl", unit="iter", file=log):
        pass
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # quick work inside the 30 s interval: the opening state and the closing one only
    assert len(lines) == 2, lines
    assert lines[0].startswith("rl:   0%") and "0/50" in lines[0]
    assert lines[1].startswith("rl: 100%") and "50/50" in lines[1]
    assert all(line == line.rstrip() for line in lines)


def test_interval_from_environment(monkeypatch):
    monkeypatch.setenv("RLCS_PROGRESS_INTERVAL", "0")
    log = io.StringIO()
    bar = progress_bar(total=3, desc="eval", file=log)
    for _ in range(3):
        bar.update()
    bar.close()
    lines = log.getvalue().splitlines()
    assert [line.split("|")[0] for line in lines[:4]] == [
        "eval:   0%",
        "eval:  33%",
        "eval:  67%",
        "eval: 100%",
    ]


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_bad_interval_is_refused(monkeypatch, raw):
    monkeypatch.setenv("RLCS_PROGRESS_INTERVAL", raw)
    with pytest.raises(ValueError, match="RLCS_PROGRESS_INTERVAL"):
        log_interval_s()


def test_default_interval(monkeypatch):
    monkeypatch.setenv("RLCS_PROGRESS_INTERVAL", " ")
    assert log_interval_s() == LOG_INTERVAL_S


def test_terminal_keeps_the_redrawn_bar():
    term = _Terminal()
    for _ in progress_bar(range(3), desc="sft", file=term, mininterval=0):
        pass
    assert "\r" in term.getvalue()


def test_line_writer_drops_clears():
    out = io.StringIO()
    w = LineWriter(out)
    assert w.write("\r" + " " * 20 + "\r") == 22
    w.write("\rstate 1   ")
    w.write("\n")
    assert out.getvalue() == "state 1\n"


def test_a_new_postfix_waits_for_the_next_line_in_a_log(monkeypatch):
    """The training loops set a postfix every step; in a log that must not write a line each
    time (tqdm's set_postfix redraws at once), only at the interval."""
    monkeypatch.delenv("RLCS_PROGRESS_INTERVAL", raising=False)
    log = io.StringIO()
    bar = progress_bar(range(20), desc="rl", unit="iter", file=log)
    for i in bar:
        bar.set_postfix(reward=f"{i / 20:.2f}")
    lines = log.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "reward=0.95" in lines[-1]
    term = _Terminal()
    bar = progress_bar(range(2), desc="rl", file=term)
    for i in bar:
        bar.set_postfix(reward=f"{i:.2f}")
    assert "reward=1.00" in term.getvalue()
