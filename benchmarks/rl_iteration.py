"""Where the time of one RL iteration goes, on configs/tiny-text.yaml.

Starts the real roles (vLLM CPU rollout, reward pool, curriculum sampler, DeepSpeed learner)
on a local Ray cluster, runs one warm-up iteration, then times ITERS iterations phase by phase.
The overhead share is the wall time not spent inside the five phases.

    python benchmarks/rl_iteration.py [--iters 5] [--config configs/tiny-text.yaml]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from rounds import count

from cluster.ray_connect import connect_ray
from cluster.rl_iteration import PHASES, run_iteration
from cluster.roles import start_roles
from cluster.stage_data import load_stage_data, resolve_model
from rlcs.config import load_config
from rlcs.config_text import ConfigError


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default="configs/tiny-text.yaml")
    ap.add_argument("--iters", type=count(1), default=5)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="rlcs-bench-")
    try:
        cfg = load_config(args.config, [*args.overrides, f"run.root={root}", "run.name=bench"])
    except ConfigError as e:
        raise SystemExit(str(e)) from e
    run_dir = Path(root) / "bench"
    connect_ray(cfg)
    data = load_stage_data(cfg, run_dir)
    roles = start_roles(cfg, resolve_model(cfg, run_dir), run_dir, data.items, resume=False)
    items = data.by_id()
    try:
        run_iteration(cfg, roles, items, 0)  # warm-up: first-call costs of every role
        results = [run_iteration(cfg, roles, items, i) for i in range(1, args.iters + 1)]
    finally:
        roles.shutdown()

    def med(key: str) -> float:
        return statistics.median(r.metrics[key] for r in results)

    print(f"{'phase':<10} {'median s':>9}")
    for phase in PHASES:
        print(f"{phase:<10} {med(f'time/{phase}'):>9.3f}")
    print(f"{'iteration':<10} {med('time/iteration'):>9.3f}")
    print(
        f"RESULT iter_s={med('time/iteration'):.3f} generate_s={med('time/generate'):.3f} "
        f"reward_s={med('time/reward'):.3f} sampler_s={med('time/sampler'):.3f} "
        f"learn_s={med('time/learn'):.3f} sync_s={med('time/sync'):.3f} "
        f"overhead_share={med('time/overhead_share'):.4f}"
    )


if __name__ == "__main__":
    main()
