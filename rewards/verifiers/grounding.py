"""Grounding: the share of ground-truth boxes matched one-to-one by a predicted box with
IoU > tau (default 0.5). See ``boxes.py`` for the box format.

Predicting many boxes to cover everything is the obvious hack: by default the denominator is
``max(#ground truth, #predicted)``, so extra boxes cost reward. ``penalize_extra_boxes=False``
gives the paper's plain ``matched / #ground truth``.

``position_shaping=w`` (0 by default, the paper's rule) shapes an answer that matches no box,
for training: it scores ``w * c``, where ``c`` sums, over the ground-truth boxes, the nearest
predicted box centre's ``closeness`` (a Gaussian of its offset from the truth's centre in units
of the truth's width and height, ``boxes.py``), divided by the same denominator as the matches.
A box in the next cell of a grid then scores more than one across the image, and a shaped
answer scores below ``w``; an answer with a match keeps its ratio. Held-out evaluation and
grading score without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewards.base import Verdict, Verifier
from rewards.verifiers.boxes import BoxError, centre, closeness, from_json, iou_matrix, parse_boxes

DEFAULT_IOU = 0.5


def max_matching(adjacent: list[list[int]], n_right: int) -> int:
    """Size of a maximum bipartite matching (Kuhn's augmenting paths; box counts are small)."""
    owner = [-1] * n_right

    def augment(left: int, seen: list[bool]) -> bool:
        for right in adjacent[left]:
            if not seen[right]:
                seen[right] = True
                if owner[right] < 0 or augment(owner[right], seen):
                    owner[right] = left
                    return True
        return False

    return sum(augment(i, [False] * n_right) for i in range(len(adjacent)))


class GroundingVerifier(Verifier):
    name = "grounding"

    def bounded(self, extracted: str, answer: Any) -> bool:
        small_gt = (
            len(answer) <= 10 if isinstance(answer, (list, tuple)) else len(str(answer)) <= 512
        )
        return len(extracted) <= 512 and small_gt

    def check_answer(self, answer: Any) -> str | None:
        try:
            parse_boxes(from_json(answer))
        except BoxError as e:
            return f"ground truth: {e}"
        return None

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        try:
            gt = parse_boxes(from_json(answer))
        except BoxError as e:
            return Verdict(0.0, "answer", f"ground truth: {e}")
        try:
            pred = parse_boxes(extracted)
        except BoxError as e:
            return Verdict(0.0, "parse", str(e))
        tau = float(options.get("iou_threshold", DEFAULT_IOU))
        ious = iou_matrix(pred, gt)
        adjacent = [[j for j, hit in enumerate(row) if hit] for row in (ious > tau).tolist()]
        matched = max_matching(adjacent, len(gt))
        denominator = len(gt)
        if options.get("penalize_extra_boxes", True):
            denominator = max(len(gt), len(pred))
        reward, detail = matched / denominator, f"{matched}/{len(gt)} matched"
        shaping = float(options.get("position_shaping", 0.0))
        if shaping > 0.0 and matched == 0:
            near = shaped_closeness(pred, gt, denominator)
            reward = shaping * near
            detail += f", shaped (closeness {near:.2f})"
        return Verdict(reward, None, detail)


def shaped_closeness(pred: list, gt: list, denominator: int) -> float:
    """The nearest predicted centre's closeness to each ``gt`` box's centre, summed over
    ``gt`` and divided by the strict rule's ``denominator``: with ``penalize_extra_boxes``,
    boxes sprayed over the image earn no more shaped reward than they earn matches."""
    centres = [centre(p) for p in pred]
    return (
        sum(max(closeness(c, centre(g), g[2] - g[0], g[3] - g[1]) for c in centres) for g in gt)
        / denominator
    )
