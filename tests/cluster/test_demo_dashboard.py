"""The demo's dashboard process: where it says it is, and that it ends with the demo."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from cluster import demo_dashboard


def test_the_dashboard_address_names_the_token_it_asks_for(monkeypatch, tmp_path):
    monkeypatch.delenv(demo_dashboard.DASHBOARD_TOKEN_ENV, raising=False)
    assert demo_dashboard.dashboard_line(tmp_path, 8266).startswith(
        "curriculum dashboard: http://127.0.0.1:8266/ (its log: "
    )
    monkeypatch.setenv(demo_dashboard.DASHBOARD_TOKEN_ENV, "s3cret")
    line = demo_dashboard.dashboard_line(tmp_path, 8266)
    assert "http://127.0.0.1:8266/?token=" in line and "RLCS_DASHBOARD_TOKEN" in line
    assert "s3cret" not in line  # not printed into the log


def test_the_dashboard_ends_with_the_demo_even_when_the_demo_is_killed(tmp_path):
    import subprocess

    with socket.socket() as s:  # a port free now, for a server that would serve on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    parent = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from cluster.demo_dashboard import start_dashboard\n"
        f"d = start_dashboard(Path({str(tmp_path / 'rl')!r}), {port}, "
        f"Path({str(tmp_path / 'log')!r}))\n"
        "print(d.pid, flush=True)\n"
        "os._exit(9)  # no finally, no exit handlers: as a kill leaves it\n"
    )
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                         cwd=Path(demo_dashboard.__file__).parents[1], timeout=60)  # fmt: skip
    child = int(out.stdout.split()[0])
    try:
        for _ in range(100):
            if not _alive(child):
                break
            time.sleep(0.1)
        assert not _alive(child), "the dashboard outlived the demo"
    finally:
        if _alive(child):
            import os
            import signal

            os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_stopping_the_dashboard_waits_for_it_and_kills_one_that_does_not_stop():
    import subprocess

    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)"
         "\nprint(flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE)  # fmt: skip
    stubborn.stdout.readline()  # its handler is set
    demo_dashboard.stop_dashboard(stubborn, timeout_s=0.5)
    assert stubborn.returncode is not None
