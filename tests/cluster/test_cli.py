import subprocess
import sys
from pathlib import Path

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


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


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
