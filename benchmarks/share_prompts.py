"""The learner's GRPO step with and without ``learner.grpo.share_prompts``, on a run's rollouts.

An RL run keeps a sample of its rollouts (``samples/step_*.jsonl``: prompt and response tokens,
reward, item). This takes the groups among them whose rewards differ (those the learner trains
on), up to ``--groups``, with their items' images, and times ``Learner.train_step`` on that
batch with the run's learner settings, once with one document per rollout and once with each
group's prompt and images run once (tree documents). Steps alternate plain/shared so both see
the same CPU contention; the figure is the median step. Tokens are those the learner's passes
run (the batch's documents), the same trained tokens either way.

    rlcs demo --run-dir runs/demo
    python benchmarks/share_prompts.py --run runs/demo/rl [--groups 48] [--steps 5] [--set k=v]

Ends with ``RESULT plain_step_s=… shared_step_s=… speedup=… plain_tokens=… shared_tokens=…``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rounds import alternate, count  # noqa: E402


def rollout_groups(run: Path, groups: int) -> list[list[dict]]:
    """Up to ``groups`` logged groups whose rewards differ, newest iteration first."""
    files = sorted((run / "samples").glob("step_*.jsonl"), reverse=True)
    if not files:
        raise SystemExit(f"{run}/samples holds no step_*.jsonl: is {run} an RL run's directory?")
    out: list[list[dict]] = []
    for f in files:
        by_item: dict[str, list[dict]] = defaultdict(list)
        for line in f.read_text().splitlines():
            t = json.loads(line)
            if t.get("selected", True) and not t.get("unscorable", False):
                by_item[t["item_id"]].append(t)
        out += [g for g in by_item.values() if len({t["reward"] for t in g}) > 1]
        if len(out) >= groups:
            break
    return out[:groups]


def rollout_batch(run: Path, groups: int, config) -> tuple[list[list[dict]], list[dict]]:
    """The groups of ``rollout_groups`` and their rollouts as one learner batch, each with its
    item's images (read from the run's RL item files)."""
    from rlcs.data import load_items
    from rlcs.images import decode_image

    chosen = rollout_groups(run, groups)
    if not chosen:
        raise SystemExit(f"no logged group of {run} has rewards that differ")
    paths = [Path(p) for p in config.data.train]
    items = {it.id: (it, p.parent) for p in paths for it in load_items(p, check_images=False)}
    batch = []
    for g in chosen:
        item, base = items[g[0]["item_id"]]
        images = [decode_image(ref, base) for ref in item.images]
        batch += [dict(t, images=images) for t in g]
    print(f"{len(chosen)} groups, {len(batch)} rollouts from {run}/samples", flush=True)
    return chosen, batch


def run_config(run: Path, overrides: list[str]):
    """The run's own config with ``overrides``, or a one-line error when ``run`` holds none."""
    from rlcs.config import load_config
    from rlcs.config_text import ConfigError

    try:
        return load_config(run / "config.yaml", overrides)
    except ConfigError as e:
        raise SystemExit(f"{e} (--run takes an RL run's directory, e.g. runs/demo/rl)") from e


def run_arguments(description: str, set_help: str) -> argparse.ArgumentParser:
    """The options of a learner-step benchmark on a run's logged groups (this one's,
    ``old_logprobs.py``'s and ``cpu_bf16.py``'s)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--run", type=Path, required=True, help="an RL run's directory")
    ap.add_argument("--groups", type=count(1), default=48)
    ap.add_argument("--steps", type=count(1), default=5, help="timed steps of each variant")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help=set_help)
    return ap


def main() -> None:
    args = run_arguments(
        __doc__.split("\n\n")[0], "key=value over the run's config, e.g. data.seq_len=512"
    ).parse_args()

    from actors.learner import Learner
    from actors.learner_batches import prepare_step

    config = run_config(args.run, args.overrides)
    groups, batch = rollout_batch(args.run, args.groups, config)

    learner = Learner.local(config, config.model.path)
    grpo = config.learner.grpo
    tokens = {}
    for share in (False, True):
        grpo.share_prompts = share
        step = prepare_step("rl", batch, config, learner.tokenizer, learner.processor)[0]
        tokens[share] = sum(len(d) for d in step.docs)

    def train(share: bool):
        grpo.share_prompts = share
        return learner.train_step("rl", batch)

    t = alternate({"plain": lambda r: train(False), "shared": lambda r: train(True)}, args.steps)
    plain, shared = t.median("plain"), t.median("shared")
    print(
        f"steps (s): {t.line('plain')} | {t.line('shared')}; median CPU time plain"
        f" {t.median_cpu('plain'):.2f} s, shared {t.median_cpu('shared'):.2f} s",
        flush=True,
    )
    print(
        f"RESULT plain_step_s={plain:.3f} shared_step_s={shared:.3f} "
        f"speedup={plain / shared:.2f} plain_tokens={tokens[False]} shared_tokens={tokens[True]}"
    )


if __name__ == "__main__":
    main()
