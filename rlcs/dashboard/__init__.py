"""The curriculum dashboard: ``rlcs dashboard RUN_DIR [--host --port --token]``.

It reads only the run directory (the SQLite aggregates and the latest saved state), so it
serves live runs, refreshing itself, and finished ones alike.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: What marks a directory as a run: `rlcs train` writes these first (config.yaml, metrics.jsonl)
#: and the sampler its state (curriculum/).
RUN_MARKERS = ("config.yaml", "metrics.jsonl", "curriculum")
#: What a run writes before its config.yaml: the lock its driver takes first
#: (cluster.run_lock.LOCK_FILE), its synthetic data and its tiny model.
STARTING = {"driver.lock", "data", "model"}
#: What `rlcs demo` writes into its directory when it starts.
DEMO_MARKER = "demo-run.json"


def is_run(path: Path) -> bool:
    return any((path / name).exists() for name in RUN_MARKERS)


def is_demo(path: Path) -> bool:
    """A directory `rlcs demo` writes: a run per stage."""
    return (path / DEMO_MARKER).is_file() or any(
        (path / stage / "config.yaml").is_file() for stage in ("pretrain", "sft", "rl")
    )


def resolve_run_dir(path: Path) -> Path:
    """The run whose curriculum to serve: ``path`` itself, or, for the directory `rlcs demo`
    writes (a run per stage), its RL stage, the only one with a curriculum; a demo still in
    its data, pretraining or SFT stage gets its RL stage's future directory, served once RL
    begins."""
    if is_run(path):
        return path
    if is_demo(path):
        return path / "rl"
    return path


def not_a_run(path: Path) -> str | None:
    """Why ``path`` (a directory) cannot be served as a run, or None. An empty directory, or one
    holding only what a run writes before its config.yaml, is a run about to start."""
    if is_run(path) or is_demo(path):
        return None
    entries = sorted(path.iterdir())
    runs = [p.name for p in entries if p.is_dir() and (is_run(p) or is_demo(p))]
    if runs:
        shown = ", ".join(runs[:10]) + (f" … ({len(runs)} in all)" if len(runs) > 10 else "")
        held = f"{len(runs)} runs" if len(runs) > 1 else "a run"
        return (f"{path} is a folder that holds {held}, not a run itself: {shown}; "
                f"give one of them, e.g. rlcs dashboard {path / runs[0]}")  # fmt: skip
    if {p.name for p in entries} <= STARTING:
        return None
    return (f"{path} holds no run: no {', '.join(RUN_MARKERS[:-1])} or {RUN_MARKERS[-1]}/ in it "
            "or in a folder inside it; give a run directory, e.g. runs/demo/rl")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted; 2 if the run directory is not usable."""
    given = Path(args.run_dir)
    if not given.is_dir():
        what = "not a directory" if given.exists() else "no such run directory"
        print(f"rlcs dashboard: {given}: {what}", file=sys.stderr)
        return 2
    try:
        problem = not_a_run(given)
    except OSError as e:
        problem = f"{given} cannot be read: {e.strerror}"
    if problem:
        print(f"rlcs dashboard: {problem}", file=sys.stderr)
        return 2
    from rewards.argtypes import http_url, listen_error

    if problem := listen_error(args.host, args.port):
        print(f"rlcs dashboard: {problem}", file=sys.stderr)
        return 2
    run_dir = resolve_run_dir(given)
    if run_dir != given:
        print(f"rlcs dashboard: {given} holds a run per stage; serving its RL stage, {run_dir}",
              file=sys.stderr)  # fmt: skip
    if not (run_dir / "curriculum").is_dir():
        print(
            f"rlcs dashboard: {run_dir} has no curriculum/ yet; serving, it will fill in",
            file=sys.stderr,
        )
    from rlcs.dashboard.app import create_app

    try:
        app = create_app(run_dir, token=args.token or None)
    except RuntimeError as e:
        print(f"rlcs dashboard: {e}", file=sys.stderr)
        return 2
    import uvicorn

    print(f"rlcs dashboard: {http_url(args.host, args.port, '/')} for {run_dir}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
