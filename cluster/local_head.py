"""Start a local Ray head with token authentication, for `ray job submit` on one machine.

`ray start` is run with `--block` in its own process session, so stopping it takes down
exactly the processes it started and leaves any other Ray instance on the machine alone.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from actors.network import free_port


@dataclass(frozen=True)
class LocalHead:
    gcs_address: str
    dashboard_url: str
    env: dict[str, str]

    def submit(self, *entrypoint: str, working_dir: str | None = None, timeout: float = 600):
        """`ray job submit` an entrypoint and wait for it; returns the CompletedProcess."""
        cmd = [ray_cli(), "job", "submit", "--address", self.dashboard_url]
        if working_dir:
            cmd += ["--working-dir", working_dir]
        cmd += ["--", *entrypoint]
        deadline = time.monotonic() + 60
        while True:
            r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
            # the head answers before its job agent has registered, on a busy machine: the job
            # was refused, not started, so it is sent again
            if r.returncode == 0 or NO_AGENT not in r.stdout + r.stderr:
                return r
            if time.monotonic() > deadline:
                return r
            time.sleep(2)


#: Ray's answer to a job submitted before the head's job agent is up ("please try again later")
NO_AGENT = "No available agent to submit job"


def ray_cli() -> str:
    """The `ray` executable of this interpreter's environment, so an unactivated venv works."""
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.is_file() else "ray"


@contextmanager
def local_ray_head(
    num_cpus: int = 1, token: str | None = None, ready_timeout: float = 120
) -> Iterator[LocalHead]:
    """Run a token-authenticated Ray head on 127.0.0.1 for the duration of the block. Its jobs
    find this interpreter's environment's commands (`rlcs`, `ray`) first on their PATH, as
    they would in the activated venv."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token or secrets.token_hex(32))
    env.pop("RAY_ADDRESS", None)
    env["PATH"] = os.pathsep.join(
        p for p in (str(Path(sys.executable).parent), env.get("PATH")) if p
    )
    gcs, dash = free_port(), free_port()
    cmd = [
        ray_cli(), "start", "--head", "--block",
        f"--port={gcs}",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dash}",
        f"--num-cpus={num_cpus}",
        f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--metrics-export-port={free_port()}",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    head = LocalHead(f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dash}", env)
    try:
        _wait_ready(head, proc, ready_timeout)
        yield head
    finally:
        _stop(proc)


def _wait_ready(head: LocalHead, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"ray start exited with {proc.returncode}:\n{out[-2000:]}")
        r = subprocess.run(
            [ray_cli(), "job", "list", "--address", head.dashboard_url],
            env=head.env, capture_output=True, text=True,
        )  # fmt: skip
        if r.returncode == 0:
            return
        time.sleep(1.0)
    raise TimeoutError(f"Ray head at {head.dashboard_url} not ready after {timeout:.0f}s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
