"""Boxes in 0-999 normalised image coordinates: reading them from text, and IoU via shapely.

The format, shared by grounding and GUI: ``[x1, y1, x2, y2]`` with ``x1 < x2`` and
``y1 < y2``, integers or decimals in 0..999. Several boxes: ``[[...], [...]]`` or boxes
separated by commas or spaces. Anything else is a parse error, never an exception.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import shapely

COORD_MAX = 999.0
MAX_BOXES = 100
_NUM = r"\s*([+-]?\d+(?:\.\d+)?)\s*"
_BOX = re.compile(r"[\[(]" + ",".join([_NUM] * 4) + r"[\])]")
_POINT = re.compile(r"[\[(]" + ",".join([_NUM] * 2) + r"[\])]")
_LEFTOVER = re.compile(r"[^\s,\[\]()]")


class BoxError(ValueError):
    """Malformed box text or values; the message says which."""


def _no_booleans(values: Any, what: str) -> None:
    """``float`` reads ``true`` as 1 and ``false`` as 0: a coordinate it is not."""
    if any(isinstance(v, bool) for v in values):
        raise BoxError(f"{what} coordinates must be numbers, got {values!r:.60}")


def check_box(box: Any) -> tuple[float, float, float, float]:
    if not isinstance(box, (list, tuple)) or len(box) != 4:
        raise BoxError(f"a box is [x1, y1, x2, y2], got {box!r:.60}")
    _no_booleans(box, "box")
    try:
        x1, y1, x2, y2 = map(float, box)
    except (TypeError, ValueError):
        raise BoxError(f"box coordinates must be numbers, got {box!r:.60}") from None
    if 0.0 <= x1 < x2 <= COORD_MAX and 0.0 <= y1 < y2 <= COORD_MAX:
        return x1, y1, x2, y2
    if not all(0.0 <= v <= COORD_MAX for v in (x1, y1, x2, y2)):
        raise BoxError(f"box coordinates must lie in 0..999, got {box!r:.60}")
    raise BoxError(f"box needs x1 < x2 and y1 < y2, got {box!r:.60}")


def check_point(point: Any) -> tuple[float, float]:
    if not isinstance(point, (list, tuple)) or len(point) != 2:
        raise BoxError(f"a point is [x, y], got {point!r:.60}")
    _no_booleans(point, "point")
    try:
        x, y = (float(v) for v in point)
    except (TypeError, ValueError):
        raise BoxError(f"point coordinates must be numbers, got {point!r:.60}") from None
    if not (0.0 <= x <= COORD_MAX and 0.0 <= y <= COORD_MAX):
        raise BoxError(f"point coordinates must lie in 0..999, got {point!r:.60}")
    return x, y


def parse_boxes(value: Any) -> list[tuple[float, float, float, float]]:
    """Boxes from model text or from a ground-truth value (a box, a list of boxes, or JSON)."""
    if isinstance(value, str):
        if len(value) > 20_000:
            raise BoxError("box text longer than 20000 characters")
        found = _BOX.findall(value)
        if not found:
            raise BoxError(f"no [x1, y1, x2, y2] box in {value!r:.60}")
        if _LEFTOVER.search(_BOX.sub(" ", value)):
            raise BoxError(f"text besides boxes in {value!r:.60}")
        boxes = [check_box(b) for b in found]
    elif isinstance(value, (list, tuple)) and value and not isinstance(value[0], (list, tuple)):
        boxes = [check_box(value)]
    elif isinstance(value, (list, tuple)):
        boxes = [check_box(b) for b in value]
    elif isinstance(value, dict) and "boxes" in value:
        return parse_boxes(value["boxes"])
    else:
        raise BoxError(f"expected boxes, got {type(value).__name__}")
    if not boxes:  # no ratio to take (and no prediction could ever match it)
        raise BoxError("no boxes (an empty list)")
    if len(boxes) > MAX_BOXES:
        raise BoxError(f"more than {MAX_BOXES} boxes")
    return boxes


def parse_point(text: str) -> tuple[float, float]:
    m = _POINT.fullmatch(text.strip())
    if not m:
        raise BoxError(f"expected a point [x, y], got {text!r:.60}")
    return check_point([m.group(1), m.group(2)])


def iou_matrix(pred: list, gt: list) -> np.ndarray:
    """IoU of every predicted box against every ground-truth box, shape (len(pred), len(gt)).
    Intersections come from shapely's rectangle clipping, which is several times cheaper than
    a general polygon intersection and exact for axis-aligned boxes."""
    gt_arr = np.asarray(gt, dtype=float)
    p = shapely.box(*np.asarray(pred, dtype=float).T)
    inter = np.empty((len(p), len(gt_arr)))
    for j, (x1, y1, x2, y2) in enumerate(gt_arr.tolist()):
        inter[:, j] = shapely.area(shapely.clip_by_rect(p, x1, y1, x2, y2))
    gt_area = (gt_arr[:, 2] - gt_arr[:, 0]) * (gt_arr[:, 3] - gt_arr[:, 1])
    union = shapely.area(p)[:, None] + gt_area[None, :] - inter
    return inter / union


def from_json(value: Any) -> Any:
    """Ground truth given as a JSON string is decoded; anything else passes through."""
    if isinstance(value, str) and value.lstrip()[:1] in "[{":
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def centre(box: tuple[float, float, float, float]) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def closeness(
    point: tuple[float, float], target: tuple[float, float], sx: float, sy: float
) -> float:
    """How near ``point`` is to ``target``: ``exp(-((dx / sx)^2 + (dy / sy)^2) / 2)``, 1 on it,
    0.61 one scale away along an axis, 0.14 two scales away. The shaped rewards of
    ``position_shaping`` take the scales from the target's size."""
    dx = (point[0] - target[0]) / max(sx, 1.0)
    dy = (point[1] - target[1]) / max(sy, 1.0)
    return math.exp(-0.5 * (dx * dx + dy * dy))
