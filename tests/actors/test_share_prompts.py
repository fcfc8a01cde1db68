"""``learner.grpo.share_prompts``: a GRPO group's prompt and image run once per learner pass
(tree documents), with each rollout's own logprobs and the same update as one document each."""

from __future__ import annotations

import pytest
import torch

from actors.learner import Learner
from actors.learner_batches import prepare_step
from rlcs.config import Config
from tests.actors.learner_helpers import _config, rl_batch


@pytest.fixture(scope="module")
def learner(tiny_vlm):
    return Learner.local(_config(tiny_vlm), tiny_vlm)


def _step(learner: Learner, trajs, share: bool):
    grpo = learner.config.learner.grpo
    grpo.share_prompts = share
    try:
        return prepare_step("rl", trajs, learner.config, learner.tokenizer, learner.processor)[0]
    finally:
        grpo.share_prompts = False


def _rollout_logprobs(step) -> dict[tuple, list[float]]:
    """Each rollout's response-token logprobs, keyed by its whole sequence (prompt and
    response), from plain and tree documents alike."""
    out = {}
    for d in step.docs:
        n = sum(1 for w in d.weights if w > 0)
        if d.branches is None:
            out[tuple(d.input_ids)] = d.extras["lp"][-n:]
            continue
        p = d.prefix_len
        for k in range(1, d.branches[-1] + 1):
            at = [i for i, b in enumerate(d.branches) if b == k]
            seq = d.input_ids[:p] + [d.input_ids[i] for i in at]
            out[tuple(seq)] = [d.extras["lp"][i] for i in at[1:]]  # after the repeated token
    return out


def both_ways(learner: Learner, trajs):
    """The step as one document a rollout and as tree documents, and each rollout's logprobs
    (keyed by its sequence) from each, under the learner's model."""
    plain, shared = _step(learner, trajs, False), _step(learner, trajs, True)
    for step in (plain, shared):
        learner._fill_logprobs(step, "lp", learner.engine)
    return plain, shared, _rollout_logprobs(plain), _rollout_logprobs(shared)


def test_each_rollout_keeps_its_logprobs_with_the_prompt_run_once(learner):
    trajs = rl_batch(learner)  # two prompts (one with an image) x 4 rollouts
    plain, shared, want, got = both_ways(learner, trajs)
    assert (len(plain.docs), len(shared.docs)) == (8, 2)
    saved = sum(3 * (len(trajs[g]["prompt_token_ids"]) - 1) for g in (0, 4))
    assert sum(map(len, plain.docs)) - sum(map(len, shared.docs)) == saved
    assert sum(d.images is not None for d in shared.docs) == 1  # one image, not four
    assert got.keys() == want.keys() and len(got) == 8
    for key, lp in want.items():
        torch.testing.assert_close(torch.tensor(got[key]), torch.tensor(lp), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_the_update_is_the_same(learner, tmp_path, mini_batches):
    """Same loss, tokens and gradient (also over two mini-batches, whose old logprobs come from
    a forward pass of their own); the engine's logprobs are compared token for token."""
    trajs = rl_batch(learner)
    ref = _step(learner, trajs, False)
    learner._fill_logprobs(ref, "lp", learner.engine)
    by_ids = {tuple(d.input_ids): d.extras["lp"] for d in ref.docs}
    for t in trajs:
        lp = by_ids[tuple(t["prompt_token_ids"] + t["token_ids"])]
        t["logprobs"] = [x + 0.25 for x in lp[len(t["prompt_token_ids"]) :]]
    cfg = learner.config
    cfg.learner.grpo.mini_batches = mini_batches
    learner.save_checkpoint(tmp_path, "start")
    runs = {}
    try:
        for share in (False, True):
            learner.load_checkpoint(tmp_path, "start")
            learner.record_optimizer_grads()
            cfg.learner.grpo.share_prompts = share
            stats = learner.train_step("rl", trajs)
            runs[share] = stats, learner.recorded_grads()
    finally:
        cfg.learner.grpo.mini_batches, cfg.learner.grpo.share_prompts = 1, False
        learner.load_checkpoint(tmp_path, "start")
    (a, g_plain), (b, g_shared) = runs[False], runs[True]
    assert (
        b["tokens"] == a["tokens"] and b["logprob_mismatch_tokens"] == a["logprob_mismatch_tokens"]
    )
    assert b["logprob_mismatch_sum"] / b["logprob_mismatch_tokens"] == pytest.approx(0.25, abs=1e-3)
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6)
    assert g_plain.norm() > 0
    assert ((g_shared - g_plain).norm() / g_plain.norm()).item() < 1e-4


def test_flash_attention_cannot_share_prompts(tiny_vlm):
    with pytest.raises(ValueError, match="share_prompts needs attn_implementation sdpa or eager"):
        Config.model_validate(
            {
                "model": {"path": str(tiny_vlm)},
                "cluster": {"device": "cuda"},
                "learner": {
                    "precision": "bf16",
                    "attn_implementation": "flash_attention_2",
                    "grpo": {"share_prompts": True},
                },
            }
        )
