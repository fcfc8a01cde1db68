"""``position_shaping``: grounding and GUI misses ranked by how near they land, for training only.

A hit still scores exactly 1 and every miss stays below the weight; held-out evaluation,
grading and ``rlcs eval`` score without it.
"""

from __future__ import annotations

import json
import math

import pytest

from rewards.scoring import option_problem
from rewards.verifiers.boxes import closeness
from rewards.verifiers.grounding import GroundingVerifier
from rewards.verifiers.gui import GUIVerifier

G, U = GroundingVerifier(), GUIVerifier()
BUTTON = {"action": "click", "box": [464, 500, 786, 642]}  # 322 wide, 142 high, centre 625,571
SHAPE = [[268, 517, 624, 874]]  # a grid cell of the demo's grounding items
W = 0.4


def click(x, y):
    return json.dumps({"action": "click", "point": [x, y]})


def test_closeness_is_a_gaussian_of_the_offset_in_target_sizes():
    assert closeness((625, 571), (625, 571), 322, 142) == 1.0
    assert closeness((625, 571 + 142), (625, 571), 322, 142) == pytest.approx(math.exp(-0.5))
    assert closeness((625 + 322, 571 + 142), (625, 571), 322, 142) == pytest.approx(math.exp(-1))
    assert closeness((625, 571), (625, 571), 0.0, 0.0) == 1.0  # a degenerate scale is 1 unit


def test_gui_hit_scores_one_and_misses_rank_by_distance():
    assert U.verify(click(470, 505), BUTTON, {"position_shaping": W}).reward == 1.0
    next_row = U.verify(click(625, 571 + 142), BUTTON, {"position_shaping": W})
    far = U.verify(click(625, 107), BUTTON, {"position_shaping": W})
    assert next_row.reward == pytest.approx(W * math.exp(-0.5))
    assert 0.0 < far.reward < next_row.reward < W
    assert next_row.error is None and "shaped (closeness 0.61)" in next_row.detail
    # off by default: the recipe's binary rule
    assert U.verify(click(625, 571 + 142), BUTTON, {}).reward == 0.0


def test_gui_shaping_needs_the_action_and_its_text_right():
    opts = {"position_shaping": W}
    assert U.verify(json.dumps({"action": "hover", "point": [625, 571]}), BUTTON, opts).reward == 0
    typed = {"action": "type", "text": "hello"}
    assert U.verify(json.dumps({"action": "type", "text": "hell"}), typed, opts).reward == 0.0
    # a drag with its start right and its end one box away: the mean of 1 and exp(-1/2)
    gt = {"action": "drag", "start_box": [0, 0, 20, 20], "end_box": [400, 400, 500, 500]}
    pred = json.dumps({"action": "drag", "start": [10, 10], "end": [550, 450]})
    assert U.verify(pred, gt, opts).reward == pytest.approx(W * (1 + math.exp(-0.5)) / 2)


def test_gui_point_target_scales_by_point_radius():
    gt = {"action": "click", "point": [500, 300]}
    opts = {"position_shaping": W, "point_radius": 10}
    assert U.verify(click(505, 300), gt, opts).reward == 1.0
    assert U.verify(click(520, 300), gt, opts).reward == pytest.approx(W * math.exp(-2))


def test_grounding_hit_scores_one_and_neighbouring_cells_score_more_than_far_ones():
    opts = {"position_shaping": W}
    assert G.verify("[268,517,624,874]", SHAPE, opts).reward == 1.0
    beside = G.verify("[517,517,874,874]", SHAPE, opts)  # the next cell: IoU 0.18, no match
    corner = G.verify("[18,18,375,375]", SHAPE, opts)
    assert G.verify("[517,517,874,874]", SHAPE, {}).reward == 0.0
    assert 0.0 < corner.reward < beside.reward < W
    assert beside.reward == pytest.approx(W * math.exp(-0.5 * (249.5 / 356) ** 2))


def test_grounding_shapes_only_answers_without_a_match():
    gt = [[0, 0, 100, 100], [500, 500, 600, 600]]
    opts = {"position_shaping": W}
    # one match: the ratio as it is, so a shaped answer never reaches a partial match's score
    assert G.verify("[0,0,100,100] [500,620,600,720]", gt, opts).reward == 0.5
    # no match: each truth's nearest centre, one box height and one far away
    near = G.verify("[0,120,100,220] [500,620,600,720]", gt, opts)
    assert near.reward == pytest.approx(W * 2 * math.exp(-0.5 * 1.2**2) / 2)
    assert near.reward < W


def test_boxes_sprayed_over_the_image_earn_less_than_one_near_miss():
    spray = " ".join(f"[{x},{y},{x + 100},{y + 100}]" for x in range(0, 900, 150) for y in (0, 450))
    one_near = G.verify("[517,517,874,874]", SHAPE, {"position_shaping": W}).reward
    sprayed = G.verify(spray, SHAPE, {"position_shaping": W})
    assert sprayed.reward < one_near / 4
    # the paper's plain ratio divides by the truth alone, its shaping too
    plain = G.verify(spray, SHAPE, {"position_shaping": W, "penalize_extra_boxes": False})
    assert sprayed.reward < plain.reward < W


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"position_shaping": 1.0}, "option 'position_shaping' must be a number from 0 to below 1"),
        ({"position_shaping": -0.1}, "option 'position_shaping' must be a number from 0"),
        ({"position_shaping": "x"}, "option 'position_shaping' must be a number"),
        (
            {"position_shaping": 0.3, "partial_credit": True},
            "options 'partial_credit' and 'position_shaping' do not go together",
        ),
    ],
)
def test_bad_shaping_options_are_request_errors(options, problem):
    assert option_problem(options).startswith(problem)


def test_zero_shaping_goes_with_partial_credit():
    assert option_problem({"position_shaping": 0, "partial_credit": True}) is None
