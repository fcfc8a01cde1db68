"""RL iterations in turn against overlapped (``run.overlap_rollout``), on the demo's tiny VLM.

The demo's RL stage (``configs/tiny-vlm.yaml`` with the demo's RL overrides) from a finished
demo's SFT checkpoint and data, ``--iterations`` iterations, once with the roles taking turns
(generate, then learn) and once overlapped (the next iteration's rollouts generated while the
learner trains, one update behind), one run after the other on the same machine. Both runs
start from the same weights, items and seeds; the overlapped run's rollouts differ from the
second iteration on (they come from older weights), so its held-out figures are another draw,
not the same computation.

    rlcs demo --run-dir runs/demo
    python benchmarks/overlap_rollout.py --base runs/demo [--iterations 12] [--set key=value ...]

Prints each run's median iteration time, generation and learning time, the time the driver
waited for the learner after gathering ahead, the learner-vs-engine logprob mismatch (about
1e-7 in turn; the gap of one update when overlapped) and the held-out pass rate at the end.
Ends with ``RESULT iter_s_turn=… iter_s_overlap=… speedup=… heldout_turn=…
heldout_overlap=… mismatch_overlap=…`` (speedup: the median iteration in turn over the
overlapped one).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

MODES = {"turn": [], "overlap": ["run.overlap_rollout=true"]}


def run(config: Path, base: Path, root: Path, name: str, iterations: int, extra: list[str]):
    from cluster.demo import RL, data_overrides, stage_config
    from cluster.ray_connect import connect_ray
    from cluster.train import train
    from rlcs.runlog import read_metrics

    files = {s: base / "data" / f"{s}.jsonl" for s in ("rl_train", "heldout")}
    cfg = stage_config(config, root, name, [
        *RL, *data_overrides(files, "rl_train"), f"model.path={base / 'sft' / 'hf'}",
        f"run.iterations={iterations}", f"run.eval_every={iterations}", *extra,
    ])  # fmt: skip
    connect_ray(cfg)
    train(cfg)
    return read_metrics(cfg.run_dir)


def median(recs: list[dict], key: str) -> float:
    values = [r[key] for r in recs if key in r]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="a finished `rlcs demo` run dir")
    ap.add_argument("--config", type=Path, default=Path("configs/tiny-vlm.yaml"))
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--root", type=Path, default=None, help="where the two runs go (temporary)")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    missing = [p for p in (args.base / "sft" / "hf" / "config.json",
                           args.base / "data" / "rl_train.jsonl",
                           args.base / "data" / "heldout.jsonl") if not p.is_file()]  # fmt: skip
    if missing:
        raise SystemExit(
            f"error: {args.base} is not a finished demo run directory (no {missing[0]}); "
            "run `rlcs demo --run-dir DIR` first"
        )
    if args.iterations < 2:
        raise SystemExit("error: --iterations must be at least 2 (nothing overlaps in one)")
    root = args.root or Path(tempfile.mkdtemp(prefix="rlcs-overlap-"))
    figures = {}
    for mode, sets in MODES.items():
        shutil.rmtree(root / mode, ignore_errors=True)
        recs = run(args.config, args.base, root, mode, args.iterations, [*sets, *args.overrides])
        last = recs[-1]
        figures[mode] = {
            "iter_s": median(recs, "time/iteration"),
            "generate_s": median(recs, "time/generate"),
            "learn_s": median(recs, "time/learn"),
            "wait_s": median(recs, "time/learn_wait"),
            "mismatch": median(recs[1:], "logprob_mismatch"),
            "heldout": last.get("eval/pass_rate/all", float("nan")),
        }
        f = figures[mode]
        waited = f", waited for the learner {f['wait_s']:.2f}" if mode == "overlap" else ""
        print(
            f"{mode:>8}: {f['iter_s']:.2f} s an iteration (generate {f['generate_s']:.2f}, "
            f"learn {f['learn_s']:.2f}{waited}), logprob "
            f"mismatch {f['mismatch']:.1e}, held-out after {args.iterations}: "
            f"{100 * f['heldout']:.1f}%",
            flush=True,
        )
    turn, over = figures["turn"], figures["overlap"]
    print(
        f"RESULT iter_s_turn={turn['iter_s']:.2f} iter_s_overlap={over['iter_s']:.2f} "
        f"speedup={turn['iter_s'] / over['iter_s']:.2f} heldout_turn={turn['heldout']:.4f} "
        f"heldout_overlap={over['heldout']:.4f} mismatch_overlap={over['mismatch']:.1e}"
    )


if __name__ == "__main__":
    main()
