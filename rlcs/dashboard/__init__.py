"""The curriculum dashboard: ``rlcs dashboard RUN_DIR [--host --port --token]``.

It reads only the run directory (the SQLite aggregates and the latest saved state), so it
serves live runs, refreshing itself, and finished ones alike.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def resolve_run_dir(path: Path) -> Path:
    """The run whose curriculum to serve: ``path`` itself, or, for the directory `rlcs demo`
    writes (a run per stage), its RL stage, the only one with a curriculum; a demo still in
    pretraining or SFT gets its RL stage's future directory, served once RL begins."""
    if (path / "curriculum").is_dir() or (path / "config.yaml").is_file():
        return path
    if any((path / stage / "config.yaml").is_file() for stage in ("pretrain", "sft", "rl")):
        return path / "rl"
    return path


def main(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted; 2 if the run directory is not usable."""
    given = Path(args.run_dir)
    if not given.is_dir():
        what = "not a directory" if given.exists() else "no such run directory"
        print(f"rlcs dashboard: {given}: {what}", file=sys.stderr)
        return 2
    from rewards.argtypes import listen_error

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

    print(f"rlcs dashboard: http://{args.host}:{args.port}/ for {run_dir}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
