"""The demo's curriculum dashboard: ``rlcs dashboard`` served in a child process while RL runs,
which ends with the demo however the demo ends, and the line that says where it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The environment variable whose token ``rlcs dashboard`` asks for when it is set
DASHBOARD_TOKEN_ENV = "RLCS_DASHBOARD_TOKEN"

#: ``rlcs dashboard`` in a process that ends when the demo's does, however that ends: a demo
#: killed outright (``kill``, an OOM) runs no ``finally``, and its server would go on holding
#: the port that ``rlcs demo --resume`` then finds taken. argv: the demo's pid, then the
#: ``rlcs`` arguments.
DASHBOARD_BOOT = """\
import os, sys, threading, time
parent = int(sys.argv[1])
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
from cluster.cli import main
sys.exit(main(sys.argv[2:]))
"""


def start_dashboard(run_dir: Path, port: int, log: Path) -> subprocess.Popen:
    """The dashboard server for ``run_dir``, its output in ``log``; it stops when this process
    ends (``stop_dashboard`` stops it before)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    argv = [str(os.getpid()), "dashboard", str(run_dir), "--port", str(port)]
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-c", DASHBOARD_BOOT, *argv], stdout=out, stderr=subprocess.STDOUT
        )


def stop_dashboard(dash: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """Stop the server and wait for it: killed if it does not stop within ``timeout_s``."""
    dash.terminate()
    try:
        dash.wait(timeout_s)
    except subprocess.TimeoutExpired:
        dash.kill()
        dash.wait()


def dashboard_line(root: Path, port: int) -> str:
    """What the demo prints where it starts the dashboard: the address, and the token that it
    asks for when ``$RLCS_DASHBOARD_TOKEN`` is set (the server reads it from there)."""
    line = f"curriculum dashboard: http://127.0.0.1:{port}/"
    if os.environ.get(DASHBOARD_TOKEN_ENV):
        line += f"?token=<${DASHBOARD_TOKEN_ENV}> (it asks for the token in ${DASHBOARD_TOKEN_ENV})"
    return line + f" (its log: {root / 'dashboard.log'})"
