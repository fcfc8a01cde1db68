import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import cli


def test_help_lists_every_planned_subcommand():
    r = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "--help"], capture_output=True, text=True
    )
    assert r.returncode == 0
    for name in ("train", "demo", "eval", "grade", "serve-rewards", "dashboard"):
        assert name in r.stdout


def test_console_script_is_installed():
    exe = Path(sys.executable).with_name("rlcs")
    assert exe.is_file(), f"no rlcs console script beside {sys.executable}"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "Curriculum Sampling" in r.stdout


def test_version_is_the_packages(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"rlcs {version('rlcs')}"


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_ctrl_c_before_the_command_handles_it_is_one_line_and_130(monkeypatch, capsys):
    """Ctrl-C while a command imports torch or Ray, or checks its config and model, took a
    traceback and exit status 1."""

    def interrupted(*args):
        raise KeyboardInterrupt

    def run(*argv: str) -> int:
        try:
            return cli.main(list(argv))
        except KeyboardInterrupt:  # raised on, it would stop pytest itself
            pytest.fail("Ctrl-C left rlcs as a traceback")

    monkeypatch.setattr(cli, "_implementation", interrupted)  # while it imports
    assert run("train", "configs/tiny-text.yaml") == 130
    assert capsys.readouterr().err == "rlcs train: interrupted\n"
    monkeypatch.undo()
    monkeypatch.setitem(cli.COMMANDS, "eval", ("json", "dumps", "x"))
    monkeypatch.setattr("json.dumps", interrupted)  # while it runs, before its own handler
    assert run("eval", "m", "a.jsonl") == 130
    assert capsys.readouterr().err == "rlcs eval: interrupted\n"


def test_eval_without_a_model_names_only_the_model_as_missing(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["eval"])
    assert e.value.code == 2
    # the item files are optional (a run directory has its data.eval)
    assert capsys.readouterr().err.splitlines()[-1] == (
        "rlcs eval: error: the following arguments are required: model"
    )


def test_grade_given_a_run_directory_names_its_model(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("stage: sft\n")
    argv = ["grade", str(tmp_path), "a.jsonl", "--out", str(tmp_path / "g.jsonl")]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        f"rlcs grade: {tmp_path}: a run directory, not a model; grade with its model, "
        f"{tmp_path / 'hf'}\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_unbuilt_command_says_so_and_fails(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "train", ("cluster.not_a_module_yet", "main", "x"))
    assert cli.main(["train", "configs/tiny-text.yaml"]) == 3
    assert "rlcs train: not built yet" in capsys.readouterr().err


def test_subcommands_dispatch_with_parsed_arguments(monkeypatch):
    seen = {}
    monkeypatch.setitem(cli.COMMANDS, "train", ("json", "dumps", "x"))
    monkeypatch.setattr("json.dumps", lambda args: seen.setdefault("args", args) and 0)
    cli.main(["train", "c.yaml", "--set", "rollout.n=2", "--set", "run.name=a", "--resume"])
    args = seen["args"]
    assert (args.config, args.overrides, args.resume) == (
        "c.yaml",
        ["rollout.n=2", "run.name=a"],
        True,
    )


def test_grade_parses_its_arguments(monkeypatch):
    seen = {}
    monkeypatch.setitem(cli.COMMANDS, "grade", ("json", "dumps", "x"))
    monkeypatch.setattr("json.dumps", lambda args: seen.setdefault("args", args) and 0)
    cli.main(["grade", "runs/demo/sft/hf", "a.jsonl", "b.jsonl", "--out", "g.jsonl",
              "--samples", "8", "--set", "rollout.temperature=1.0"])  # fmt: skip
    args = seen["args"]
    assert args.model == "runs/demo/sft/hf" and args.data == ["a.jsonl", "b.jsonl"]
    assert args.out == "g.jsonl" and args.samples == 8 and args.cpus is None
    assert args.config is None and args.overrides == ["rollout.temperature=1.0"]


def test_eval_parses_its_arguments_with_greedy_defaults(monkeypatch):
    seen = {}
    monkeypatch.setitem(cli.COMMANDS, "eval", ("json", "dumps", "x"))
    monkeypatch.setattr("json.dumps", lambda args: seen.setdefault("args", args) and 0)
    cli.main(["eval", "runs/demo/rl/hf", "h.jsonl"])
    args = seen.pop("args")
    assert args.model == "runs/demo/rl/hf" and args.data == ["h.jsonl"]
    assert args.samples == 1 and args.temperature is None and args.out is None
    assert args.batch_items == 128 and args.cpus is None and args.overrides == []
    assert args.step is None and args.config is None
    cli.main(["eval", "runs/demo/rl", "--step", "8"])
    args = seen.pop("args")
    assert args.model == "runs/demo/rl" and args.data == [] and args.step == 8
    cli.main(["eval", "m", "a.jsonl", "b.jsonl", "--samples", "4", "--temperature", "1.0",
              "--out", "o.jsonl", "--batch-items", "0", "--set", "rollout.n=1"])  # fmt: skip
    args = seen["args"]
    assert (args.samples, args.temperature, args.out, args.batch_items) == (4, 1.0, "o.jsonl", 0)
    assert args.data == ["a.jsonl", "b.jsonl"] and args.overrides == ["rollout.n=1"]


def test_demo_has_a_14_minute_budget_unless_told(monkeypatch):
    seen = {}
    monkeypatch.setitem(cli.COMMANDS, "demo", ("json", "dumps", "x"))
    monkeypatch.setattr("json.dumps", lambda args: seen.setdefault("args", args) and 0)
    cli.main(["demo"])
    assert seen.pop("args").minutes == 14.0
    cli.main(["demo", "--minutes", "0", "--set", "run.iterations=150"])
    args = seen.pop("args")
    assert args.minutes == 0.0 and args.overrides == ["run.iterations=150"]


def test_numbers_out_of_range_are_refused_when_parsed(capsys):
    import pytest

    cases = {
        ("serve-rewards", "--port", "99999"): "a port is 1 to 65535, got 99999",
        ("dashboard", "runs/x", "--port", "-1"): "a port is 1 to 65535, got -1",
        ("demo", "--dashboard-port", "70000"): "a port is 1 to 65535, got 70000",
        ("demo", "--minutes", "-1"): "must be a number of at least 0, got -1",
        ("serve-rewards", "--workers", "0"): "must be at least 1, got 0",
        ("serve-rewards", "--timeout", "0"): "must be a number above 0",
        ("eval", "m", "--samples", "0"): "must be at least 1, got 0",
        ("eval", "m", "--temperature", "nan"): "must be a finite number",
        ("eval", "m", "--step", "-1"): "must be at least 0, got -1",
        ("grade", "m", "a.jsonl", "--out", "o.jsonl", "--cpus", "0"): "must be a number above 0",
    }
    for argv, message in cases.items():
        with pytest.raises(SystemExit) as e:
            cli.main(list(argv))
        assert e.value.code == 2
        assert message in capsys.readouterr().err, argv


def test_servers_refuse_a_port_in_use_before_announcing_it(tmp_path, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert cli.main(["serve-rewards", "--port", port]) == 2
        out = capsys.readouterr()
        assert f"cannot listen on 127.0.0.1:{port}" in out.err and "http://" not in out.out
        assert cli.main(["dashboard", str(tmp_path), "--port", port]) == 2
        assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_bad_inputs_fail_before_ray_starts(tmp_path, monkeypatch, capsys, tiny_text_model):
    """A mistake in the data, the model or an output path is reported in a second, not after
    Ray has started, and leaves no half-made run behind."""
    import cluster.ray_connect
    import cluster.train

    def no_ray(cfg):
        raise AssertionError("Ray was started before the inputs were checked")

    monkeypatch.setattr(cluster.train, "connect_ray", no_ray)
    monkeypatch.setattr(cluster.ray_connect, "connect_ray", no_ray)  # eval's and grade's
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    good = str(tmp_path / "good.jsonl")  # items that load: the --out checks come after them
    (tmp_path / "good.jsonl").write_text('{"id": "q1", "domain": "math", "prompt": "1+1?", '
                                         '"answer": "2"}\n')  # fmt: skip
    (tmp_path / "afile").write_text("")
    (tmp_path / "kept.jsonl").write_text("earlier answers\n")
    kept = str(tmp_path / "kept.jsonl")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    root = f"run.root={tmp_path / 'runs'}"
    cases = {
        ("train", "configs/tiny-text.yaml", "--set", root, "--set", "data.synthetic=null",
         "--set", f'data.train=["{tmp_path / "empty.jsonl"}"]'): "no rl items",
        ("train", "configs/tiny-text.yaml", "--set", root, "--set", "data.synthetic=null",
         "--set", "stage=sft", "--set", f'data.train=["{tmp_path / "list.jsonl"}"]'):
            "list.jsonl:1: a row must be a JSON object",
        ("train", "configs/tiny-text.yaml", "--set", f"run.root={tmp_path / 'afile'}"):
            "afile is a file",
        ("eval", str(tiny_text_model), str(tmp_path / "list.jsonl")): "a row must be a JSON object",
        ("eval", str(tiny_text_model), good, "--out", str(tmp_path)):
            "is a directory; give a file name",
        ("eval", str(tiny_text_model), good, "--out", kept):
            "kept.jsonl exists; give another file, or --overwrite to replace it",
        ("grade", str(tiny_text_model), good, "--out", kept):
            "kept.jsonl exists; give another file, or --overwrite to replace it",
        ("eval", str(tiny_text_model), str(tmp_path / "list.jsonl"), "--out",
         str(tmp_path / "new" / "answers.jsonl")): "a row must be a JSON object",
        ("grade", str(tiny_text_model), str(tmp_path / "list.jsonl"), "--out",
         str(tmp_path / "new" / "graded.jsonl")): "a row must be a JSON object",
        ("grade", str(tiny_text_model), str(tmp_path / "nope.jsonl"), "--out", "g.jsonl"):
            "dataset file not found",
        ("grade", str(tiny_text_model), str(tmp_path), "--out", "g.jsonl"):
            "a directory, not a dataset file",
        ("eval", str(tmp_path / "model"), str(tmp_path / "list.jsonl")):
            "model: no weights (*.safetensors or pytorch_model*.bin) beside its config.json",
        ("grade", str(tmp_path / "model"), str(tmp_path / "list.jsonl"), "--out", "g.jsonl"):
            "model: no weights",
        ("train", "configs/tiny-text.yaml", "--set", root, "--set", "model.tiny=null",
         "--set", "run.name=badmodel", "--set", f"model.path={tmp_path / 'model'}"):
            "model: no weights",
        ("demo", "--run-dir", str(tmp_path / "afile"), "--dashboard-port", "0"): "is a file",
        ("demo", "--run-dir", str(tmp_path / "none"), "--resume", "--dashboard-port", "0"):
            "does not exist; nothing to resume",
    }  # fmt: skip
    for argv, message in cases.items():
        assert cli.main(list(argv)) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert not list((tmp_path / "runs").rglob("config.yaml"))
    assert (tmp_path / "kept.jsonl").read_text() == "earlier answers\n"
    assert not (tmp_path / "new").exists()  # refused inputs: --out's folder is not made
    assert not (tmp_path / "runs" / "badmodel").exists()  # the bad model.path wrote nothing


def test_the_reward_server_refuses_an_unknown_default_domain(capsys):
    import socket

    with socket.socket() as s:  # a port free now
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    argv = ["serve-rewards", "--port", port, "--workers", "1", "--default-domain", "astrology"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--default-domain 'astrology' is not a domain; known: chart, grounding, gui" in err


def _rlcs(*argv: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """The installed `rlcs` console script, as a user runs it."""
    exe = Path(sys.executable).with_name("rlcs")
    return subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})  # fmt: skip


def test_unknown_arguments_are_reported_by_the_subcommand():
    r = _rlcs("train", "configs/tiny-text.yaml", "--bogus", "x")
    assert r.returncode == 2
    assert r.stderr.splitlines()[0].startswith("usage: rlcs train ")
    assert r.stderr.splitlines()[-1] == "rlcs train: error: unrecognized arguments: --bogus x"
    r = _rlcs("dashboard", "runs/demo", "--nope")
    assert r.stderr.startswith("usage: rlcs dashboard ") and r.returncode == 2
    assert "rlcs dashboard: error: unrecognized arguments: --nope" in r.stderr
    r = _rlcs("--nope")  # before any subcommand: the top-level parser's own
    assert r.returncode == 2 and "rlcs: error: unrecognized arguments: --nope" in r.stderr


def test_demo_refuses_a_run_dir_it_cannot_create_in_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    r = _rlcs("demo", "--run-dir", str(tmp_path / "afile" / "run"), "--dashboard-port", "0")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"rlcs demo: --run-dir {tmp_path / 'afile' / 'run'} cannot be created: Not a directory"
    ]
    assert (tmp_path / "afile").is_file()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_demo_refuses_a_run_dir_it_cannot_write_in(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    r = _rlcs("demo", "--run-dir", str(locked / "run"), "--dashboard-port", "0")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"rlcs demo: --run-dir {locked / 'run'} cannot be created: Permission denied"
    ]


def test_an_address_where_no_ray_head_answers_fails_at_once_naming_it(tmp_path):
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    start = time.monotonic()
    r = _rlcs("train", "configs/tiny-text.yaml", "--set", f"cluster.address={address}",
              "--set", f"run.root={tmp_path / 'runs'}", timeout=60)  # fmt: skip
    assert time.monotonic() - start < 30
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"rlcs train: cannot join the Ray cluster at {address} (cluster.address): Connection "
        "refused; start its head there (`ray start --head`), or unset cluster.address to run "
        "on a new local cluster"
    ]
    assert not (tmp_path / "runs").exists()  # stopped before the run directory was made
    r = _rlcs("demo", "--run-dir", str(tmp_path / "demo"), "--dashboard-port", "0",
              RAY_ADDRESS=f"ray://{address}")  # fmt: skip
    assert r.returncode == 2
    assert f"rlcs demo: cannot join the Ray cluster at ray://{address} ($RAY_ADDRESS)" in r.stderr
    assert not (tmp_path / "demo").exists()  # no empty --run-dir left behind


def test_an_address_where_something_else_answers_fails_naming_it(tmp_path):
    """The dashboard's port, or any service that is not a Ray head, used to keep ray.init
    retrying for minutes after the run directory was written; an HTTP address (what
    `ray job submit` takes) failed only after the data and model were built."""
    import http.server
    import threading
    import time

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_port}"
        start = time.monotonic()
        r = _rlcs("train", "configs/tiny-text.yaml", "--set", f"cluster.address={address}",
                  "--set", f"run.root={tmp_path / 'runs'}", timeout=120)  # fmt: skip
        assert time.monotonic() - start < 60
    finally:
        server.shutdown()
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"rlcs train: cannot join the Ray cluster at {address} (cluster.address): port "
        f"{server.server_port} accepts connections but refuses gRPC's handshake, which a Ray "
        "head accepts (the dashboard's port, 8265 by default, is for `ray job submit`; the "
        "head's GCS listens on 6379 by default); give the head's address, or unset "
        "cluster.address to run on a new local cluster"
    ]
    r = _rlcs("train", "configs/tiny-text.yaml", "--set", f"run.root={tmp_path / 'runs'}",
              RAY_ADDRESS="http://127.0.0.1:8265")  # fmt: skip
    assert r.returncode == 2
    assert "at http://127.0.0.1:8265 ($RAY_ADDRESS): that is an HTTP address" in r.stderr
    assert not (tmp_path / "runs").exists()  # stopped before the run directory was made


def test_an_address_that_accepts_and_stays_silent_is_named_at_the_timeout():
    """A server that takes the connection and never answers HTTP/2's preface leaves the
    channel connecting: the address counts as no head's once the timeout has passed."""
    import socket

    from cluster.ray_connect import address_problem

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        problem = address_problem(f"127.0.0.1:{port}", timeout_s=1.0)
    assert problem == (
        f"port {port} accepts connections but does not complete gRPC's handshake as a Ray head "
        "does within 1s (the dashboard's port, 8265 by default, is for `ray job submit`; the "
        "head's GCS listens on 6379 by default)",
        True,
    )
