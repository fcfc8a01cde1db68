"""Degenerate thinking (a repetition loop, heavy language mixing) scores 0 as a format error,
whatever the answer; natural thinking in any one language, and answers that repeat or are in
another language than the thinking, are scored as before."""

from __future__ import annotations

import time

import pytest
from conftest import glm

from rewards import degenerate

REASONING = (
    "To find the area of the triangle we first read the base and the height from the figure. "
    "The base is labelled 12 centimetres and the height is 5 centimetres, so the area is one "
    "half of the base times the height, which gives 30 square centimetres. Checking the units, "
    "both lengths are in centimetres, so the result is in square centimetres as asked."
)
LOOP = REASONING[:120] + " so the area is 30." * 40
CHINESE = (
    "首先我们读取图中的底和高。底是十二厘米，高是五厘米，所以面积是底乘以高的一半，也就是三十"
    "平方厘米。检查单位，两个长度都是厘米，所以结果是平方厘米。设 a = 3, b = 4, 则 "
    "\\sqrt{a^2+b^2} = 5, 所以 c = 5。"
)
MIXED = (
    "首先 we read the 底 and the 高 from the figure, 然后 we compute 面积 as half of the base "
    "times height, 所以 the answer 是 thirty 平方厘米 and we check 单位 again 因为 units matter"
)


def test_a_repetition_loop_in_the_thinking_scores_zero_as_a_format_error(scorer):
    res = scorer.score("math", glm("30", think=LOOP), "30")
    assert (res.reward, res.error, res.format_ok, res.extracted) == (0.0, "format", False, "30")
    assert res.detail.startswith("repetitive thinking: 8") and "max_repetition 0.5" in res.detail
    assert scorer.score("math", glm("30", think=REASONING), "30").reward == 1.0
    # spaces are no escape: a run of letters counts in pieces
    res = scorer.score("ocr", glm("ab", think="ab" * 400), "ab")
    assert (res.error, res.detail[:19]) == ("format", "repetitive thinking")


def test_heavily_mixed_languages_in_the_thinking_score_zero(scorer):
    res = scorer.score("math", glm("30", think=MIXED), "30")
    assert (res.reward, res.error) == (0.0, "format")
    assert res.detail.startswith("mixed-language thinking: ") and "main script, Latin" in res.detail
    # one language with its formulas (variables, LaTeX commands, digits) is not mixed
    assert scorer.score("math", glm("30", think=CHINESE), "30").reward == 1.0


def test_the_answer_itself_may_repeat_or_be_in_another_language(scorer):
    cells = " ".join(["0"] * 200)
    assert scorer.score("ocr", glm(cells, think=REASONING), cells).reward == 1.0
    page = "北京欢迎你" * 20
    assert scorer.score("ocr", glm(page, think=REASONING), page).reward == 1.0


def test_the_limits_are_options_and_one_turns_a_check_off(scorer):
    off = {"max_repetition": 1.0, "max_language_mix": 1.0}
    assert scorer.score("math", glm("30", think=LOOP), "30", **off).reward == 1.0
    assert scorer.score("math", glm("30", think=MIXED), "30", **off).reward == 1.0
    strict = scorer.score("math", glm("30", think=REASONING), "30", max_repetition=0.0)
    assert strict.reward == 1.0  # natural text repeats no 4-word phrase at all here
    bad = scorer.score("math", glm("30"), "30", max_repetition=2)
    assert (bad.error, bad.detail) == (
        "request",
        "option 'max_repetition' must be a number from 0 to 1, got 2",
    )
    # the other formats have no thinking to judge
    assert scorer.score("math", LOOP + " 30", "30", format="bare").error != "format"


def test_a_response_too_large_to_gate_here_is_judged_in_the_worker(scorer):
    # many '<' make the gate costly, so it runs in a worker, under the time limit
    think = LOOP + " a < b" * 12_000
    res = scorer.score("math", glm("30", think=think), "30")
    assert len(glm("30", think=think)) > 65_536
    assert (res.reward, res.error, res.format_ok, res.extracted) == (0.0, "format", False, "30")
    assert res.detail.startswith("repetitive thinking")


def test_the_check_reads_a_bounded_window_so_a_megabyte_costs_milliseconds():
    huge = (
        "<think>" + "word%d " * 150_000 + "</think><answer><|begin_of_box|>1<|end_of_box|></answer>"
    )
    start = time.perf_counter()
    assert degenerate.problem(huge, {}).startswith("repetitive thinking: 100%")
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(
    ("think", "judged"),
    [("so the area is 30. " * 10, False), ("so the area is 30. " * 11, True)],
)
def test_short_thinking_is_not_judged(think, judged):
    assert (degenerate.repetition(degenerate._words(think)) is not None) == judged


def test_a_run_config_sets_the_limits_for_its_reward_pool():
    from actors.reward import options_from_config
    from rlcs.config import RewardConfig

    opts = options_from_config(RewardConfig(max_repetition=0.7, max_language_mix=1.0))
    assert (opts["max_repetition"], opts["max_language_mix"]) == (0.7, 1.0)
    with pytest.raises(ValueError, match="less than or equal to 1"):
        RewardConfig(max_language_mix=1.5)
