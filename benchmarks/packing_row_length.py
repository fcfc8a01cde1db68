"""Learner step time against the packed row length (``data.seq_len``), on the demo's SFT data.

The learner packs documents into rows of at most ``data.seq_len`` tokens and lets transformers
derive a block-diagonal causal mask from the position ids. On CPU that attention is computed
densely, so a row costs the square of its length whatever the documents in it: short
documents in long rows pay for attention scores that the mask throws away. This script runs the
same SFT steps (the tiny VLM of ``configs/tiny-vlm.yaml``, 16 of the demo's SFT examples a step)
with one learner per row length, steps alternating between them so that all see the same CPU
contention, and checks that every row length gives the same loss.

    python benchmarks/packing_row_length.py [--steps 12] [--seq-lens 2048,512,256]

Ends with ``RESULT step_s_<L>=… … speedup=…`` (speedup: the first row length's median step
time over the fastest one's).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rounds import alternate, count  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def row_lengths(text: str) -> list[int]:
    """An argparse ``type`` for ``--seq-lens``: distinct whole numbers of at least 1, comma
    separated, the baseline first."""
    parts = [p.strip() for p in text.split(",")]
    lengths = [count(1)(p) for p in parts]  # a bad one stops with its own message
    if len(set(lengths)) != len(lengths):
        raise argparse.ArgumentTypeError(f"{text!r} names a row length twice")
    return lengths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=count(1), default=12, help="timed steps per row length")
    ap.add_argument("--warmup", type=count(0), default=2, help="untimed steps per row length first")
    ap.add_argument("--seq-lens", type=row_lengths, default="2048,512,256",
                    help="row lengths, the baseline first")  # fmt: skip
    ap.add_argument("--batch", type=count(1), default=16, help="SFT examples per step (the demo's)")
    args = ap.parse_args()
    seq_lens = args.seq_lens

    import torch

    from actors.learner import Learner
    from cluster.stage_data import load_stage_data, resolve_model, supervised_batch
    from rlcs.config import load_config

    tmp = Path(tempfile.mkdtemp(prefix="rlcs-packbench-"))
    per_domain = max(1, (args.steps + args.warmup) * args.batch // 4)
    sizes = {"rl_train": 0, "heldout": 0, "pretrain": 0, "sft": per_domain}
    # the demo's SFT data at the demo's difficulty, read and batched as the driver does
    base = load_config(ROOT / "configs" / "tiny-vlm.yaml",
                       ["stage=sft", f"run.root={tmp}", f"data.synthetic.sizes={json.dumps(sizes)}"])  # fmt: skip
    rows = load_stage_data(base, tmp).rows
    model_path = resolve_model(base, tmp)
    learners = {}
    for L in seq_lens:
        cfg = load_config(
            ROOT / "configs" / "tiny-vlm.yaml",
            ["stage=sft", f"data.seq_len={L}", "learner.lr=3.0e-4",
             f"learner.global_batch={args.batch}", f"learner.micro_batch={args.batch}"],
        )  # fmt: skip
        learners[L] = Learner.local(cfg, model_path)
    print(f"threads={torch.get_num_threads()} batch={args.batch} examples={len(rows)}")

    batches = [
        supervised_batch(rows, k, args.batch, seed=0) for k in range(args.warmup + args.steps)
    ]
    t = alternate(
        {
            L: (lambda k, lrn=learner: lrn.train_step("sft", batches[k]))
            for L, learner in learners.items()
        },
        args.steps,
        warmup=args.warmup,
    )
    losses = {L: [stats["loss"] for stats in t.results[L]] for L in seq_lens}
    med = {L: t.median(L) for L in seq_lens}
    for L in seq_lens:
        drift = max(abs(a - b) for a, b in zip(losses[L], losses[seq_lens[0]], strict=True))
        print(f"seq_len={L:5d} step_s median={med[L]:.3f} min={min(t.wall[L]):.3f} "
              f"cpu_s median={t.median_cpu(L):.3f} "
              f"max |loss - loss(seq_len={seq_lens[0]})|={drift:.2e}")  # fmt: skip
    speedup = med[seq_lens[0]] / min(med.values())
    print(
        "RESULT "
        + " ".join(f"step_s_{L}={med[L]:.3f}" for L in seq_lens)
        + f" speedup={speedup:.2f}"
    )


if __name__ == "__main__":
    main()
