"""Open-ended (non-verifiable) items: a verifier with ``answer_box = False`` is given the whole
answer text, and a response that boxes its answer gets the minimum reward, as the recipe's
format rule says."""

from __future__ import annotations

import pytest

from rewards import FormatError, extract, register

PLAIN = "<think>Describe it.</think><answer>A red square on a white page, top left.</answer>"
BOXED = "<think>.</think><answer>A <|begin_of_box|>red square<|end_of_box|></answer>"
TEX_BOXED = "<think>.</think><answer>A \\boxed{red square}</answer>"


@pytest.mark.parametrize("pad", ["", "x" * 10_000])  # counted whole, and by marker hops
def test_an_open_ended_answer_is_the_whole_answer_text_and_may_hold_no_box(pad):
    plain, boxed, tex = (r.replace("<think>", "<think>" + pad) for r in (PLAIN, BOXED, TEX_BOXED))
    assert extract(plain, box=False) == "A red square on a white page, top left."
    for response in (boxed, tex):
        with pytest.raises(FormatError, match="a box in the answer of an open-ended item"):
            extract(response, box=False)
    # the tags are still required
    with pytest.raises(FormatError, match="no </think>"):
        extract("<think>Describe it.<answer>A red square.</answer>", box=False)
    # a verifiable item still needs its box
    with pytest.raises(FormatError, match="no <\\|begin_of_box\\|>"):
        extract(plain)
    assert extract("A red \\boxed{x} square", "boxed") == "x"
    with pytest.raises(FormatError, match="open-ended"):
        extract("A red \\boxed{x} square", "boxed", box=False)
    assert extract(" A red square ", "boxed", box=False) == "A red square"


def test_an_open_ended_domain_is_scored_by_its_judge_and_a_boxed_answer_gets_the_minimum(scorer):
    register("judge", "open_ended_verifiers:LengthJudge")
    res = scorer.score("judge", PLAIN, None)  # no ground truth needed
    assert (res.reward, res.error, res.extracted) == (
        0.9,
        None,
        "A red square on a white page, top left.",
    )
    res = scorer.score("judge", BOXED, None)
    assert (res.reward, res.error, res.format_ok) == (0.0, "format", False)
    assert res.detail == "a box in the answer of an open-ended item, which has no verifiable answer"
    # gated in a worker when the response is large and costly to gate here
    big = PLAIN.replace("<think>", "<think>" + " a < b" * 12_000)
    assert scorer.score("judge", big, None, max_repetition=1.0).reward == 0.9
    big_boxed = BOXED.replace("<think>", "<think>" + " a < b" * 12_000)
    res = scorer.score("judge", big_boxed, None, max_repetition=1.0)
    assert (res.reward, res.error) == (0.0, "format") and "open-ended" in res.detail
