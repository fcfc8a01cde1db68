"""bf16 against fp32 on CPU: the learner's RL step and the HF engine's generation, on a run's
rollouts and items.

``learner.precision=bf16`` trains bf16 weights (DeepSpeed keeps fp32 ones for the optimizer),
``learner.precision=bf16-mixed`` fp32 weights with bf16 matmuls under ``torch.autocast``,
and ``model.dtype=bfloat16`` loads the engine's weights in bf16; on CPU both keep attention in
fp32 (actors/cpu_attention.py), whose bf16 kernels are the slower ones there. The learner's
step is timed on the run's logged groups whose rewards differ (as ``share_prompts.py`` does),
the engine's generation on ``--prompts`` of the run's RL items with its rollout settings.
The precisions alternate, so all see the same CPU contention; figures are medians.

    python benchmarks/cpu_bf16.py --run runs/demo/rl [--groups 48] [--steps 5] [--prompts 110]

Ends with ``RESULT learner_fp32_s=… learner_bf16_s=… learner_speedup=… learner_mixed_s=…
learner_mixed_speedup=… generate_fp32_s=… generate_bf16_s=… generate_speedup=…`` (a speedup is
fp32's time over the other's).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rounds import alternate  # noqa: E402
from share_prompts import rollout_batch, run_arguments, run_config  # noqa: E402


def main() -> None:
    ap = run_arguments(__doc__.split("\n\n")[0], "key=value over the run's config")
    ap.add_argument("--prompts", type=int, default=110, help="RL items to generate for")
    args = ap.parse_args()

    import torch

    from actors.learner import Learner
    from actors.rollout import RolloutWorkerImpl
    from rlcs.data import load_items

    config = run_config(args.run, args.overrides)
    if config.cluster.device != "cpu":
        raise SystemExit("this benchmark is about CPU; the run's cluster.device is not cpu")
    _, batch = rollout_batch(args.run, args.groups, config)
    torch.set_num_threads(2)  # the demo's learner and rollout worker each run two threads
    learners = {
        p: Learner.local(config.model_copy(update={"learner": config.learner.model_copy(
            update={"precision": p})}), config.model.path)
        for p in ("fp32", "bf16", "bf16-mixed")
    }  # fmt: skip
    learn = alternate(
        {p: (lambda r, lrn=lrn: lrn.train_step("rl", batch)) for p, lrn in learners.items()},
        args.steps,
    )
    del learners

    items_file = Path(config.data.train[0])
    pool = load_items(items_file, check_images=False)
    items = random.Random(0).sample(pool, min(args.prompts, len(pool)))
    workers = {
        p: RolloutWorkerImpl(config.model.path, config.rollout, dtype=dt)
        for p, dt in (("fp32", "float32"), ("bf16", "bfloat16"))
    }
    gen = alternate(
        {
            p: (lambda r, w=w: w.generate(items, step=r, base_dir=str(items_file.parent)))
            for p, w in workers.items()
        },
        args.steps,
    )
    med: dict[str, dict[str, float]] = {}
    for name, t in (("learner", learn), ("generate", gen)):
        print(f"{name} (s): " + " | ".join(t.line(p) for p in t.wall), flush=True)
        med[name] = {p: t.median(p) for p in t.wall}
    lrn, gen_s = med["learner"], med["generate"]
    print("RESULT " + " ".join([
        f"learner_fp32_s={lrn['fp32']:.3f}", f"learner_bf16_s={lrn['bf16']:.3f}",
        f"learner_speedup={lrn['fp32'] / lrn['bf16']:.2f}",
        f"learner_mixed_s={lrn['bf16-mixed']:.3f}",
        f"learner_mixed_speedup={lrn['fp32'] / lrn['bf16-mixed']:.2f}",
        f"generate_fp32_s={gen_s['fp32']:.3f}", f"generate_bf16_s={gen_s['bf16']:.3f}",
        f"generate_speedup={gen_s['fp32'] / gen_s['bf16']:.2f}",
    ]))  # fmt: skip


if __name__ == "__main__":
    main()
