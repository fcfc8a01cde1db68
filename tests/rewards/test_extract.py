"""The GLM format gate and the bare / boxed alternatives."""

from __future__ import annotations

import pytest

from rewards import FormatError, extract

BOX = "<|begin_of_box|>{}<|end_of_box|>"


def test_glm_takes_the_box_content():
    r = "<think>2+2 is 4</think>\n<answer>The total is " + BOX.format(" 4 ") + ".</answer>"
    assert extract(r) == "4"


def test_glm_allows_empty_thinking_for_nothink_mode():
    assert extract("<think></think><answer>" + BOX.format("7") + "</answer>") == "7"


def test_glm_ignores_boxes_inside_thinking():
    r = "<think>maybe " + BOX.format("3") + "</think><answer>" + BOX.format("4") + "</answer>"
    assert extract(r) == "4"


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("<answer>" + BOX.format("4") + "</answer>", "start with <think>"),
        ("<think>x<answer>" + BOX.format("4") + "</answer>", "no </think>"),
        ("<think>x</think><answer>" + BOX.format("4") + "</answer> trailing", "end with </answer>"),
        ("<think>x</think>" + BOX.format("4"), "followed by <answer>"),
        ("<think>x</think><answer>4</answer>", "no <|begin_of_box|>"),
        (
            "<think>x</think><answer>" + BOX.format("4") + BOX.format("5") + "</answer>",
            "more than one box",
        ),
        ("<think><think>x</think></think><answer>" + BOX.format("4") + "</answer>", "nested"),
        ("<think>x</think><answer><answer>" + BOX.format("4") + "</answer></answer>", "nested"),
        (  # answer tags in the thinking are repeated answer tags too
            "<think><answer>"
            + BOX.format("3")
            + "</answer></think><answer>"
            + BOX.format("4")
            + "</answer>",
            "repeated <answer>",
        ),
        ("<think>x</think><answer>\\boxed{4} " + BOX.format("4") + "</answer>", "\\boxed{"),
        # TeX ignores the space: \boxed {4} is the same box, and used to pass the gate
        ("<think>x</think><answer>\\boxed {4} " + BOX.format("4") + "</answer>", "\\boxed{"),
        ("<think>x</think><answer>\\boxed\n{4} " + BOX.format("4") + "</answer>", "\\boxed{"),
    ],
)
def test_glm_gate_names_the_problem(response, reason):
    with pytest.raises(FormatError, match=None) as e:
        extract(response)
    assert reason in str(e.value)


def test_bare_and_boxed_formats():
    assert extract("  42 ", "bare") == "42"
    assert (
        extract("first \\boxed{1}, finally \\boxed{\\frac{1}{2}} done", "boxed") == "\\frac{1}{2}"
    )
    with pytest.raises(FormatError, match="no \\\\boxed"):
        extract("no box here", "boxed")
    with pytest.raises(FormatError, match="unknown format"):
        extract("x", "xml")


def test_format_failure_is_reward_zero_with_reason(scorer):
    res = scorer.score("math", "<think>x</think><answer>4</answer>", "4")
    assert (res.reward, res.format_ok, res.error) == (0.0, False, "format")
    assert "box" in res.detail
    assert scorer.counters()["math"]["format_failures"] >= 1


def test_a_megabyte_response_is_gated_quickly(scorer):
    import time

    think = " ".join(f"blah {k}" for k in range(100_000))  # varied: a loop would be degenerate
    big = "<think>" + think + "</think><answer>" + BOX.format("4") + "</answer>"
    start = time.monotonic()
    res = scorer.score("math", big, "4")
    assert res.reward == 1.0
    assert time.monotonic() - start < 1.0


def test_answer_tags_inside_a_long_thinking_are_rejected_as_in_a_short_one():
    tail = "</think><answer>" + BOX.format("4") + "</answer>"
    for pad in ("", "x" * 10_000):  # short text is counted whole; long text by marker hops
        with pytest.raises(FormatError, match="repeated <answer>"):
            extract("<think>" + pad + "<answer>3</answer>" + tail)
        assert extract("<think>" + pad + tail) == "4"


def test_boxed_with_a_space_before_its_brace_is_rejected_in_a_long_response_too():
    for pad in ("", "x" * 10_000):  # short text is counted whole; long text by marker hops
        answer = "<answer>\\boxed  {4} " + BOX.format("4") + "</answer>"
        with pytest.raises(FormatError, match="boxed"):
            extract("<think>" + pad + "</think>" + answer)
        # a command that only starts like \boxed is not one
        answer = "<answer>\\boxedx{4} \\boxedness " + BOX.format("4") + "</answer>"
        assert extract("<think>" + pad + "</think>" + answer) == "4"


@pytest.mark.parametrize(
    ("inside", "message"),
    [
        ("\\fbox{1}", "\\fbox{ inside <answer>; use the box markers"),
        ("\\fbox 1", "\\fbox inside <answer> (TeX boxes the token after it); use the box markers"),
        ("\\fbox", "\\fbox inside <answer> (TeX boxes the token after it); use the box markers"),
    ],
)
def test_fbox_in_the_answer_is_rejected_like_boxed(inside, message):
    """``\\fbox{1}`` is a box as ``last_boxed`` reads one: a second answer beside the markers."""
    for pad in ("", "x" * 10_000):  # short text is counted whole; long text by marker hops
        answer = "<answer>" + inside + " " + BOX.format("1") + "</answer>"
        with pytest.raises(FormatError) as e:
            extract("<think>" + pad + "</think>" + answer)
        assert str(e.value) == message
    assert extract("<think>x</think><answer>\\fboxed " + BOX.format("1") + "</answer>") == "1"


@pytest.mark.parametrize(
    "inside",
    ["\\boxed 1", "\\boxed1", "\\boxed\\pi", "\\boxed  x", "\\boxed\n7", "\\boxed"],
)
def test_boxed_without_braces_is_rejected_like_boxed_with_them(inside):
    """TeX boxes the next token when no brace follows: ``\\boxed 1`` is a box around 1, a
    second answer beside the markers, as ``\\boxed{1}`` is."""
    for pad in ("", "x" * 10_000):  # short text is counted whole; long text by marker hops
        answer = "<answer>" + inside + " " + BOX.format("1") + "</answer>"
        with pytest.raises(FormatError) as e:
            extract("<think>" + pad + "</think>" + answer)
        assert (
            str(e.value)
            == "\\boxed inside <answer> (TeX boxes the token after it); use the box markers"
        )


@pytest.mark.parametrize("pad", [0, 5000])  # whole-text counts, and hopping between markers
@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        # a box left open (a response cut short) was reported as "more than one box"
        ("<|begin_of_box|>4", "<|begin_of_box|> without <|end_of_box|> in the answer"),
        ("4<|end_of_box|>", "<|end_of_box|> without <|begin_of_box|> in the answer"),
        ("<|begin_of_box|>4<|begin_of_box|>5<|end_of_box|>", "more than one box in the answer"),
    ],
)
def test_an_unclosed_box_is_named_as_such(answer, reason, pad):
    with pytest.raises(FormatError) as e:
        extract("<think>" + "x " * pad + "</think><answer>" + answer + "</answer>")
    assert str(e.value) == reason
