"""Turning a stage's input into per-rank work, on the driver, before any rank runs.

Every loss is made a weighted token sum whose weights are normalised over the *whole* step
(all ranks, all micro-batches), so running it in any split gives the full-batch gradient:
- pretrain / SFT: the token mean over every loss token of the step;
- RL: per-sample (default) or per-token aggregation over each mini-batch (``rlcs.grpo``).

Inputs:
- pretrain: dicts ``{"text": str, "images": [PIL, ...]?}`` (images as ``<|image|>`` placeholders
  in the text) or plain token-id lists;
- sft: dicts ``{"prompt", "response", "images"?, "thinking"?}``;
- rl: trajectories, as dicts or ``rlcs.data.Trajectory``: ``prompt_token_ids`` (image tokens
  already expanded), ``token_ids``, ``reward``, ``item_id`` (the GRPO group) and ``images``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch

from rlcs.config import Config
from rlcs.grpo import group_advantages, token_weights
from rlcs.packing import Document, plan_step, share_prefix
from rlcs.sft import build_sft_example

IMAGE_TOKEN = "<|image|>"


@dataclass
class RankStep:
    """One rank's share of one training call.

    ``minis[m]`` is mini-batch ``m`` (one optimizer step): its micro-batches, each a list of
    rows of indices into ``docs``. ``num_micro[m]`` is the most micro-batches any rank has in
    mini-batch ``m``; a rank with fewer runs zero-weight ones so collective calls line up.
    """

    docs: list[Document]
    minis: list[list[list[list[int]]]]
    num_micro: list[int]
    objective: str  # "lm" or "policy"
    info: dict[str, Any] = field(default_factory=dict)


def _pil_images(images: Any) -> list:
    return list(images or [])


def encode_images(processor: Any, ids: list[int], images: list) -> dict[str, torch.Tensor] | None:
    """Processor tensors for a document whose ``ids`` already hold expanded image tokens."""
    if not images:
        return None
    if processor is None:
        raise ValueError("a document has images but the model takes none (no vision tower)")
    vis = processor.image_processor(images=images, return_tensors="pt")
    image_id = processor.image_token_id
    expected = sum(processor.image_token_counts(vis["image_grid_thw"]))
    found = sum(1 for t in ids if t == image_id)
    if found != expected:
        raise ValueError(f"sequence has {found} image tokens but its images need {expected}")
    return {
        "pixel_values": vis["pixel_values"],
        "image_grid_thw": vis["image_grid_thw"],
        "mm_token_type_ids": (torch.tensor(ids) == image_id).to(torch.int32),
    }


#: Image and video structure tokens: never a prediction target (as in other VLM trainers).
#: Predicting the next ``<|image|>`` from an image position teaches nothing and rewards image
#: features that are all alike; the markers around them are as predictable.
VISION_TOKENS = ("<|image|>", "<|begin_of_image|>", "<|end_of_image|>",
                 "<|video|>", "<|begin_of_video|>", "<|end_of_video|>")  # fmt: skip


def vision_token_ids(tokenizer: Any) -> set[int]:
    vocab = tokenizer.get_vocab()
    return {vocab[t] for t in VISION_TOKENS if t in vocab}


def pretrain_documents(
    samples: list[Any], tokenizer: Any, processor: Any, seq_len: int
) -> list[Document]:
    """Causal-LM documents; text-only ones longer than ``seq_len`` are cut into pieces.

    Every token is a target except the image/video structure tokens (``VISION_TOKENS``)."""
    docs: list[Document] = []
    structural = vision_token_ids(tokenizer)
    for s in samples:
        if isinstance(s, dict):
            images = _pil_images(s.get("images"))
            if images:
                enc = processor(s["text"], images)
                ids = enc["input_ids"][0].tolist()
                img = {k: enc[k] for k in ("pixel_values", "image_grid_thw")}
                img["mm_token_type_ids"] = enc["mm_token_type_ids"][0]
                if len(ids) > seq_len:
                    raise ValueError(
                        f"image-text document of {len(ids)} tokens exceeds seq_len={seq_len}"
                    )
                mask = [0.0 if t in structural else 1.0 for t in ids]
                docs.append(Document(ids, mask, images=img))
                continue
            ids = tokenizer(s["text"], add_special_tokens=False)["input_ids"]
        else:
            ids = list(s)
        for k in range(0, len(ids), seq_len):
            piece = ids[k : k + seq_len]
            if len(piece) > 1:
                docs.append(Document(piece, [1.0] * len(piece)))
    return docs


def sft_documents(
    examples: list[dict], tokenizer: Any, processor: Any, seq_len: int
) -> list[Document]:
    """Assistant-only loss documents in the think/answer (or ``/nothink``) format."""
    docs = []
    for ex in examples:
        images = _pil_images(ex.get("images"))
        built = build_sft_example(
            processor if images else tokenizer,
            ex["prompt"],
            ex["response"],
            images=images,
            thinking=ex.get("thinking", True),
        )
        if len(built.input_ids) > seq_len:
            raise ValueError(
                f"SFT example of {len(built.input_ids)} tokens exceeds seq_len={seq_len}"
            )
        docs.append(
            Document(built.input_ids, [float(m) for m in built.loss_mask], images=built.images)
        )
    return docs


def _normalise_tokens(docs: list[Document]) -> None:
    """Scale 0/1 masks to the token mean over the whole step."""
    total = sum(sum(1 for w in d.weights[1:] if w > 0) for d in docs)
    for d in docs:
        d.weights = [w / max(total, 1) for w in d.weights]


def _get(t: Any, key: str, default: Any = None) -> Any:
    return t.get(key, default) if isinstance(t, dict) else getattr(t, key, default)


def _forced_positions(t: Any, n: int) -> list[int]:
    """The response positions a rollout's budget chose rather than sampled, checked."""
    positions = list(_get(t, "forced_positions", None) or [])
    bad = [k for k in positions if not isinstance(k, int) or not 0 <= k < n]
    if bad:
        raise ValueError(
            f"trajectory of item {_get(t, 'item_id')!r}: forced_positions {bad} outside its "
            f"{n} response tokens"
        )
    if _get(t, "forced_answer", False) and not positions:
        raise ValueError(
            f"trajectory of item {_get(t, 'item_id')!r} is force-answered but names no "
            "forced_positions: the engine must report where it put the tokens it chose"
        )
    return positions


def rl_documents(
    trajectories: list[Any], config: Config, processor: Any, skip_zero_advantage: bool = True
) -> tuple[list[Document], list[int], int]:
    """GRPO documents with per-token advantages; returns them, each one's mini-batch, and the
    number of mini-batches.

    A sample whose advantage is 0 (every sample of a group whose rewards are all equal) adds
    nothing to the gradient when the objective has no KL or entropy term: unless
    ``skip_zero_advantage`` or ``learner.grpo.skip_zero_advantage`` is off, it is left out,
    images unencoded and no forward pass run, while the loss normaliser still counts it, so the
    update is the one the whole batch gives. With ``learner.grpo.share_prompts`` a group's
    samples in one mini-batch become tree documents (``rlcs.packing.share_prefix``).
    """
    grpo = config.learner.grpo
    rewards = [float(_get(t, "reward")) for t in trajectories]
    groups = [_get(t, "item_id") for t in trajectories]
    adv = group_advantages(
        rewards, groups, std_normalize=grpo.std_normalize, negative_scale=grpo.negative_scale
    ).tolist()
    skip = skip_zero_advantage and grpo.skip_zero_advantage
    skip = skip and grpo.kl_coef == 0.0 and grpo.entropy_coef == 0.0
    order = list(range(len(trajectories)))
    random.Random(config.run.seed + len(trajectories)).shuffle(order)
    n_mini = min(grpo.mini_batches, len(trajectories))
    mini_of = [0] * len(trajectories)
    for k, i in enumerate(order):
        mini_of[i] = k * n_mini // len(trajectories)
    docs, kept, trained = [], [], []
    for i, (t, a) in enumerate(zip(trajectories, adv, strict=True)):
        prompt = list(_get(t, "prompt_token_ids"))
        resp = list(_get(t, "token_ids"))
        if not resp:
            raise ValueError(f"trajectory of item {_get(t, 'item_id')!r} has no response tokens")
        rollout_lp = list(_get(t, "logprobs", None) or [])
        if len(rollout_lp) != len(resp):
            if grpo.old_logprobs == "rollout" and grpo.mini_batches * grpo.epochs > 1:
                raise ValueError(
                    f"trajectory of item {_get(t, 'item_id')!r} has {len(rollout_lp)} logprobs "
                    f"for {len(resp)} response tokens, but learner.grpo.old_logprobs=rollout "
                    "takes them as the policy's old logprobs"
                )
            rollout_lp = [0.0] * len(resp)  # unknown: no mismatch figure for this one
        # The forced "</think><answer>" tokens of a force-answered rollout were appended, not
        # sampled: the policy is not trained on them (a sampled token can have logprob 0.0 too)
        resp_mask = [1.0] * len(resp)
        for k in _forced_positions(t, len(resp)):
            resp_mask[k] = 0.0
        trained.append(int(sum(resp_mask)))
        if skip and a == 0.0:
            continue
        ids = prompt + resp
        mask = [0.0] * len(prompt) + resp_mask
        images = _pil_images(_get(t, "images"))
        img = encode_images(processor, ids, images) if images else None
        extras = {
            "advantages": [a * m for m in mask],
            "rollout_logprobs": [0.0] * len(prompt) + rollout_lp,
        }
        docs.append(Document(ids, mask, extras=extras, images=img))
        kept.append(i)
    for m in range(n_mini):
        members = [i for i in range(len(trajectories)) if mini_of[i] == m]
        w = dict(
            zip(members, token_weights([trained[i] for i in members], grpo.loss_agg), strict=True)
        )
        for d, i in zip(docs, kept, strict=True):
            if mini_of[i] == m:
                d.weights = [w[i] * x for x in d.weights]
    if not grpo.share_prompts:
        return docs, [mini_of[i] for i in kept], n_mini
    # A group's rollouts in one mini-batch as tree documents: their prompt computed once
    by_prompt: dict[tuple, list[int]] = {}
    for k, i in enumerate(kept):
        t = trajectories[i]
        key = (mini_of[i], _get(t, "item_id"), tuple(_get(t, "prompt_token_ids")))
        by_prompt.setdefault(key, []).append(k)
    shared, shared_mini = [], []
    for (m, _, prompt), members in by_prompt.items():
        trees = share_prefix([docs[k] for k in members], len(prompt), config.data.seq_len)
        shared.extend(trees)
        shared_mini.extend([m] * len(trees))
    return shared, shared_mini, n_mini


def samples_in(doc: Document) -> int:
    """How many rollouts a document holds: one, or a tree's continuations."""
    return doc.branches[-1] if doc.branches else 1


def split_step(
    docs: list[Document],
    mini_of: list[int],
    config: Config,
    objective: str,
    micro_batch: int | None = None,
    num_mini: int | None = None,
) -> list[RankStep]:
    """Balance each mini-batch over ranks by tokens and pack it into micro-batches.

    ``num_mini`` (default: as many as ``mini_of`` names) optimizer steps are taken even when
    some have no documents: every rank then runs one zero-weight micro-batch for each.
    """
    lc = config.learner
    ranks = lc.num_ranks
    mb = micro_batch or lc.micro_batch
    n_mini = num_mini if num_mini is not None else (max(mini_of) + 1 if mini_of else 0)
    local: list[list[int]] = [[] for _ in range(ranks)]
    minis: list[list[list[list[list[int]]]]] = [[] for _ in range(ranks)]
    num_micro = []
    for m in range(n_mini):
        members = [i for i in range(len(docs)) if mini_of[i] == m]
        plan = plan_step(
            [len(docs[i]) for i in members], ranks, config.data.seq_len, mb, config.data.pack
        )
        num_micro.append(max(1, plan.num_micro))
        for r, micro in enumerate(plan.ranks):
            base = len(local[r])
            flat = [members[i] for mbatch in micro for row in mbatch for i in row]
            local[r].extend(flat)
            index = {g: base + k for k, g in enumerate(flat)}
            minis[r].append(
                [[[index[members[i]] for i in row] for row in mbatch] for mbatch in micro]
            )
    return [
        RankStep([docs[i] for i in local[r]], minis[r], num_micro, objective) for r in range(ranks)
    ]


def prepare_step(
    stage: str,
    batch: list[Any],
    config: Config,
    tokenizer: Any,
    processor: Any,
    micro_batch: int | None = None,
) -> list[RankStep]:
    """Per-rank work for one training call of ``stage`` on ``batch``."""
    seq_len = config.data.seq_len
    if stage == "pretrain":
        docs = pretrain_documents(batch, tokenizer, processor, seq_len)
    elif stage == "sft":
        docs = sft_documents(batch, tokenizer, processor, seq_len)
    elif stage == "rl":
        docs, mini_of, n_mini = rl_documents(batch, config, processor)
        steps = split_step(docs, mini_of, config, "policy", micro_batch, num_mini=n_mini)
        steps[0].info["zero_advantage_samples"] = len(batch) - sum(map(samples_in, docs))
        return steps
    else:
        raise ValueError(f"unknown stage {stage!r} (pretrain, sft, rl)")
    if not docs:
        raise ValueError(f"{stage} batch has no trainable tokens")
    _normalise_tokens(docs)
    return split_step(docs, [0] * len(docs), config, "lm", micro_batch)
