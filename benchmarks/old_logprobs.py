"""The learner's GRPO step with the old logprobs recomputed or taken from the rollouts.

With more than one optimizer step an iteration (``learner.grpo.epochs`` or ``mini_batches``
above 1) the clipped ratio needs the policy's logprobs from before the first step: the learner
computes them in a pass of its own (``learner.grpo.old_logprobs: recompute``, the default), or
takes the rollouts' (``rollout``). This times ``Learner.train_step`` on a run's logged groups
(as ``share_prompts.py`` picks them) with each, steps alternating so that both see the same CPU
contention. The rollouts carry the learner's own tempered logprobs, as an engine with
``rollout.logprobs: tempered`` reports them, so both settings make the same update.

    python benchmarks/old_logprobs.py --run runs/demo/rl [--groups 48] [--steps 5] \\
        [--set learner.grpo.epochs=2]

Ends with ``RESULT recompute_step_s=… rollout_step_s=… speedup=… optimizer_steps=…``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rounds import alternate  # noqa: E402
from share_prompts import rollout_batch, run_arguments, run_config  # noqa: E402


def main() -> None:
    args = run_arguments(
        __doc__.split("\n\n")[0], "key=value over the run's config (epochs 2 unless set)"
    ).parse_args()

    from actors.learner import Learner
    from actors.learner_batches import prepare_step

    config = run_config(args.run, ["learner.grpo.epochs=2", *args.overrides])
    grpo = config.learner.grpo
    if grpo.epochs * grpo.mini_batches < 2:
        raise SystemExit("one optimizer step an iteration needs no old logprobs: set epochs or "
                         "mini_batches above 1")  # fmt: skip
    _, batch = rollout_batch(args.run, args.groups, config)
    learner = Learner.local(config, config.model.path)
    # what an engine with rollout.logprobs=tempered reports: the policy's own logprobs, from
    # plain documents (one a rollout) of every rollout
    saved = grpo.share_prompts, grpo.skip_zero_advantage
    grpo.share_prompts, grpo.skip_zero_advantage = False, False
    step = prepare_step("rl", batch, config, learner.tokenizer, learner.processor)[0]
    grpo.share_prompts, grpo.skip_zero_advantage = saved
    learner._fill_logprobs(step, "policy", learner.engine)
    own = {tuple(d.input_ids): d.extras["policy"] for d in step.docs}
    for t in batch:
        n = len(t["prompt_token_ids"])
        t["logprobs"] = own[tuple(t["prompt_token_ids"] + t["token_ids"])][n:]

    def train(mode: str):
        grpo.old_logprobs = mode
        config.rollout.logprobs = "tempered" if mode == "rollout" else "raw"
        return learner.train_step("rl", batch)

    t = alternate({m: (lambda r, m=m: train(m)) for m in ("recompute", "rollout")}, args.steps)
    med = {m: t.median(m) for m in t.wall}
    print(f"steps (s): {t.line('recompute')} | {t.line('rollout')}", flush=True)
    print(
        f"RESULT recompute_step_s={med['recompute']:.3f} rollout_step_s={med['rollout']:.3f} "
        f"speedup={med['recompute'] / med['rollout']:.2f} "
        f"optimizer_steps={int(t.results['rollout'][-1]['optimizer_steps'])}"
    )


if __name__ == "__main__":
    main()
