"""What the reward scorer does with a request before and around its verifiers: malformed
options and timeouts are request errors naming the option, and its cache keeps apart answers
that normalise alike."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"iou_threshold": None}, "option 'iou_threshold' must be a number from 0 to below 1"),
        ({"iou_threshold": "high"}, "option 'iou_threshold' must be a number"),
        ({"iou_threshold": 1.0}, "option 'iou_threshold' must be a number"),  # nothing matches
        ({"iou_threshold": -0.1}, "option 'iou_threshold' must be a number"),  # everything does
        ({"rel_tol": "abc"}, "option 'rel_tol' must be a number of at least 0, got 'abc'"),
        ({"rel_tol": float("nan")}, "option 'rel_tol' must be a number"),
        ({"rel_tol": True}, "option 'rel_tol' must be a number"),
        ({"point_radius": [1]}, "option 'point_radius' must be a number"),
        ({"partial_credit": "false"}, "option 'partial_credit' must be true or false"),  # truthy
        ({"penalize_extra_boxes": None}, "option 'penalize_extra_boxes' must be true or false"),
        ({"format": "xml"}, "option 'format' must be one of glm, bare, boxed, got 'xml'"),
    ],
)
def test_a_malformed_option_is_a_request_error_naming_it(scorer, options, problem):
    """A malformed option used to reach the verifier, which raised (a 'verifier' error that
    looks like a bug in the verifier), or read it wrongly ("false" is true); an unknown format
    was a 'format' error, trained on as the model's fault."""
    for domain, answer in (
        ("grounding", [[0, 0, 10, 10]]),
        ("gui", {"action": "click", "box": [480, 280, 560, 330]}),
        ("math", "1"),
    ):
        res = scorer.score(domain, "1", answer, **{"format": "bare", **options})
        assert (res.reward, res.error, res.domain) == (0.0, "request", domain)
        assert res.detail.startswith(problem), res.detail
    ok = scorer.score("grounding", "[0,0,10,10]", [[0, 0, 10, 10]], format="bare",
                      iou_threshold="0.4", penalize_extra_boxes=False)  # fmt: skip
    assert (ok.reward, ok.error) == (1.0, None)


@pytest.mark.parametrize("timeout_s", ["abc", -1, 0, float("nan"), float("inf"), [5]])
def test_a_malformed_timeout_is_a_request_error_naming_it(scorer, timeout_s):
    """``timeout_s`` raised out of ``score`` and ``score_batch`` (float("abc")), or went to the
    pool as is: 0 or less timed out every item, inf waited for ever on a hung verifier."""
    import re

    from conftest import glm

    from rewards import RewardScorer

    problem = f"option 'timeout_s' must be a finite number of seconds above 0, got {timeout_s!r}"
    items = [("math", glm("1"), "1"), ("ocr", glm("ab"), "ab")]
    as_option = {"domain": "math", "response": glm("1"), "answer": "1",
                 "options": {"timeout_s": timeout_s}}  # fmt: skip
    results = [
        scorer.score("math", glm("1"), "1", timeout_s=timeout_s),
        *scorer.score_batch(items, timeout_s=timeout_s),
        *scorer.score_batch([as_option]),
    ]
    assert [(r.reward, r.error, r.detail) for r in results] == [(0.0, "request", problem)] * 4
    assert [r.domain for r in results] == ["math", "math", "ocr", "math"]
    assert [r.reward for r in scorer.score_batch(items, timeout_s="2.5")] == [1.0, 1.0]
    with pytest.raises(ValueError, match=re.escape(f"RewardScorer: {problem}")):
        RewardScorer(1, timeout_s=timeout_s)


def test_a_scorer_with_malformed_default_options_refuses_to_start():
    from rewards import RewardScorer

    with pytest.raises(ValueError, match="option 'rel_tol' must be a number"):
        RewardScorer(1, defaults={"rel_tol": None})


def test_vqa_cache_keeps_apart_answers_that_normalise_alike_but_differ_in_length(scorer):
    """A refused over-long answer ("a a a ... yes") normalises to "yes": its parse error used
    to be cached under that key and served to every later correct "yes"."""
    from conftest import glm

    padded = "a " * 6000 + "yes"
    results = scorer.score_batch([("vqa", glm(padded), "yes"), ("vqa", glm("yes"), "yes")])
    assert [(r.reward, r.error) for r in results] == [(0.0, "parse"), (1.0, None)]
    assert scorer.score("vqa", glm("yes"), "yes").reward == 1.0


def test_vqa_cache_keeps_apart_answers_that_differ_only_in_articles(scorer):
    from conftest import glm

    items = [{"domain": "vqa", "response": glm(p), "answer": "A"} for p in ("The", "A", "the")]
    assert [r.reward for r in scorer.score_batch(items)] == [0.0, 1.0, 0.0]
