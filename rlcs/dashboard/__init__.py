"""The curriculum dashboard: ``rlcs dashboard RUN_DIR [--host --port --token]``.

It reads only the run directory (the SQLite aggregates and the latest saved state), so it
serves live runs, refreshing itself, and finished ones alike.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted; 2 if the run directory is not usable."""
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"rlcs dashboard: {run_dir}: no such run directory", file=sys.stderr)
        return 2
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
