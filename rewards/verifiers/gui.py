"""GUI agent actions: one JSON object per step, documented in docs/rewards.md.

The model writes e.g. ``{"action": "click", "point": [512, 300]}``; the ground truth names the
target element's box: ``{"action": "click", "box": [480, 280, 560, 330]}``.

- The action type must match exactly.
- Position: a predicted point must fall inside the target box (or within ``point_radius`` of a
  target point); a predicted box must reach IoU > tau with the target box.
- Text, key, direction and app arguments must match exactly after normalisation.
- Binary by default; ``partial_credit=True`` gives ``(1 + arguments right) / (1 + arguments)``
  once the action type is right.
- ``position_shaping=w`` (0 by default; not with ``partial_credit``) shapes a miss for
  training: when the action type and every text argument are right and only a position is
  wrong, the reward is ``w`` times the mean ``closeness`` of the positions (1 for a right one;
  a Gaussian of the offset from the target's centre in units of the target box's width and
  height, or of ``point_radius``), so a click near the element scores more than one across the
  page, and only a hit scores 1. Held-out evaluation and grading score without it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from rewards.base import Verdict, Verifier
from rewards.verifiers.boxes import BoxError, centre, check_box, check_point, closeness, iou_matrix

ACTIONS = {
    "click": ("target",),
    "double_click": ("target",),
    "right_click": ("target",),
    "long_press": ("target",),
    "hover": ("target",),
    "type": ("text",),
    "key": ("key",),
    "scroll": ("direction",),
    "drag": ("start", "end"),
    "open_app": ("app",),
    "wait": (),
    "back": (),
    "home": (),
    "done": (),
}
KEY_ALIASES = {
    "return": "enter",
    "esc": "escape",
    "del": "delete",
    "arrowup": "up",
    "arrowdown": "down",
    "control": "ctrl",
    "command": "cmd",
}
#: keys held down in a combo: their order does not matter (``shift+ctrl+t`` is ``ctrl+shift+t``)
MODIFIERS = frozenset({"ctrl", "shift", "alt", "option", "cmd", "meta", "win", "super", "fn"})
DEFAULT_IOU = 0.5
DEFAULT_POINT_RADIUS = 14.0
MAX_CHARS = 20_000


class ActionError(ValueError):
    """Not a valid action object; the message says why."""


def parse_action(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        if len(value) > MAX_CHARS:
            raise ActionError(f"action longer than {MAX_CHARS} characters")
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise ActionError(f"not JSON: {value!r:.60}") from None
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        raise ActionError('an action is a JSON object with a string "action" field')
    action = value["action"].strip().lower()
    if action not in ACTIONS:
        raise ActionError(f"unknown action {action!r}; known: {', '.join(sorted(ACTIONS))}")
    return {**value, "action": action}


def _target(action: Mapping[str, Any], name: str) -> tuple[str, tuple] | None:
    """A positional argument as ('point', xy) or ('box', xyxy); accepts ``start_box`` etc."""
    keys = ("point", "box") if name == "target" else (name, f"{name}_box", f"{name}_point")
    for key in keys:
        if key in action:
            v = action[key]
            if isinstance(v, (list, tuple)) and len(v) == 2:
                return "point", check_point(v)
            return "box", check_box(v)
    return None


def _targets(action: Mapping[str, Any]) -> dict[str, tuple[str, tuple] | None]:
    """The positional arguments of ``action`` (``_target`` of each), checked."""
    return {a: _target(action, a) for a in ACTIONS[action["action"]] if a in _POSITIONAL}


def _ground_truth(answer: Any) -> tuple[dict[str, Any], dict[str, tuple[str, tuple] | None]]:
    """The ground truth action and its checked targets; ``ActionError`` or ``BoxError`` when
    a target is malformed or a text, key, direction or app it gives is not text."""
    gt = parse_action(answer)
    wants = _targets(gt)
    for arg in ACTIONS[gt["action"]]:
        if arg not in _POSITIONAL and arg in gt and _argument(gt[arg]) is None:
            got = "null" if gt[arg] is None else repr(gt[arg])[:60]
            raise ActionError(f"{arg!r} must be text, got {got}")
    return gt, wants


_POSITIONAL = ("target", "start", "end")


def _position_ok(pred: tuple[str, tuple], gt: tuple[str, tuple], options: Mapping) -> bool:
    tau = float(options.get("iou_threshold", DEFAULT_IOU))
    radius = float(options.get("point_radius", DEFAULT_POINT_RADIUS))
    (pk, pv), (gk, gv) = pred, gt
    if gk == "box" and pk == "point":
        return gv[0] <= pv[0] <= gv[2] and gv[1] <= pv[1] <= gv[3]
    if gk == "box" and pk == "box":
        return bool(iou_matrix([pv], [gv])[0, 0] > tau)
    return math.dist(pv if pk == "point" else centre(pv), gv) <= radius


def _closeness(pred: tuple[str, tuple], gt: tuple[str, tuple], options: Mapping) -> float:
    """``boxes.closeness`` of a predicted position to the target: scaled by the target box's
    width and height, or by ``point_radius`` for a target point."""
    (pk, pv), (gk, gv) = pred, gt
    at = pv if pk == "point" else centre(pv)
    if gk == "box":
        return closeness(at, centre(gv), gv[2] - gv[0], gv[3] - gv[1])
    radius = float(options.get("point_radius", DEFAULT_POINT_RADIUS))
    return closeness(at, gv, radius, radius)


def _norm_text(v: Any) -> str:
    return " ".join(str(v).split())


def _norm_key(v: Any) -> str:
    """The modifiers in a fixed order, then the other keys as written: ``c+ctrl`` is
    ``ctrl+c``, while ``ctrl+c`` is neither ``ctrl+v`` nor ``c``."""
    k = "".join(str(v).lower().split())
    keys = [KEY_ALIASES.get(p, p) for p in k.split("+")]
    held = sorted({p for p in keys if p in MODIFIERS})
    return "+".join(held + [p for p in keys if p not in MODIFIERS])


def _argument(v: Any) -> Any:
    """A text, key, direction or app argument as text; None when it is none (null, a list,
    an object, a boolean): ``str`` would make null the text ``None``."""
    if isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return v
    return None


_NORMALIZERS = {"text": _norm_text, "key": _norm_key, "direction": lambda v: str(v).strip().lower(),
                "app": lambda v: _norm_text(v).casefold()}  # fmt: skip


class GUIVerifier(Verifier):
    name = "gui"

    def bounded(self, extracted: str, answer: Any) -> bool:
        return len(extracted) <= 1024 and (isinstance(answer, dict) or len(str(answer)) <= 1024)

    def check_answer(self, answer: Any) -> str | None:
        try:
            _ground_truth(answer)
        except (ActionError, BoxError) as e:
            return f"ground truth: {e}"
        return None

    def verify(self, extracted: str, answer: Any, options: Mapping[str, Any]) -> Verdict:
        try:
            gt, wants = _ground_truth(answer)  # a malformed target is the ground truth's fault
        except (ActionError, BoxError) as e:
            return Verdict(0.0, "answer", f"ground truth: {e}")
        try:
            pred = parse_action(extracted)
        except ActionError as e:
            return Verdict(0.0, "parse", str(e))
        if pred["action"] != gt["action"]:
            return Verdict(0.0, None, f"action {pred['action']} != {gt['action']}")
        checks, wrong, near = 0, [], []
        for arg in ACTIONS[gt["action"]]:
            try:
                if arg in _POSITIONAL:
                    want = wants[arg]
                    if want is None:
                        continue
                    got = _target(pred, arg)
                    ok = got is not None and _position_ok(got, want, options)
                    near.append(
                        1.0 if ok else 0.0 if got is None else _closeness(got, want, options)
                    )
                elif arg in gt:
                    norm = _NORMALIZERS[arg]
                    got = _argument(pred.get(arg))
                    ok = got is not None and norm(got) == norm(gt[arg])
                else:
                    continue
            except BoxError as e:
                return Verdict(0.0, "parse", str(e))
            checks += 1
            if not ok:
                wrong.append(arg)
        if not wrong:
            return Verdict(1.0)
        detail = "wrong: " + ", ".join(wrong)
        shaping = float(options.get("position_shaping", 0.0))
        if shaping > 0.0 and all(a in _POSITIONAL for a in wrong):
            shaped = sum(near) / len(near)
            return Verdict(shaping * shaped, None, f"{detail}, shaped (closeness {shaped:.2f})")
        if options.get("partial_credit", False):
            return Verdict((1 + checks - len(wrong)) / (1 + checks), None, detail)
        return Verdict(0.0, None, detail)
