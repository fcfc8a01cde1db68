"""The learner in-process on the tiny GLM-4.1V-architecture VLM, one DeepSpeed engine shared.

The stages run one after another on the same engine (they share weights on purpose: the
recipe chains them). Each must lower its own objective on a fixed batch with images.
"""

from __future__ import annotations

import pytest
import torch

from actors.learner import Learner
from tests.actors.learner_helpers import _config, pretrain_batch, rl_batch, sft_batch


@pytest.fixture(scope="module")
def vlm_learner(tiny_vlm):
    learner = Learner.local(_config(tiny_vlm), tiny_vlm)
    yield learner


def _weighted_logprob(learner: Learner, trajs) -> float:
    """sum_i A_i * mean log p(response_i): what GRPO raises."""
    from actors.learner_batches import prepare_step

    step = prepare_step("rl", trajs, learner.config, learner.tokenizer, learner.processor)[0]
    learner._fill_logprobs(step, "lp", learner.engine)
    total = 0.0
    for d in step.docs:
        resp = [i for i, w in enumerate(d.weights) if w > 0]
        adv = d.extras["advantages"][resp[0]]
        total += adv * sum(d.extras["lp"][i] for i in resp) / len(resp)
    return total


def test_pretrain_loss_falls_on_vlm_with_images(vlm_learner):
    batch = pretrain_batch()
    losses = [vlm_learner.train_step("pretrain", batch)["loss"] for _ in range(6)]
    assert losses[-1] < 0.8 * losses[0], losses


def test_pretraining_never_predicts_image_placeholders(vlm_learner):
    """``<|image|>`` and its markers are inputs, not targets: predicting them from image
    positions would teach the vision tower to output a constant."""
    from actors.learner_batches import VISION_TOKENS, pretrain_documents

    tok = vlm_learner.tokenizer
    docs = pretrain_documents(pretrain_batch(), tok, vlm_learner.processor, 256)
    vision = {tok.convert_tokens_to_ids(t) for t in VISION_TOKENS[:3]}
    with_images = [d for d in docs if d.images is not None]
    assert len(with_images) == 2
    for d in with_images:
        for tid, w in zip(d.input_ids, d.weights, strict=True):
            assert (w == 0.0) == (tid in vision), (tok.decode([tid]), w)
    assert all(all(w == 1.0 for w in d.weights) for d in docs if d.images is None)


def test_sft_loss_falls_on_vlm_with_images(vlm_learner):
    batch = sft_batch()
    stats = [vlm_learner.train_step("sft", batch) for _ in range(6)]
    losses = [s["loss"] for s in stats]
    assert losses[-1] < 0.8 * losses[0], losses
    # only assistant tokens count: 2 think replies + 1 nothink reply with their end tokens
    tok = vlm_learner.tokenizer
    n = sum(
        len(tok(ex["response"] + "<|endoftext|>", add_special_tokens=False)["input_ids"])
        for ex in sft_batch()
    )
    assert stats[0]["tokens"] == n


def test_rl_raises_advantage_weighted_logprob_on_vlm_with_images(vlm_learner):
    trajs = rl_batch(vlm_learner)
    before = _weighted_logprob(vlm_learner, trajs)
    stats = [vlm_learner.train_step("rl", trajs) for _ in range(4)]
    after = _weighted_logprob(vlm_learner, trajs)
    assert after > before + 0.05, (before, after)
    # the first update's ratio is exactly 1, so the per-sample loss is -mean(A) = 0
    assert abs(stats[0]["loss"]) < 1e-5
    assert all(s["optimizer_steps"] == 1 for s in stats)


def test_engine_logprobs_are_compared_and_forced_tokens_are_not_trained(vlm_learner):
    """The learner reports how far its logprobs are from the engine's, and leaves the appended
    ``</think><answer>`` of a force-answered rollout (logprob 0.0) out of the loss."""
    from actors.learner_batches import prepare_step

    trajs = rl_batch(vlm_learner)
    step = prepare_step("rl", trajs, vlm_learner.config, vlm_learner.tokenizer,
                        vlm_learner.processor)[0]  # fmt: skip
    vlm_learner._fill_logprobs(step, "lp", vlm_learner.engine)
    by_ids = {tuple(d.input_ids): d for d in step.docs}
    for t in trajs:
        lp = by_ids[tuple(t["prompt_token_ids"] + t["token_ids"])].extras["lp"]
        t["logprobs"] = [x + 0.25 for x in lp[len(t["prompt_token_ids"]) :]]  # an engine 0.25 off
    t = trajs[0]
    t["forced_answer"], t["forced_positions"] = True, [3, 4]
    t["logprobs"][3:5] = [0.0, 0.0]
    t["logprobs"][2] = 0.0  # a sampled token as sure as can be: still trained
    docs = prepare_step("rl", trajs, vlm_learner.config, vlm_learner.tokenizer,
                        vlm_learner.processor)[0].docs  # fmt: skip
    first = next(d for d in docs if list(d.input_ids) == t["prompt_token_ids"] + t["token_ids"])
    n = len(t["prompt_token_ids"])
    assert first.weights[n + 3] == first.weights[n + 4] == 0.0 and first.weights[n + 2] > 0
    stats = vlm_learner.train_step("rl", trajs)
    # the two forced tokens are not trained; the sampled one at 0.0 is, but an engine's 0.0
    # reads as "no logprob" to the mismatch figure
    n_tokens = sum(len(x["token_ids"]) for x in trajs) - 3
    assert stats["logprob_mismatch_tokens"] == n_tokens
    assert stats["logprob_mismatch_sum"] / n_tokens == pytest.approx(0.25, abs=1e-3)


@pytest.mark.parametrize(
    ("forced", "positions", "message"),
    [
        (True, [], "names no forced_positions"),
        (True, [10_000], "outside its"),
        (False, [-1], "outside its"),
    ],
)
def test_forced_positions_are_checked(vlm_learner, forced, positions, message):
    from actors.learner_batches import prepare_step

    trajs = rl_batch(vlm_learner)
    trajs[1]["forced_answer"], trajs[1]["forced_positions"] = forced, positions
    with pytest.raises(ValueError, match=message) as err:
        prepare_step("rl", trajs, vlm_learner.config, vlm_learner.tokenizer, vlm_learner.processor)
    assert repr(trajs[1]["item_id"]) in str(err.value)


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_policy_logprobs_are_tempered_and_compared_raw(vlm_learner, tmp_path, mini_batches):
    """Sampled at temperature T, the objective's logprobs are those of ``logits / T`` (the
    first update's ratio is 1, nothing clipped); the engine comparison stays on raw logprobs."""
    from actors.learner_batches import prepare_step
    from rlcs.grpo import token_logprobs

    cfg = vlm_learner.config
    vlm_learner.save_checkpoint(tmp_path, "start")
    cfg.rollout.temperature, cfg.learner.grpo.mini_batches = 0.5, mini_batches
    try:
        trajs = rl_batch(vlm_learner)
        step = prepare_step("rl", trajs, cfg, vlm_learner.tokenizer, vlm_learner.processor)[0]
        micro = [mb for mini in step.minis for mb in mini]
        vlm_learner._fill_logprobs(step, "lp", vlm_learner.engine, engine_key="raw")
        b, order = vlm_learner.inputs.collate(step.docs, micro[0])
        with torch.no_grad():
            logits = vlm_learner.inputs.logits(vlm_learner.engine, b)
        tempered = token_logprobs(logits / 0.5, b["targets"])
        sel = b["doc_offset"] >= 0
        idx, off = b["doc_index"][sel].tolist(), b["doc_offset"][sel].tolist()
        got = [order[i].extras["lp"][o] for i, o in zip(idx, off, strict=True)]
        torch.testing.assert_close(torch.tensor(got), tempered[sel], atol=1e-5, rtol=1e-5)
        by_ids = {tuple(d.input_ids): d for d in step.docs}
        for t in trajs:
            raw = by_ids[tuple(t["prompt_token_ids"] + t["token_ids"])].extras["raw"]
            t["logprobs"] = [x + 0.25 for x in raw[len(t["prompt_token_ids"]) :]]
        stats = vlm_learner.train_step("rl", trajs)
        assert stats["optimizer_steps"] == mini_batches
        assert stats["logprob_mismatch_sum"] / stats["logprob_mismatch_tokens"] == pytest.approx(
            0.25, abs=1e-3
        )
        if mini_batches == 1:
            assert stats["clipped"] == 0 and abs(stats["loss"]) < 1e-5
    finally:
        cfg.rollout.temperature, cfg.learner.grpo.mini_batches = 1.0, 1
        vlm_learner.load_checkpoint(tmp_path, "start")


def test_tempered_engine_logprobs_are_compared_before_any_update(vlm_learner, tmp_path):
    """Engines reporting tempered logprobs (``rollout.logprobs: tempered``) to a learner that
    trains on the raw distribution, over two mini-batches: every step's comparison is against
    the learner's logprobs before the first update. Rollout logprobs equal to those read a
    mismatch of 0 (they read about 0.5 nats a token when the second step measured its own,
    updated, weights)."""
    from actors.learner_batches import prepare_step
    from rlcs.grpo import token_logprobs

    cfg = vlm_learner.config
    vlm_learner.save_checkpoint(tmp_path, "start")
    cfg.rollout.temperature, cfg.rollout.logprobs = 0.5, "tempered"
    cfg.learner.grpo.tempered_logprobs, cfg.learner.grpo.mini_batches = False, 2
    try:
        trajs = rl_batch(vlm_learner)
        step = prepare_step("rl", trajs, cfg, vlm_learner.tokenizer, vlm_learner.processor)[0]
        for t in trajs:  # the engine's: log softmax(logits / 0.5), each rollout alone
            i = next(
                k
                for k, d in enumerate(step.docs)
                if d.input_ids == t["prompt_token_ids"] + t["token_ids"]
            )
            b, _ = vlm_learner.inputs.collate(step.docs, [[i]])
            with torch.no_grad():
                logits = vlm_learner.inputs.logits(vlm_learner.engine, b)
            lp = token_logprobs(logits.float() / 0.5, b["targets"])[0]
            p, n = len(t["prompt_token_ids"]), len(t["token_ids"])
            t["logprobs"] = lp[p - 1 : p - 1 + n].tolist()
        stats = vlm_learner.train_step("rl", trajs)
        assert stats["optimizer_steps"] == 2
        assert stats["logprob_mismatch_tokens"] == stats["tokens"] > 0
        assert stats["logprob_mismatch_sum"] / stats["logprob_mismatch_tokens"] < 1e-4
    finally:
        cfg.rollout.temperature, cfg.rollout.logprobs = 1.0, "raw"
        cfg.learner.grpo.tempered_logprobs, cfg.learner.grpo.mini_batches = True, 1
        vlm_learner.load_checkpoint(tmp_path, "start")


def test_epochs_pass_over_the_batch_again(vlm_learner, tmp_path):
    """``grpo.epochs: 2`` takes a second optimizer step on the same trajectories, its ratio
    against the logprobs computed before the first: the first step is the one-epoch update."""
    cfg = vlm_learner.config
    vlm_learner.save_checkpoint(tmp_path, "start")
    trajs = rl_batch(vlm_learner)
    before = _weighted_logprob(vlm_learner, trajs)
    try:
        one = vlm_learner.train_step("rl", trajs)
        after_one = _weighted_logprob(vlm_learner, trajs)
        vlm_learner.load_checkpoint(tmp_path, "start")
        assert _weighted_logprob(vlm_learner, trajs) == pytest.approx(before, abs=1e-6)
        cfg.learner.grpo.epochs = 2
        two = vlm_learner.train_step("rl", trajs)
        after_two = _weighted_logprob(vlm_learner, trajs)
    finally:
        cfg.learner.grpo.epochs = 1
        vlm_learner.load_checkpoint(tmp_path, "start")
    assert one["optimizer_steps"] == 1 and two["optimizer_steps"] == 2
    assert two["tokens"] == 2 * one["tokens"]
    assert abs(one["loss"]) < 1e-5  # the on-policy first step: ratio 1, loss -mean(A) = 0
    assert after_one > before + 0.1
    # the second pass sees the first step's ratios (this test's learning rate moves them past
    # the clip range), and moves the weights again
    assert one["clipped"] == 0 and two["clipped"] > 0
    assert abs(two["loss"]) > 1e-3
    assert abs(after_two - after_one) > 1e-3, (before, after_one, after_two)


def test_rollout_logprobs_can_be_the_old_logprobs(vlm_learner, tmp_path, monkeypatch):
    """``grpo.old_logprobs: rollout`` takes the clipped ratio's old logprobs from the rollouts
    (tempered, as the engines then report them) instead of a learner pass before the first
    step: with the learner's own logprobs in the rollouts it is the same update, without that
    pass; the engine comparison is made on the first step, before any update."""
    from actors.learner_batches import prepare_step

    cfg = vlm_learner.config
    vlm_learner.save_checkpoint(tmp_path, "start")
    fills = []
    real_fill = type(vlm_learner)._fill_logprobs

    def counting(self, step, key, *args, **kwargs):
        fills.append(key)
        return real_fill(self, step, key, *args, **kwargs)

    monkeypatch.setattr(type(vlm_learner), "_fill_logprobs", counting)
    cfg.rollout.temperature, cfg.learner.grpo.epochs = 0.5, 2
    try:
        trajs = rl_batch(vlm_learner)
        step = prepare_step("rl", trajs, cfg, vlm_learner.tokenizer, vlm_learner.processor)[0]
        vlm_learner._fill_logprobs(step, "lp", vlm_learner.engine)  # tempered, at 0.5
        by_ids = {tuple(d.input_ids): d for d in step.docs}
        for t in trajs:
            lp = by_ids[tuple(t["prompt_token_ids"] + t["token_ids"])].extras["lp"]
            t["logprobs"] = lp[len(t["prompt_token_ids"]) :]
        fills.clear()
        recomputed = vlm_learner.train_step("rl", trajs)
        assert fills == ["old_logprobs"]
        after_recompute = _weighted_logprob(vlm_learner, trajs)
        vlm_learner.load_checkpoint(tmp_path, "start")
        cfg.rollout.logprobs, cfg.learner.grpo.old_logprobs = "tempered", "rollout"
        fills.clear()
        from_rollouts = vlm_learner.train_step("rl", trajs)
        assert fills == []  # no pass before the first step
        after_rollouts = _weighted_logprob(vlm_learner, trajs)
        for key in ("loss", "clipped", "tokens", "optimizer_steps"):
            assert from_rollouts[key] == pytest.approx(recomputed[key], abs=1e-4), key
        assert recomputed["clipped"] > 0  # the second pass's ratios moved: the old ones matter
        assert after_rollouts == pytest.approx(after_recompute, abs=1e-4)
        # the engine comparison: tempered against tempered, the first step's tokens only
        assert from_rollouts["logprob_mismatch_sum"] / from_rollouts[
            "logprob_mismatch_tokens"
        ] == pytest.approx(0.0, abs=1e-5)
        assert from_rollouts["logprob_mismatch_tokens"] == recomputed["logprob_mismatch_tokens"] / 2
        # rollout logprobs off by 0.25 move the ratio, and the figure says so
        vlm_learner.load_checkpoint(tmp_path, "start")
        for t in trajs:
            t["logprobs"] = [x - 0.25 for x in t["logprobs"]]
        shifted = vlm_learner.train_step("rl", trajs)
        assert shifted["logprob_mismatch_sum"] / shifted[
            "logprob_mismatch_tokens"
        ] == pytest.approx(0.25, abs=1e-3)
        assert shifted["clipped"] > recomputed["clipped"]
        # a rollout without its logprobs cannot give old ones
        trajs[0]["logprobs"] = []
        with pytest.raises(ValueError, match="old_logprobs=rollout takes them"):
            prepare_step("rl", trajs, cfg, vlm_learner.tokenizer, vlm_learner.processor)
    finally:
        cfg.rollout.temperature, cfg.learner.grpo.epochs = 1.0, 1
        cfg.rollout.logprobs, cfg.learner.grpo.old_logprobs = "raw", "recompute"
        vlm_learner.load_checkpoint(tmp_path, "start")


def test_vlm_packing_matches_each_document_alone(vlm_learner):
    """Two image documents and a text one packed in one row give their stand-alone logits."""
    from actors.learner_batches import pretrain_documents
    from rlcs.packing import collate

    docs = pretrain_documents(
        pretrain_batch()[2:], vlm_learner.tokenizer, vlm_learner.processor, 256
    )
    with torch.no_grad():
        packed = vlm_learner.inputs.logits(
            vlm_learner.engine, collate([docs], vlm_learner.inputs.pad_id)
        )[0]
        at = 0
        for d in docs:
            alone = vlm_learner.inputs.logits(
                vlm_learner.engine, collate([[d]], vlm_learner.inputs.pad_id)
            )[0]
            torch.testing.assert_close(packed[at : at + len(d)], alone, atol=2e-5, rtol=1e-4)
            at += len(d)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_grad_accumulation_equals_full_batch(vlm_learner, tmp_path, stage):
    """Many micro-batches (one document each) apply the gradient of one full-batch micro-batch.

    Gradients are compared (as the optimizer receives them), not weights: a first Adam step
    maps float noise in near-zero gradients to +-lr.
    """
    batch = sft_batch() if stage == "sft" else rl_batch(vlm_learner)
    vlm_learner.save_checkpoint(tmp_path, "start")
    cfg = vlm_learner.config
    cfg.data.pack = False
    try:
        vlm_learner.record_optimizer_grads()
        split = vlm_learner.train_step(stage, batch, micro_batch=1)
        g_split = vlm_learner.recorded_grads()
        vlm_learner.load_checkpoint(tmp_path, "start")
        vlm_learner.record_optimizer_grads()
        whole = vlm_learner.train_step(stage, batch, micro_batch=len(batch))
        g_whole = vlm_learner.recorded_grads()
    finally:
        cfg.data.pack = True
        vlm_learner.load_checkpoint(tmp_path, "start")
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-5, abs=1e-6)
    assert split["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-5)
    assert g_whole.norm() > 0
    assert _rel(g_split, g_whole) < 1e-5


def test_zero_advantage_samples_are_left_out_with_the_same_gradient(vlm_learner, tmp_path):
    """A group of equal rewards adds nothing to the gradient: the learner leaves its samples
    out (no images encoded, no forward pass) and still normalises over the whole batch."""
    from actors.learner_batches import prepare_step, rl_documents, split_step

    batch = rl_batch(vlm_learner)
    batch += [dict(t, item_id="same", reward=1.0) for t in batch[:4]]  # an image group, all right
    cfg = vlm_learner.config
    docs, mini_of, n = rl_documents(batch, cfg, vlm_learner.processor, skip_zero_advantage=False)
    full = split_step(docs, mini_of, cfg, "policy", num_mini=n)[0]
    lean = prepare_step("rl", batch, cfg, vlm_learner.tokenizer, vlm_learner.processor)[0]
    assert (len(full.docs), len(lean.docs)) == (12, 8)
    vlm_learner.save_checkpoint(tmp_path, "start")
    try:
        vlm_learner.record_optimizer_grads()
        a = vlm_learner.run_step(full)
        g_full = vlm_learner.recorded_grads()
        vlm_learner.load_checkpoint(tmp_path, "start")
        vlm_learner.record_optimizer_grads()
        b = vlm_learner.run_step(lean)
        g_lean = vlm_learner.recorded_grads()
    finally:
        vlm_learner.load_checkpoint(tmp_path, "start")
    assert b["zero_advantage_samples"] == 4 and "zero_advantage_samples" not in a
    assert b["tokens"] == a["tokens"] - sum(len(t["token_ids"]) for t in batch[8:])
    assert g_full.norm() > 0 and _rel(g_lean, g_full) < 1e-6


def test_negative_scale_shrinks_only_the_below_mean_advantages(vlm_learner):
    """``grpo.negative_scale`` multiplies the advantages under a group's mean and leaves the
    others; at 0 the wrong samples are left out like samples of advantage 0, and the loss is
    still normalised over every sample of the batch."""
    from actors.learner_batches import rl_documents

    batch = rl_batch(vlm_learner)
    advantages = {}
    for scale in (1.0, 0.5, 0.0):
        cfg = vlm_learner.config.model_copy(deep=True)
        cfg.learner.grpo.share_prompts = False
        cfg.learner.grpo.negative_scale = scale
        docs, _, _ = rl_documents(batch, cfg, vlm_learner.processor)
        advantages[scale] = [
            (next(a for a in d.extras["advantages"] if a), max(d.weights)) for d in docs
        ]
    plain = advantages[1.0]
    assert len(plain) == 8 and sorted(a > 0 for a, _ in plain) == [False] * 4 + [True] * 4
    assert advantages[0.5] == [(a if a > 0 else a / 2, w) for a, w in plain]
    assert advantages[0.0] == [(a, w) for a, w in plain if a > 0]


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_a_batch_without_signal_still_takes_its_optimizer_steps(
    vlm_learner, tmp_path, mini_batches
):
    """Every group right: nothing to run, yet the call takes its steps (as the ranks of a
    group must, together) with a zero gradient."""
    cfg = vlm_learner.config
    batch = [dict(t, reward=1.0) for t in rl_batch(vlm_learner)]
    vlm_learner.save_checkpoint(tmp_path, "start")
    cfg.learner.grpo.mini_batches = mini_batches
    try:
        stats = vlm_learner.train_step("rl", batch)
    finally:
        cfg.learner.grpo.mini_batches = 1
        vlm_learner.load_checkpoint(tmp_path, "start")
    assert stats["optimizer_steps"] == mini_batches
    assert stats["zero_advantage_samples"] == len(batch)
    assert stats["tokens"] == 0 and stats["loss"] == 0 and stats["grad_norm"] == 0
