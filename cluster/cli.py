"""The `rlcs` command.

Each subcommand imports its implementation only when it runs, so `rlcs serve-rewards` works on
a host with no Ray, torch or vLLM installed.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence

from rewards.argtypes import (
    add_listen_arguments,
    add_reward_server_arguments,
    int_at_least,
    non_negative_float,
    port_or_off,
    positive_float,
)

#: subcommand -> (module, function, one-line help). The function takes the parsed arguments
#: and returns an exit code.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "train": ("cluster.train", "main", "run pretraining, SFT or RL from a config (its `stage`)"),
    "demo": ("cluster.demo", "main", "run the embedded end-to-end default on this machine"),
    "eval": ("cluster.eval_command", "main", "a model's pass rates on item files, per domain"),
    "grade": ("cluster.grade", "main", "offline RLCS grading: each item's pass rate under a model"),
    "serve-rewards": ("rewards.server", "main", "serve the reward verifiers over HTTP"),
    "dashboard": ("rlcs.dashboard", "main", "serve the curriculum dashboard for a run directory"),
}


def _add_set(p: argparse.ArgumentParser, example: str, note: str = "") -> None:
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a config value, e.g. --set {example} (repeatable){note}",
    )


def _add_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML config, e.g. configs/tiny-text.yaml")
    _add_set(p, "rollout.n=8")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")


def _add_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", default=None, help="where to write the run (default runs/demo)")
    p.add_argument("--config", default=None, help="the RL config (default configs/tiny-vlm.yaml)")
    _add_set(p, "run.iterations=150", "; pretraining and SFT keep the steps and learning "
             "rates the demo gives them")  # fmt: skip
    p.add_argument(
        "--minutes",
        type=non_negative_float,
        default=14.0,
        help="the demo's time budget (default 14): RL stops after the iteration that leaves "
        "just enough for the last evaluation and the report (run.max_wall_s); 0: no limit, "
        "RL runs all of run.iterations",
    )
    p.add_argument(
        "--dashboard-port",
        type=port_or_off,
        default=8266,
        help="serve the dashboard here (default 8266; 0: do not)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue a demo in --run-dir: keep the stages that finished with the same "
        "settings, run the first that did not and every one after it again",
    )


def _add_grade(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", help="the reference model, a Hugging Face directory (e.g. runs/demo/sft/hf)"
    )
    p.add_argument("data", nargs="+", help="JSONL or Parquet item files to grade")
    p.add_argument("--out", required=True, help="write the graded items here (JSONL)")
    _add_overwrite(p)
    p.add_argument(
        "--config",
        default=None,
        help="rollout, reward and cluster settings (default configs/tiny-vlm.yaml)",
    )
    p.add_argument(
        "--samples", type=int_at_least(1), default=4, help="answers per item (default 4)"
    )
    p.add_argument(
        "--cpus",
        type=positive_float,
        default=None,
        help="CPUs for each rollout worker (default cluster.rollout_cpus_per_worker)",
    )
    _add_workers(p)
    _add_set(p, "rollout.temperature=1.0")


def _add_overwrite(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the --out file if it exists (by default an existing file is refused)",
    )


def _add_workers(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workers",
        type=int_at_least(1),
        default=1,
        help="rollout workers answering batches side by side, anywhere on the Ray cluster; each "
        "takes --cpus CPUs and, with cluster.device cuda, cluster.rollout_gpus_per_worker GPUs "
        "(default 1)",
    )


def _add_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        help="a Hugging Face model directory (e.g. runs/demo/sft/hf), or a run directory "
        "(e.g. runs/demo/rl): its final model, its config and its data.eval",
    )
    p.add_argument(
        "data",
        nargs="*",
        default=[],  # optional: argparse would otherwise name it as missing with the model
        help="JSONL or Parquet item files (e.g. runs/demo/data/heldout.jsonl); "
        "for a run directory, default its data.eval",
    )
    p.add_argument(
        "--step",
        type=int_at_least(0),
        default=None,
        help="a run directory's checkpoint at this step instead of its final model "
        "(kept with run.export_hf_checkpoints)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="rollout, reward and cluster settings (default: the run's config.yaml for a "
        "run directory, else configs/tiny-vlm.yaml)",
    )
    p.add_argument(
        "--samples",
        type=int_at_least(1),
        default=1,
        help="answers per item (default 1, greedy); with more, also pass@K",
    )
    p.add_argument(
        "--temperature",
        type=non_negative_float,
        default=None,
        help="sampling temperature (default 0 for one answer, else rollout.temperature)",
    )
    p.add_argument("--out", default=None, help="write every scored answer here (JSONL)")
    _add_overwrite(p)
    p.add_argument(
        "--cpus",
        type=positive_float,
        default=None,
        help="CPUs for each rollout worker (default cluster.rollout_cpus_per_worker)",
    )
    _add_workers(p)
    p.add_argument(
        "--batch-items",
        type=int_at_least(0),
        default=128,
        help="items per generation call, the progress bar's step (default 128; 0: all at once)",
    )
    _add_set(p, "rollout.max_answer_tokens=64")


def _add_dashboard(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dir", help="a run directory, e.g. runs/demo/rl (or runs/demo: the demo's RL stage)"
    )
    add_listen_arguments(p, 8266, "RLCS_DASHBOARD_TOKEN")


_ARGS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "train": _add_train,
    "demo": _add_demo,
    "eval": _add_eval,
    "grade": _add_grade,
    "serve-rewards": add_reward_server_arguments,
    "dashboard": _add_dashboard,
}


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: it refuses the arguments it does not know itself, so the error
    shows the subcommand's usage (`rlcs train ...`), not the top-level one."""

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlcs",
        description="RL post-training of vision-language reasoning models with Curriculum Sampling.",
    )
    parser.add_argument("--version", action="version", version=f"rlcs {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    for name, (_, _, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        _ARGS[name](p)
    return parser


def _version() -> str:
    from rlcs import __version__

    return __version__


def _implementation(command: str) -> Callable[[argparse.Namespace], int] | None:
    module, func, _ = COMMANDS[command]
    if importlib.util.find_spec(module) is None:
        return None
    return getattr(importlib.import_module(module), func)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        impl = _implementation(args.command)
        if impl is None:
            print(
                f"rlcs {args.command}: not built yet in this version of rlcs; see the README's "
                "Status section.",
                file=sys.stderr,
            )
            return 3
        return int(impl(args) or 0)
    except KeyboardInterrupt:
        # Ctrl-C before the command's own handler (while it imports torch or Ray, checks the
        # config or the model): one line and 130, not a traceback; the commands that can be
        # continued say how in their own handlers
        print(f"rlcs {args.command}: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """The `rlcs` console script: :func:`main`, then a quick exit. The exit handlers run as
    usual (Ray's shutdown among them, its messages shown); the interpreter's last garbage
    collection is skipped: it walks every object torch, transformers and SymPy created (2-3 s
    on two cores after a run) only to free memory the process hands back anyway, and the
    commands close their files and actors before they return. The objects it leaves make
    nanobind-built extensions (Triton's) print a report of "leaked" instances at teardown,
    which is why nothing after this point reaches stderr."""
    code = main()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    sys.exit(code)


if __name__ == "__main__":
    entry()
