"""The HF engine's generation time for one RL iteration's rollouts: shared prefill, batch size.

Loads a checkpoint into the rollout worker without Ray (``RolloutWorkerImpl``), draws
``--prompts`` items at random from an RL item file, and generates ``rollout.n`` sampled
rollouts of each with the config's budgets and temperature, once per variant, rounds
alternating so that every variant sees the same CPU contention. A variant is a batch size
(``rollout.hf_batch_size``) and whether an image prompt's n samples are prefilled once
(``shared``, the engine's default) or once per row (``plain``). A row draws its tokens from its
own seeded stream whatever batch it sits in, so every variant must return the same tokens; the
script checks that and reports the largest logprob difference.

    rlcs demo --run-dir runs/demo
    python benchmarks/hf_generate.py --model runs/demo/sft/hf --items runs/demo/data/rl_train.jsonl
    python benchmarks/hf_generate.py ... --variants 64:shared,128:shared,256:shared

Ends with ``RESULT variants=… generate_s=… tok_s=… speedup=…`` (medians over the rounds;
speedup is the first variant's time over each one's).
"""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rounds import alternate, count  # noqa: E402


def parse_variants(text: str) -> list[tuple[int, bool]]:
    out = []
    for part in text.split(","):
        size, _, mode = part.partition(":")
        if mode not in ("shared", "plain") or not size.isdigit() or int(size) < 1:
            raise SystemExit(f"--variants: {part!r} is not BATCH:shared or BATCH:plain")
        out.append((int(size), mode == "shared"))
    return out


def check_inputs(model: Path, items: Path) -> None:
    """A one-line error, before any model loads, when ``--model`` or ``--items`` is missing."""
    if not (model / "config.json").is_file():
        raise SystemExit(f"--model {model}: no config.json there; give an exported HF model "
                         "directory, e.g. runs/demo/sft/hf")  # fmt: skip
    if not items.is_file():
        raise SystemExit(f"--items {items}: no such file; give an RL item file, "
                         "e.g. runs/demo/data/rl_train.jsonl")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="an exported HF model directory")
    ap.add_argument("--items", type=Path, required=True, help="an RL item file (.jsonl)")
    ap.add_argument("--config", default="configs/tiny-vlm.yaml")
    ap.add_argument(
        "--prompts", type=count(1), default=96, help="items (the demo rolls out up to 96)"
    )
    ap.add_argument("--variants", default="64:plain,64:shared", help="BATCH:shared|plain, ...")
    ap.add_argument("--rounds", type=count(1), default=3)
    ap.add_argument(
        "--threads", type=count(1), default=2, help="torch threads (the demo's worker: 2)"
    )
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    variants = parse_variants(args.variants)
    check_inputs(args.model, args.items)

    import torch

    from actors.rollout import RolloutWorkerImpl
    from rlcs.config import load_config
    from rlcs.config_text import ConfigError
    from rlcs.data import DatasetError, load_items

    torch.set_num_threads(args.threads)
    try:
        cfg = load_config(args.config, args.overrides)
        pool = load_items(args.items, check_images=False)
    except (ConfigError, DatasetError) as e:
        raise SystemExit(str(e)) from e
    items = random.Random(0).sample(pool, min(args.prompts, len(pool)))
    names = [f"{bs}:{'shared' if share else 'plain'}" for bs, share in variants]
    workers = [
        RolloutWorkerImpl(
            args.model, cfg.rollout.model_copy(update={"hf_batch_size": bs}), share_prefill=share
        )
        for bs, share in variants
    ]

    def progress(r, name, seconds, trajs):
        print(f"round {r} {name:>11}: {seconds:6.2f} s, {len(trajs)} rollouts", flush=True)

    timed = alternate(
        {
            name: (lambda r, w=worker: w.generate(items, step=r, base_dir=str(args.items.parent)))
            for name, worker in zip(names, workers, strict=True)
        },
        args.rounds,
        warmup=0,
        on_call=progress,
    )
    first = [timed.results[name][0] for name in names]
    ref = first[0]
    worst = 0.0
    for name, trajs in zip(names[1:], first[1:], strict=True):
        for a, b in zip(ref, trajs, strict=True):
            if a.token_ids != b.token_ids:
                raise SystemExit(f"{name}: a rollout of {a.item_id} differs from {names[0]}'s")
            worst = max([worst, *(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))])
    n_tok = sum(len(t.token_ids) for t in ref)
    med = [timed.median(name) for name in names]
    for name, m in zip(names, med, strict=True):
        print(f"{name:>11}: median {m:.2f} s, {n_tok / m:.0f} tok/s, x{med[0] / m:.2f}")
    print(f"same tokens in every variant; largest logprob difference {worst:.1e}")
    print(
        f"RESULT variants={','.join(names)} generate_s={','.join(f'{m:.2f}' for m in med)} "
        f"tok_s={','.join(f'{n_tok / m:.0f}' for m in med)} "
        f"speedup={','.join(f'{med[0] / m:.2f}' for m in med)}"
    )


if __name__ == "__main__":
    main()
