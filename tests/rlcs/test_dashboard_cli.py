"""``rlcs dashboard RUN_DIR``: which directories it serves (a run, a demo's RL stage, a run about
to start) and which it refuses, with the reason on stderr."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def test_cli_refuses_a_missing_run_directory(tmp_path, capsys):
    from rlcs.dashboard import main

    args = argparse.Namespace(run_dir=str(tmp_path / "nope"), host="127.0.0.1", port=0, token=None)
    assert main(args) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_cli_prints_an_ipv6_address_in_brackets(run_dir, dashboard, monkeypatch, capsys):
    """``--host ::1`` is printed as the URL http://[::1]:PORT/, one a browser opens."""
    import socket

    import uvicorn

    from rlcs.dashboard import main

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
            port = s.getsockname()[1]
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(kw))
    args = argparse.Namespace(run_dir=str(run_dir[0]), host="::1", port=port, token=None)
    assert main(args) == 0
    assert served == [{"host": "::1", "port": port, "log_level": "warning"}]
    assert f"rlcs dashboard: http://[::1]:{port}/ for {run_dir[0]}" in capsys.readouterr().err


def test_rlcs_dashboard_command_serves_the_run(run_dir, dashboard):
    port = dashboard.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", "dashboard", str(run_dir[0]), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/summary", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["run"] == "curriculum-demo"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_demo_directory_is_served_through_its_rl_stage(run_dir, tmp_path):
    from fastapi.testclient import TestClient

    from rlcs.dashboard import resolve_run_dir
    from rlcs.dashboard.app import create_app

    demo = tmp_path / "demo"
    (demo / "pretrain").mkdir(parents=True)
    (demo / "pretrain" / "config.yaml").write_text("stage: pretrain\n")
    # still pretraining: the RL stage's directory is where the curriculum will appear
    assert resolve_run_dir(demo) == demo / "rl"
    assert create_app(resolve_run_dir(demo)) is not None
    shutil.copytree(run_dir[0], demo / "rl")
    assert resolve_run_dir(demo) == demo / "rl"
    series = TestClient(create_app(resolve_run_dir(demo))).get("/api/series").json()
    assert series["iterations"][-1] >= 40
    # a run directory, and any other directory, are served as given
    assert resolve_run_dir(demo / "rl") == demo / "rl"
    assert resolve_run_dir(tmp_path) == tmp_path


def _rlcs_dashboard(folder: Path, port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", "dashboard", str(folder), "--port", str(port)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_folder_of_runs_is_refused_naming_the_runs(run_dir, tmp_path, dashboard):
    runs = tmp_path / "runs"
    shutil.copytree(run_dir[0], runs / "curriculum-demo")
    (runs / "sft-run").mkdir()
    (runs / "sft-run" / "config.yaml").write_text("stage: sft\n")
    (runs / "demo" / "data").mkdir(parents=True)  # `rlcs demo` building its data
    (runs / "demo" / "demo-run.json").write_text("{}")
    (runs / "notes").mkdir()
    r = _rlcs_dashboard(runs, dashboard.free_port())
    assert r.returncode == 2 and "http://" not in r.stderr
    assert r.stderr.splitlines() == [
        f"rlcs dashboard: {runs} is a folder that holds 3 runs, not a run itself: "
        f"curriculum-demo, demo, sft-run; give one of them, e.g. rlcs dashboard "
        f"{runs / 'curriculum-demo'}"
    ]


def test_a_folder_with_no_run_is_refused_and_one_about_to_start_is_served(tmp_path, dashboard):
    from rlcs.dashboard import not_a_run, resolve_run_dir

    other = tmp_path / "other"
    (other / "photos").mkdir(parents=True)
    (other / "notes.txt").write_text("")
    r = _rlcs_dashboard(other, dashboard.free_port())
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"rlcs dashboard: {other} holds no run: no config.yaml, metrics.jsonl or curriculum/ in "
        "it or in a folder inside it; give a run directory, e.g. runs/demo/rl"
    ]
    starting = tmp_path / "starting"  # a run building its data, before its config.yaml
    (starting / "data").mkdir(parents=True)
    (starting / "data" / "rl_train.jsonl").write_text("")
    assert not_a_run(starting) is None
    # its driver takes the directory's lock first (cluster.run_lock), as `rlcs demo` starts the
    # dashboard on its RL stage
    (starting / "driver.lock").write_text("")
    assert not_a_run(starting) is None
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "driver.lock").write_text("")
    assert not_a_run(locked) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not_a_run(empty) is None and resolve_run_dir(empty) == empty
    demo = tmp_path / "demo"  # a demo still building its data is served through its RL stage
    demo.mkdir()
    (demo / "demo-run.json").write_text("{}")
    assert not_a_run(demo) is None and resolve_run_dir(demo) == demo / "rl"
